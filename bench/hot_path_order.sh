#!/usr/bin/env bash
# Writes src/cli/hot_path.order: the functions of the `sluice` binary that forward-auth requests
# run, most instructions first (callgrind, bench/callgrind.sh's scenarios), as the ELF sections
# that -ffunction-sections gives them. A release build links `sluice` with gold in that order
# (src/cli/CMakeLists.txt), so that the request path's code sits together: spread over the
# binary, its functions evicted each other from the L1 instruction cache on every request
# (docs/performance.md). Run it again when the request path changes much; a name that no longer
# exists is ignored by the linker, a function missing from the list is only placed farther away.
#
#   bench/hot_path_order.sh            (build/release/sluice, release build)
#
# Env: SLUICE, DURATION (3s), as bench/callgrind.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
sluice="${SLUICE:-$root/build/release/sluice}"
order="$root/src/cli/hot_path.order"
work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-hot-path.XXXXXX")"

outputs=()
for scenario in allow_100k allow_1key deny_1key; do
  CALLGRIND_ARGS=--demangle=no SLUICE="$sluice" DURATION="${DURATION:-3s}" \
    bash "$here/callgrind.sh" "$scenario" 2>"$work/$scenario.err" | tee -a "$work/runs.txt" >&2
  dir=$(sed -n 's/^callgrind: output in //p' "$work/$scenario.err")
  outputs+=("$dir/callgrind.$scenario.out")
done
# Each function of the sluice binary with its instructions summed over the runs, most first.
for out in "${outputs[@]}"; do
  callgrind_annotate --threshold=100 "$out" | awk -v bin="$sluice" '
    index($0, "[" bin "]") && match($0, /\?\?\?:[^ ]+/) {
      name = substr($0, RSTART + 4, RLENGTH - 4); gsub(",", "", $1); print $1, name }'
done | awk '{ sum[$2] += $1 } END { for (f in sum) print sum[f], f }' | sort -k1,1nr |
  awk '{ print ".text." $2 }' >"$order.new"
mv "$order.new" "$order"
echo "hot_path_order: $(wc -l <"$order") functions in $order (callgrind output in $work)" >&2
