#!/usr/bin/env bash
# Runs the README's two commands as a new user would, on a fresh Debian 12: debootstrap a minimal
# bookworm root, install only what the README says a bare image needs (git, make,
# ca-certificates), clone this repository's HEAD into it, then `make test` (which installs every
# other package through scripts/bootstrap.sh) and `make run` (until it answers a check). Catches
# what a machine that already has a package hides: a package bootstrap.sh forgot.
#
#   sudo scripts/fresh_test.sh
#
# Needs root, debootstrap (installed when missing) and Debian's mirror; it downloads a system, so
# `make test` does not run it: run it before a stop that changes bootstrap, packaging or the test
# set-up. Takes as long as `make test` plus about 5 minutes. The chroot shares this machine's
# network namespace, so its tests use free loopback ports like any other run.
#
# Env: MIRROR (http://deb.debian.org/debian), KEEP=1 keeps the root (printed), REF (HEAD: what is
# committed, as CI sees it), RUN_PORT (18580) and RUN_ADMIN_PORT (18581) for `make run`.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
mirror=${MIRROR:-http://deb.debian.org/debian}
ref=${REF:-HEAD}
run_port=${RUN_PORT:-18580}
admin_port=${RUN_ADMIN_PORT:-18581}

[ "$(id -u)" = 0 ] || { echo "fresh_test: run as root (debootstrap and chroot)" >&2; exit 2; }
if ! command -v debootstrap >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
fi

root=$(mktemp -d /tmp/sluice-fresh-root.XXXXXX)
log=$root.log
run_pid=""
cleanup() {
  # (Under set -e: a kill of a process that has just ended must not end the clean-up.)
  [ -z "$run_pid" ] || kill "$run_pid" 2>/dev/null || true
  # `make run` leaves its server in the root: stop whatever still runs from there, by pid.
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" != "$root" ] || kill "${p#/proc/}" 2>/dev/null || true
  done
  sleep 1
  # Every mount at or below the root, deepest first, until none is left: rm -rf must never find
  # its way into a bind of /dev or /sys (one run was left with proc, sys and the cgroups mounted).
  local mounts _
  below() { awk -v r="$root" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/mounts | sort -r; }
  for _ in 1 2 3; do
    mapfile -t mounts < <(below)
    [ "${#mounts[@]}" = 0 ] && break
    for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null || true; done
    sleep 0.5
  done
  mapfile -t mounts < <(below)
  if [ "${#mounts[@]}" != 0 ]; then
    echo "fresh_test: ${#mounts[@]} mounts still below $root; left in place" >&2
  elif [ "${KEEP:-0}" = 1 ]; then
    echo "fresh_test: root kept: $root (log $log)"
  else
    rm -rf "$root"
  fi
}
# The script's own status, whatever the clean-up's last command returns.
trap 'status=$?; cleanup; exit "$status"' EXIT

passed=0 failed=0
check() { # check NAME CONDITION-STATUS
  if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "ok   $1"
  else failed=$((failed + 1)); echo "FAIL $1 (log: $log)"; fi
}
phase() { echo "fresh_test: $1 ($(( $(date +%s) - start )) s in)"; }
# A clean environment, but for how this machine reaches the registries: its proxy settings and
# Node's extra CA file (the root gets this machine's local CAs below), where set.
carried=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY NODE_EXTRA_CA_CERTS; do
  [ -n "${!v:-}" ] && carried+=("$v=${!v}")
done
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    "${carried[@]}" "$@"
}

start=$(date +%s)
phase "debootstrap --variant=minbase bookworm into $root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$log" 2>&1 || { tail -20 "$log"; exit 1; }
chmod 755 "$root" # mktemp made it 0700: the tests' nginx workers (user nobody) must reach /tmp
# As on a machine, / is a mount point (podman's storage remounts it when it unpacks an image's
# layer: tests/image_e2e.sh) and the cgroup hierarchies are there (runc puts containers in them).
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount -t tmpfs shm "$root/dev/shm"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

phase "apt-get install git make ca-certificates (the README's first step)"
in_root sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git make ca-certificates' \
  >>"$log" 2>&1 || { tail -20 "$log"; exit 1; }
# The CAs this machine added to its own store (a TLS-inspecting proxy's, say): without them the
# root could not reach the npm registry that this machine reaches.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  in_root update-ca-certificates >>"$log" 2>&1
fi

phase "clone $ref of $repo"
git clone -q --no-local "$repo" "$root/root/sluice"
git -C "$root/root/sluice" checkout -q "$(git -C "$repo" rev-parse "$ref")"

phase "make test"
t0=$(date +%s)
set +e
in_root sh -c 'cd /root/sluice && make test' 2>&1 | tee -a "$log" | grep -E '^(make test:|[0-9]+% tests passed|Total Test time|fuzz: [0-9]+ targets|lint: (clean|FAILED))'
status=${PIPESTATUS[0]}
set -e
check "make test on a fresh Debian 12 root ($(( $(date +%s) - t0 )) s)" "$status"

phase "make run (the embedded default config on 127.0.0.1:8080 and :9091)"
# The README's `make run` serves on 8080/9091; this machine may have those taken, so the same
# target runs with its server's ports moved through SLUICE_SERVE_ARGS when the Makefile has it.
in_root sh -c "cd /root/sluice && exec make run SLUICE_SERVE_ARGS='--listen 127.0.0.1:$run_port --admin 127.0.0.1:$admin_port'" \
  >"$root.run.log" 2>&1 &
run_pid=$!
answered=1
for _ in $(seq 1800); do # at most 180 s: the build is there, make only checks it (and bootstrap its packages)
  if code=$(in_root sh -c "command -v curl >/dev/null && curl -s -o /dev/null -w '%{http_code}' -H 'X-Api-Key: k1' http://127.0.0.1:$run_port/v1/auth"); then
    [ "$code" = 200 ] && { answered=0; break; }
  fi
  kill -0 "$run_pid" 2>/dev/null || break
  sleep 0.1
done
check "make run serves: /v1/auth answers 200" "$answered"
cat "$root.run.log" >>"$log"; rm -f "$root.run.log"

phase "done"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
