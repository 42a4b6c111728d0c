#!/usr/bin/env bash
# Regenerates the `sluice sim` plots in docs/img/ (docs/sim.md), in about a minute:
#   sim-windows.png         admitted per window against the limit, for each mode, on one key
#                           with on/off bursts (and the exact single limiter's admissions)
#   sim-redis-calls.png     Redis script calls and state operations per decision against the
#                           number of instances (1, 2, 4, 8), for each mode
#   sim-interval.png        leased mode's under-admission and eventual mode's over-admission
#                           against their interval, with the Redis work each costs
#
#   bash scripts/sim_plots.sh
#
# Env: SLUICE (default build/release/sluice), REDIS_URL (a Redis to use; default: a throwaway
# redis-server on a free port, stopped at the end), SIM_OUT (the runs' CSV and JSON lines;
# default build/sim-plots), RATE (decisions/s of the instances plot; default 20000).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
sluice=${SLUICE:-$root/build/release/sluice}
out=${SIM_OUT:-$root/build/sim-plots}
img=$root/docs/img
rate=${RATE:-20000}
modes=(exact leased eventual)
for tool in gnuplot redis-server redis-cli; do
  command -v $tool >/dev/null || { echo "sim_plots: $tool is missing (scripts/bootstrap.sh)" >&2; exit 1; }
done
[[ -x $sluice ]] || { echo "sim_plots: no $sluice (build it: make)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out" "$img"

# The throwaway Redis (its files in $out/redis-PORT), stopped by its pid on exit; field.
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
if [[ -z ${REDIS_URL:-} ]]; then
  redis_dir=$out start_redis_on >&2 || { echo "sim_plots: redis-server did not start" >&2; exit 1; }
  REDIS_URL=redis://127.0.0.1:$RPORT
fi

# run NAME ARGS...: one `sluice sim` run, its JSON line in $out/NAME.json, its CSV in $out/NAME/.
# Returns 3 when the mode is not built yet (nothing written), else sim's status.
run() {
  local name=$1; shift
  local status=0
  "$sluice" sim --redis "$REDIS_URL" --csv "$out/$name" "$@" >"$out/$name.json" \
    2>"$out/$name.err" || status=$?
  if [[ $status == 2 ]] && grep -q "not built yet" "$out/$name.err"; then
    rm -rf "${out:?}/$name" "$out/$name.json"
    return 3
  fi
  if [[ $status != 0 ]]; then
    echo "sim_plots: $name failed ($status):" >&2
    cat "$out/$name.err" >&2
    return "$status"
  fi
  echo "  $name: $(cat "$out/$name.json")"
}

# 1. Admitted per window against the limit: one key, bursts of 4x the rate for 100 ms then 300 ms
#    of silence, 4 instances; fixed windows of 200 ms hold 300 each.
echo "sim_plots: admitted per window"
window_modes=()
for mode in "${modes[@]}"; do
  if run "windows-$mode" --mode "$mode" --instances 4 --trace onoff --keys 1 --rate 4000 \
    --seconds 4 --limit fixed_window:300/200ms; then
    window_modes+=("$mode")
  else
    [[ $? == 3 ]] || exit 1
    echo "  $mode: not built yet, skipped"
  fi
done
plot="set terminal pngcairo size 800,320 font ',9' noenhanced
set output '$img/sim-windows.png'
set datafile separator ','
set key outside right
set xlabel 'time in the run (s), one point per 200 ms fixed window'
set ylabel 'admitted in the window'
set title 'sluice sim: 1 key, on/off bursts (16 000/s for 100 ms, then 300 ms silent), 4 instances'
plot '$out/windows-exact/windows.csv' every ::1 using 4:7 with steps lw 2 lc rgb '#999999' title 'limit', \\
     '$out/windows-exact/windows.csv' every ::1 using 4:6 with points pt 6 ps 1.2 lc rgb 'black' title 'exact single limiter'"
for mode in "${window_modes[@]}"; do
  plot+=", '$out/windows-$mode/windows.csv' every ::1 using 4:5 with linespoints pt 7 ps 0.6 title '$mode'"
done
gnuplot <<<"$plot"

# 2. Redis work per decision against the number of instances: zipf 1.0 over 10 000 keys.
echo "sim_plots: Redis work per decision against instances"
calls_modes=()
for mode in "${modes[@]}"; do
  : >"$out/calls-$mode.dat"
  for n in 1 2 4 8; do
    if run "calls-$mode-$n" --mode "$mode" --instances "$n" --trace zipf --keys 10000 \
      --rate "$rate" --seconds 3; then
      echo "$n $(field redis_script_calls_per_decision "$(<"$out/calls-$mode-$n.json")")" \
        "$(field redis_state_ops_per_decision "$(<"$out/calls-$mode-$n.json")")" >>"$out/calls-$mode.dat"
    else
      [[ $? == 3 ]] || exit 1
      echo "  $mode: not built yet, skipped"
      break
    fi
  done
  [[ -s $out/calls-$mode.dat ]] && calls_modes+=("$mode")
done
plot="set terminal pngcairo size 800,320 font ',9' noenhanced
set output '$img/sim-redis-calls.png'
set key outside right
set logscale y
set xlabel 'instances'
set xtics (1, 2, 4, 8)
set ylabel 'per decision'
set title 'sluice sim: Redis work per decision, zipf 1.0 over 10 000 keys, $rate/s, fixed_window 100/1s'
plot "
sep=
for mode in "${calls_modes[@]}"; do
  plot+="$sep'$out/calls-$mode.dat' using 1:2 with linespoints pt 7 title '$mode: script calls', "
  plot+="'$out/calls-$mode.dat' using 1:3 with linespoints pt 5 dt 2 title '$mode: state operations'"
  sep=", "
done
gnuplot <<<"$plot"

# 3. The price of each hybrid mode against its interval: leased mode's under-admission and
#    eventual mode's over-admission (both as % of the exact model's admissions), with the Redis
#    state operations per decision each costs; zipf 1.0 over 1000 keys, 4 instances.
echo "sim_plots: price against the interval"
: >"$out/interval.dat"
for ms in 25 50 100 200 400; do
  run "lease-$ms" --mode leased --lease-interval-ms "$ms" --window-lease-life-ms $((10 * ms)) \
    --instances 4 --trace zipf --keys 1000 \
    --rate "$rate" --seconds 3 --limit fixed_window:100/1s
  run "sync-$ms" --mode eventual --sync-interval-ms "$ms" --instances 4 --trace zipf --keys 1000 \
    --rate "$rate" --seconds 3 --limit fixed_window:100/1s
  over=$(awk -v o="$(field over_admission_total "$(<"$out/sync-$ms.json")")" \
    -v e="$(field exact_admitted "$(<"$out/sync-$ms.json")")" 'BEGIN { printf "%.3f", (e > 0) ? 100 * o / e : 0 }')
  echo "$ms $(field under_admission_pct "$(<"$out/lease-$ms.json")")" \
    "$(field redis_state_ops_per_decision "$(<"$out/lease-$ms.json")") $over" \
    "$(field redis_state_ops_per_decision "$(<"$out/sync-$ms.json")")" >>"$out/interval.dat"
done
gnuplot <<EOF
set terminal pngcairo size 800,320 font ',9' noenhanced
set output '$img/sim-interval.png'
set key outside right
set logscale x 2
set xlabel 'lease interval (leased) or sync interval (eventual), ms'
set xtics (25, 50, 100, 200, 400)
set ylabel '% of the exact model admissions'
set y2label 'Redis state operations per decision'
set y2tics
set title 'sluice sim: the price of each interval, zipf 1.0 over 1000 keys, $rate/s, fixed_window 100/1s, 4 instances'
plot '$out/interval.dat' using 1:2 with linespoints pt 7 title 'leased: under-admission %', \
     '$out/interval.dat' using 1:4 with linespoints pt 5 title 'eventual: over-admission %', \
     '$out/interval.dat' using 1:3 axes x1y2 with linespoints pt 6 dt 2 title 'leased: state ops', \
     '$out/interval.dat' using 1:5 axes x1y2 with linespoints pt 4 dt 2 title 'eventual: state ops'
EOF

echo "sim_plots: wrote $img/sim-windows.png $img/sim-redis-calls.png $img/sim-interval.png (runs in $out)"
