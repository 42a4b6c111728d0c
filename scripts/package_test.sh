#!/usr/bin/env bash
# Installs the .deb of `make package` into a fresh Debian 12 root, as a new machine would have it
# (debootstrap --variant=minbase, then apt-get install of the .deb and its Depends from Debian),
# and checks it from the installed paths: `sluice check-config` on the installed config, `sluice
# serve` from it answering 200 then 429, and the man page. Needs root, debootstrap and Debian's
# mirror (set MIRROR); it downloads a system, and the tests of `make test` reach nothing beyond
# loopback, so it is run by hand (about 2 minutes here).
#
#   make package && sudo scripts/package_test.sh [build/release/sluice_*_amd64.deb]
#
# Env: MIRROR (http://deb.debian.org/debian), KEEP=1 keeps the root (printed).
set -euo pipefail
deb=${1:-$(ls build/release/sluice_*_amd64.deb 2>/dev/null | head -1)}
[ -f "$deb" ] || { echo "no .deb: run make package first" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "debootstrap is missing (apt-get install debootstrap)" >&2; exit 2; }
mirror=${MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d /tmp/sluice-package-root.XXXXXX)
cleanup() {
  for m in proc dev/pts dev sys; do umount "$root/$m" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "root kept: $root"; else rm -rf "$root" "$root".*.log; fi
}
trap cleanup EXIT

passed=0 failed=0
check() {  # check NAME EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then passed=$((passed + 1)); echo "ok   $1"
  else failed=$((failed + 1)); echo "FAIL $1: expected [$2], got [$3]"; fi
}

start=$(date +%s)
echo "package_test: debootstrap bookworm into $root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
  { tail -20 "$root.debootstrap.log"; exit 1; }
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
cp "$deb" "$root/tmp/sluice.deb"
# No service may start inside the root (there is no systemd running in it anyway).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends /tmp/sluice.deb curl man-db' \
  >"$root.install.log" 2>&1 || { tail -20 "$root.install.log"; exit 1; }
check "installed" "install ok installed" "$(chroot "$root" dpkg-query -W -f='${Status}' sluice)"
check "check-config on the installed config" "ok: 1 domains, 6 limits" \
  "$(chroot "$root" sluice check-config /etc/sluice/sluice.yaml 2>&1)"
chroot "$root" sh -c 'sluice serve --config /etc/sluice/sluice.yaml --listen 127.0.0.1:18480 --admin 127.0.0.1:18481 --grpc 0 >/tmp/serve.out 2>&1 & echo $! >/tmp/serve.pid'
for _ in $(seq 100); do grep -q '^sluice: config' "$root/tmp/serve.out" 2>/dev/null && break; sleep 0.1; done
codes=$(chroot "$root" sh -c 'for i in $(seq 40); do echo http://127.0.0.1:18480/v1/auth; done | xargs curl -s -o /dev/null -w "%{http_code} " -H "X-Api-Key: k"')
case "$codes" in *200*429*) check "serve: a 200, then a 429" 1 1 ;; *) check "serve: a 200, then a 429" "200 ... 429" "$codes" ;; esac
kill "$(cat "$root/tmp/serve.pid")" 2>/dev/null || true
check "man sluice" 1 "$(chroot "$root" man -P cat sluice 2>/dev/null | grep -q 'SLUICE(1)' && echo 1)"
echo "package_test: $(( $(date +%s) - start )) s"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
