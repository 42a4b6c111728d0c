#!/usr/bin/env bash
# Packs the many-core runs into .device-bundle/ for the lent machine, which has no network and no
# Debian packages: the binaries (sluice, memory_latency, openloop, and metrics_benchmark when
# built; nginx, wrk and redis-server from this machine), every shared library they load and this
# machine's own dynamic loader, so that they run there unchanged; the anchors' nginx template,
# wrk scripts and seed script (bench/anchors/), bench/compare/bench.yaml, zipf.lua; and the two
# scripts run there, scale.sh and scenarios.sh, with the shell library they source (bench/lib.sh,
# tests/lib.sh). Needs a release build with the targets sluice,
# openloop and memory_latency.
#
#   bench/device/bundle.sh [PROJECT]     (default: this repository)
#
# Environment: ANCHORS, the anchors' directory (default PROJECT/bench/anchors).
# .device-bundle/ must stay out of git (`/.device-bundle/` in .git/info/exclude); carry it to the
# device machine with `carry: [".device-bundle"]` (bench/README.md, "Many-core runs").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
proj=$(cd "${1:-$here/../..}" && pwd)
anchors=${ANCHORS:-$proj/bench/anchors}
out=$proj/.device-bundle

[ -f "$anchors/nginx/nginx.conf.template" ] || { echo "bundle: no anchors at $anchors (set ANCHORS)" >&2; exit 1; }
bins=("$proj/build/release/sluice" "$proj/build/release/memory_latency" "$proj/build/release/openloop"
  /usr/sbin/nginx /usr/bin/wrk /usr/bin/redis-server)
for b in "${bins[@]}"; do
  [ -x "$b" ] || {
    echo "bundle: missing $b; cmake --build --preset release --target sluice openloop memory_latency" >&2
    exit 1
  }
done
# metrics_benchmark when built (counting into series every thread shares: run it there by hand,
# bench/README.md).
[ -x "$proj/build/release/metrics_benchmark" ] && bins+=("$proj/build/release/metrics_benchmark")

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/conf"
# Each binary, and each library it loads (the loader itself included), once.
for b in "${bins[@]}"; do
  cp -L "$b" "$out/bin/"
  ldd "$b" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | while read -r lib; do
    if [ -f "$lib" ] && [ ! -e "$out/lib/$(basename "$lib")" ]; then cp -L "$lib" "$out/lib/"; fi
  done
done
cp "$anchors/nginx/nginx.conf.template" "$anchors/wrk/keys.lua" "$anchors/wrk/fixed.lua" \
  "$anchors/redis/seed_counter.lua" "$here/zipf.lua" "$proj/bench/compare/bench.yaml" "$out/conf/"
cp "$here/scale.sh" "$here/scenarios.sh" "$out/"
# The shell library they source, at the paths it has here (bench/lib.sh sources ../tests/lib.sh).
mkdir -p "$out/bench" "$out/tests"
cp "$proj/bench/lib.sh" "$out/bench/"
cp "$proj/tests/lib.sh" "$out/tests/"
git -C "$proj" rev-parse --short HEAD >"$out/conf/sluice-commit"
{
  git -C "$proj" rev-parse --short HEAD
  [ -z "$(git -C "$proj" status --porcelain -- bench/device bench/anchors bench/lib.sh tests/lib.sh)" ] ||
    echo "(bench/device, bench/anchors or the shell library has uncommitted changes)"
} | paste -sd' ' >"$out/conf/kit-commit"

# Every binary must start through the bundled loader with only the bundled libraries: each one
# the loader resolves must come from the bundle, not from this machine's system directories.
for b in "$out"/bin/*; do
  outside=$("$out/lib/ld-linux-x86-64.so.2" --library-path "$out/lib" --list "$b" |
    awk -v lib="$out/lib/" '/=>/ && index($3, lib) != 1 {print $1 " => " $3}')
  [ -z "$outside" ] || { echo "bundle: $b loads from outside the bundle: $outside" >&2; exit 1; }
done
du -sh "$out"
