#!/usr/bin/env bash
# Packs the issue-23 scenarios into .device-bundle/ for the many-core machine: first the shared
# kit's bundle (sluice, memory_latency, nginx, wrk, redis-server, their libraries, this machine's
# dynamic loader, the anchors' nginx template and wrk scripts, scale.sh), then what
# bench/device/scenarios.sh needs on top: openloop and its libraries, scenarios.sh itself,
# zipf.lua for wrk, and this repository's bench.yaml. Needs a release build with the targets
# sluice, openloop and memory_latency.
#
#   bench/device/bundle.sh [PROJECT]     (default: this repository)
#
# Environment: KIT, the shared kit's directory (default PROJECT/../shared/bench/device).
# .device-bundle/ must stay out of git (`/.device-bundle/` in .git/info/exclude); carry it to the
# device machine with `carry: [".device-bundle"]` (bench/README.md, "Many-core runs").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
proj=$(cd "${1:-$here/../..}" && pwd)
kit=${KIT:-$proj/../shared/bench/device}
out=$proj/.device-bundle

[ -f "$kit/bundle.sh" ] || { echo "bundle: no shared kit at $kit (set KIT)" >&2; exit 1; }
openloop=$proj/build/release/openloop
[ -x "$openloop" ] || {
  echo "bundle: missing $openloop; cmake --build --preset release --target sluice openloop memory_latency" >&2
  exit 1
}

bash "$kit/bundle.sh" "$proj"

# openloop, and metrics_benchmark when built (counting into series every thread shares: run it
# there by hand, bench/README.md), with the libraries they load that the shared bundle does not
# have yet (never overwriting one).
extra=("$openloop")
[ -x "$proj/build/release/metrics_benchmark" ] && extra+=("$proj/build/release/metrics_benchmark")
for b in "${extra[@]}"; do
  cp -L "$b" "$out/bin/"
  ldd "$b" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | while read -r lib; do
    if [ -f "$lib" ] && [ ! -e "$out/lib/$(basename "$lib")" ]; then cp -L "$lib" "$out/lib/"; fi
  done
done
cp "$here/scenarios.sh" "$out/"
cp "$here/zipf.lua" "$out/conf/"
cp "$proj/bench/compare/bench.yaml" "$out/conf/"
{
  git -C "$proj" rev-parse --short HEAD
  [ -z "$(git -C "$proj" status --porcelain -- bench/device)" ] || echo "(bench/device has uncommitted changes)"
} | paste -sd' ' >"$out/conf/kit-commit"

# Every binary must start through the bundled loader with only the bundled libraries: each one
# the loader resolves must come from the bundle, not from this machine's system directories.
for b in "$out"/bin/*; do
  outside=$("$out/lib/ld-linux-x86-64.so.2" --library-path "$out/lib" --list "$b" |
    awk -v lib="$out/lib/" '/=>/ && index($3, lib) != 1 {print $1 " => " $3}')
  [ -z "$outside" ] || { echo "bundle: $b loads from outside the bundle: $outside" >&2; exit 1; }
done
du -sh "$out"
