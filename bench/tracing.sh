#!/usr/bin/env bash
# What traces cost forward-auth (issue 38): three `sluice serve --threads 1`, the same rules
# (bench/compare/bench.yaml), one without tracing, one sampling 1 % of the traces it starts, one
# sampling every one, each exporting over OTLP/HTTP to the test collector (tests/otlp_collector.cc,
# --quiet 2: read and answered, not decoded; DECODE=1: --quiet 1, decoded, then dropped). The
# collector shares the machine's cores with sluice and wrk, where a real one runs elsewhere: the
# lighter it is, the less it takes from sluice in a run that counts sluice's CPU. wrk drives
# /v1/auth/allow (one key, no traceparent: sluice's own ratio sampler decides) on each in turn,
# ROUNDS times.
#
#   bench/tracing.sh        prints one table; progress on stderr
#
# For each peer: rps (wrk), requests per server CPU-second (the server's utime+stime from
# /proc/PID/stat: its exporter thread included, the collector not), the spans it ended, dropped
# and exported (sluice_trace_spans_total); then each traced peer's req/CPU-s as a ratio of the
# untraced one's, round by round (each round's runs back to back): the median and the lowest and
# highest ratio. The cost is 1 − ratio.
#
# With CALLGRIND=1 it then counts each peer's instructions per request under callgrind
# (bench/callgrind.sh allow_1key with the peer's settings): a figure the machine's load does not
# move, the exporter thread's work included.
#
# Env: DURATION (5s), CONNECTIONS (64), ROUNDS (3), WARMUP (1s), SLUICE (build/release/sluice),
#   COLLECTOR (build/release/otlp_collector), DECODE (0), CALLGRIND (0).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
DURATION="${DURATION:-5s}"
CONNECTIONS="${CONNECTIONS:-64}"
ROUNDS="${ROUNDS:-3}"
WARMUP="${WARMUP:-1s}"
SLUICE="${SLUICE:-$root/build/release/sluice}"
COLLECTOR="${COLLECTOR:-$root/build/release/otlp_collector}"
sluice="$SLUICE"

log() { echo "tracing: $*" >&2; }
die() { echo "tracing: $*" >&2; exit 1; }
command -v wrk >/dev/null || die "wrk is missing (scripts/bootstrap.sh installs it)"
[[ -x $COLLECTOR ]] || die "no collector at $COLLECTOR (cmake --build --preset release)"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"

# shellcheck source=bench/lib.sh
source "$here/lib.sh"
run_dir=$tmp

"$COLLECTOR" --quiet "$([[ ${DECODE:-0} == 1 ]] && echo 1 || echo 2)" >"$run_dir/collector.out" 2>&1 &
pids+=("$!")
for _ in $(seq 100); do grep -q '^otlp_collector:' "$run_dir/collector.out" && break; sleep 0.05; done
collector_http=$(sed -n 's/^otlp_collector: grpc [^ ]* http \(.*\)/\1/p' "$run_dir/collector.out")
[[ -n $collector_http ]] || die "the collector did not start"

PEERS="off 1% 100%"
declare -A data admin pid_of
mkdir -p "$run_dir/rules"
cp "$here/compare/bench.yaml" "$run_dir/rules/"
for peer in $PEERS; do
  settings=$run_dir/settings-${peer%\%}.yaml
  echo "rules: ./rules" >"$settings"
  case $peer in
    1%) rate=0.01 ;;
    100%) rate=1 ;;
    *) rate= ;;
  esac
  [[ -z $rate ]] ||
    echo "tracing: {enabled: true, endpoint: \"http://$collector_http\", sampling_rate: $rate}" \
      >>"$settings"
  start "$run_dir/sluice-${peer%\%}" --config "$settings" --threads 1 ||
    die "sluice ($peer) did not start: $(cat "$run_dir/sluice-${peer%\%}.err")"
  data[$peer]=$DATA admin[$peer]=$ADMIN pid_of[$peer]=$PID
done
log "collector on $collector_http; sluice off ${data[off]}, 1% ${data[1%]}, 100% ${data[100%]}"

clk_tck="$(getconf CLK_TCK)"
results=$run_dir/rows.tsv  # round peer rps req_per_cpu_s
: >"$results"
for round in $(seq "$ROUNDS"); do
  for peer in $PEERS; do
    url="http://${data[$peer]}/v1/auth/allow"
    [[ $WARMUP == 0 ]] || wrk -t1 -c"$CONNECTIONS" -d"$WARMUP" -H 'X-Key: k' "$url" >/dev/null
    t0=$(cpu_ticks "${pid_of[$peer]}")
    out=$(wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -H 'X-Key: k' "$url")
    t1=$(cpu_ticks "${pid_of[$peer]}")
    total=$(awk '/requests in/ {print $1}' <<<"$out")
    rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
    eff=$(awk -v n="$total" -v t=$((t1 - t0)) -v hz="$clk_tck" 'BEGIN {printf "%.0f", n / (t / hz)}')
    printf '%s\t%s\t%s\t%s\n' "$round" "$peer" "$rps" "$eff" >>"$results"
    log "round $round $peer: $rps rps, $eff req/CPU-s"
  done
done

printf '| peer | rps (median) | req / CPU-s (median) | spans ended | dropped | exported | req/CPU-s ratio to off: median (lowest–highest) |\n'
printf '|---|---:|---:|---:|---:|---:|---|\n'
for peer in $PEERS; do
  spans=()
  for outcome in ended dropped exported; do
    spans+=("$(metric "${admin[$peer]}" "sluice_trace_spans_total{outcome=\"$outcome\"}" -)")
  done
  python3 - "$results" "$peer" "${spans[@]}" <<'PY'
import statistics, sys
rows = [l.split('\t') for l in open(sys.argv[1]).read().split('\n') if l]
peer = sys.argv[2]
mine = {r[0]: (float(r[2]), float(r[3])) for r in rows if r[1] == peer}
off = {r[0]: float(r[3]) for r in rows if r[1] == 'off'}
ratios = sorted(mine[k][1] / off[k] for k in mine)
ratio = '' if peer == 'off' else f"{statistics.median(ratios):.3f} ({ratios[0]:.3f}–{ratios[-1]:.3f})"
spans = [f"{float(s):,.0f}" if s != '-' else '–' for s in sys.argv[3:6]]
print(f"| {peer} | {statistics.median(v[0] for v in mine.values()):,.0f} | "
      f"{statistics.median(v[1] for v in mine.values()):,.0f} | {' | '.join(spans)} | {ratio} |")
PY
done

if [[ ${CALLGRIND:-0} == 1 ]]; then
  printf '\n| peer | instructions / request (callgrind) | ratio to off |\n|---|---:|---:|\n'
  off_ir=
  for peer in $PEERS; do
    ir=$(CONFIG="$run_dir/settings-${peer%\%}.yaml" SLUICE="$SLUICE" bash "$here/callgrind.sh" \
      allow_1key 2>/dev/null | awk -F'\t' '{print $4}' | awk '{print $1}')
    [[ -n $ir ]] || die "callgrind ($peer) gave no count"
    [[ -n $off_ir ]] || off_ir=$ir
    printf '| %s | %s | %s |\n' "$peer" "$ir" "$(awk -v a="$ir" -v b="$off_ir" 'BEGIN {printf "%.3f", a / b}')"
  done
fi
