#!/usr/bin/env bash
# The .deb (make package): built from the release build by cpack, it holds what an operator
# needs under the right paths (binary, library and headers, /etc/sluice as conffiles, the
# systemd unit, docs), with Depends found by dpkg-shlibdeps. Unpacked, its binary checks and
# serves its own /etc/sluice (a 200, then a 429), and its unit passes `systemd-analyze verify`
# (with the unpacked binary's path) and scores as hardened under `systemd-analyze security`.
# Installing into a fresh Debian root (debootstrap) is not done here: it downloads a system.
# Usage: BUILD=build/release SLUICE=... tests/package_e2e.sh
set -u
build=$(cd "${BUILD:?set BUILD to the release build directory}" && pwd)
sluice=${SLUICE:-$build/sluice}
source "$(dirname "$0")/lib.sh"
need_tools cpack dpkg-deb curl

(cd "$build" && cpack -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1)
check "cpack builds the .deb" 0 "$?"
deb=$(ls "$tmp"/pkg/sluice_*_amd64.deb 2>/dev/null | head -1)
[[ -n $deb ]] || { cat "$tmp/cpack.log"; finish; exit 1; }

contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for path in ./usr/bin/sluice ./usr/lib/libsluice.so ./usr/include/sluice/limiter.h \
            ./usr/include/sluice/rate_limiter.h ./usr/lib/cmake/sluice/sluiceConfig.cmake \
            ./etc/sluice/sluice.yaml ./etc/sluice/rules/default.yaml \
            ./usr/lib/systemd/system/sluice.service ./usr/share/doc/sluice/README.md \
            ./usr/share/man/man1/sluice.1.gz; do
  check_contains "holds $path" "$path" "$contents"
done
check_contains "Depends on the libraries it links (dpkg-shlibdeps)" "libgrpc++" "$(dpkg-deb -f "$deb" Depends)"
dpkg-deb -e "$deb" "$tmp/control"
check "conffiles: the settings and the rules" \
  "$(printf '/etc/sluice/sluice.yaml\n/etc/sluice/rules/default.yaml')" "$(cat "$tmp/control/conffiles")"
check "the packaged rules are the embedded default's" \
  "$(sed -n '/R"yaml(/,/)yaml"/p' "$(dirname "$0")/../src/cli/default_config.h" | sed '1s/.*R"yaml(//;$d')" \
  "$(dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./etc/sluice/rules/default.yaml)"

root=$tmp/root
dpkg-deb -x "$deb" "$root"
if command -v man >/dev/null; then
  page=$(MANWIDTH=100 man -l "$root/usr/share/man/man1/sluice.1.gz" 2>"$tmp/man.err")
  check_contains "sluice(1) renders" "SLUICE(1)" "$page"
  check_contains "sluice(1) has serve's flags, from --help" "--envoy-env" "$page"
  check "sluice(1): no roff warning" "" "$(cat "$tmp/man.err")"
fi
# The packaged library: examples/ builds against the unpacked /usr with find_package(sluice).
if command -v cmake >/dev/null; then
  cmake -S "$(dirname "$0")/../examples" -B "$tmp/example" -G Ninja -DCMAKE_PREFIX_PATH="$root/usr" \
    >"$tmp/example.log" 2>&1 && cmake --build "$tmp/example" >>"$tmp/example.log" 2>&1
  check "examples/ builds against the packaged library (find_package(sluice))" 0 "$?"
fi
check "check-config on the packaged settings" "ok: 1 domains, 6 limits" \
  "$("$root/usr/bin/sluice" check-config "$root/etc/sluice/sluice.yaml" 2>&1)"
sluice=$root/usr/bin/sluice
start pkg --config "$root/etc/sluice/sluice.yaml"
check "serves the packaged config" 1 "$([[ -n $DATA ]] && echo 1)"
mapfile -t many < <(for _ in $(seq 60); do echo "http://$DATA/v1/auth"; done)
codes=$(curl -s -o /dev/null -w '%{http_code} ' -H 'X-Api-Key: p' "${many[@]}")
check_contains "a 200" "200" "$codes"
check_contains "and a 429" "429" "$codes"
stop
check "SIGTERM: exit 0" 0 "$STATUS"

if command -v systemd-analyze >/dev/null; then
  unit=$tmp/unit/sluice.service
  mkdir -p "$tmp/unit"
  sed "s|/usr/bin/sluice|$root/usr/bin/sluice|g" "$root/usr/lib/systemd/system/sluice.service" >"$unit"
  out=$(systemd-analyze verify "$unit" 2>&1)
  check "systemd-analyze verify: clean" "0:" "$?:$out"
  level=$(systemd-analyze security --offline=yes "$unit" 2>/dev/null | sed -n 's/.*exposure level for sluice.service: \([0-9.]*\).*/\1/p')
  check "systemd-analyze security: exposure below 2 (OK)" 1 "$(awk -v l="${level:-10}" 'BEGIN{print (l < 2) ? 1 : 0}')"
fi
finish
