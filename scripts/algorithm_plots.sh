#!/usr/bin/env bash
# The figures of docs/algorithms.md's "Choosing an algorithm", from `sluice sim --accuracy` (no
# Redis: each algorithm's exact decisions on a trace, judged against the exact log of the same N
# per W given the same history). Prints the Markdown table and writes
#   docs/img/algorithms-accuracy.png   wrong decisions (% of all) per algorithm and trace
#   docs/img/algorithms-burst.png      the most admitted in any span of W, as a multiple of N
# in a few seconds (deterministic: the traces are seeded).
#
#   bash scripts/algorithm_plots.sh
#
# Env: SLUICE (default build/release/sluice), OUT (the JSON lines; default build/algorithm-plots).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sluice=${SLUICE:-$root/build/release/sluice}
out=${OUT:-$root/build/algorithm-plots}
img=$root/docs/img
command -v gnuplot >/dev/null || { echo "algorithm_plots: gnuplot is missing (scripts/bootstrap.sh)" >&2; exit 1; }
[[ -x $sluice ]] || { echo "algorithm_plots: no $sluice (build it: make)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out" "$img"

# Every limit is 100 per second; 60 s of each trace.
algorithms=(fixed_window sliding_window sliding_log token_bucket)
# name|sim arguments|what it is
traces=(
  "poisson-at|--trace poisson --keys 10 --rate 1200|Poisson, each key at 1.2 x its limit"
  "poisson-under|--trace poisson --keys 10 --rate 600|Poisson, each key at 0.6 x its limit"
  "zipf|--trace zipf --keys 1000 --rate 5000|zipf 1.0 over 1000 keys, 5000/s (the top few keys over their limit)"
  "onoff|--trace onoff --keys 10 --rate 1200|on/off bursts (4x for 100 ms, then 300 ms silent), 1.2 x the limit on average"
  "boundary|--trace boundary --keys 10 --rate 1200|boundary attack: each window's requests half just before its end, half just after"
)
# field NAME JSON.
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"

: >"$out/wrong.dat"
: >"$out/burst.dat"
echo "| trace | algorithm | wrong decisions | false allows | false denies | most in any span of W |"
echo "|---|---|---|---|---|---|"
for entry in "${traces[@]}"; do
  IFS='|' read -r name args what <<<"$entry"
  wrong_row="\"$name\"" burst_row="\"$name\""
  for algorithm in "${algorithms[@]}"; do
    # shellcheck disable=SC2086
    line=$("$sluice" sim --accuracy $args --seconds 60 --limit "$algorithm:100/1s")
    echo "$line" >"$out/$name-$algorithm.json"
    wrong_row+=" $(field wrong_pct "$line")"
    burst_row+=" $(field most_in_window_per_limit "$line")"
    echo "| $what | $algorithm | $(field wrong_pct "$line") % | $(field false_allow_pct "$line") % |" \
      "$(field false_deny_pct "$line") % | $(field most_in_window_per_limit "$line") N |"
  done
  echo "$wrong_row" >>"$out/wrong.dat"
  echo "$burst_row" >>"$out/burst.dat"
done

plot() {  # plot FILE PNG YLABEL TITLE
  gnuplot <<GNUPLOT
set terminal pngcairo size 800,320 font ',9' noenhanced
set output '$2'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set key outside right
set ylabel '$3'
set title '$4'
set xtics rotate by -15
set yrange [0:*]
plot '$1' using 2:xtic(1) title '${algorithms[0]}', '' using 3 title '${algorithms[1]}', \
     '' using 4 title '${algorithms[2]}', '' using 5 title '${algorithms[3]}'
GNUPLOT
}
plot "$out/wrong.dat" "$img/algorithms-accuracy.png" '% of decisions' \
  'decisions unlike the exact log (at most 100 in any 1 s), 100/1s limits, 60 s per trace'
plot "$out/burst.dat" "$img/algorithms-burst.png" 'x N' \
  'the most one key was admitted in any span of 1 s, as a multiple of the limit N = 100'
echo "algorithm_plots: wrote $img/algorithms-accuracy.png $img/algorithms-burst.png (runs in $out)" >&2
