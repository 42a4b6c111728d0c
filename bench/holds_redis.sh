#!/usr/bin/env bash
# Concurrency limits on Redis against plain decisions, per Redis CPU-second (issue: acquire +
# release at >= 50 % of a plain decision's throughput per Redis CPU-second). One throwaway
# redis-server on a free loopback port; ROUNDS (default 3) rounds, each running, one after the
# other on the same server, `sluice bench redis` with a fixed_window decision per request and
# with `--mode holds` (an acquisition of a concurrency limit, then its release); prints each
# run's JSON line and, per round, the Redis CPU per operation of each and their ratio
# (decision CPU / acquire+release CPU: the share of a decision's throughput per CPU-second), then
# the median and spread. Usage: SLUICE=build/release/sluice bench/holds_redis.sh
#
# CALLGRIND=1 then counts what the CPU figures cannot show steadily on a shared machine: Redis's
# instructions per operation, with a second redis-server run under valgrind's callgrind (counting
# only while each 3 s run lasts, after a 1 s run that loads the scripts), for a decision and for
# an acquire + release; their ratio is the same share, in instructions.
set -u
sluice=${SLUICE:-build/release/sluice}
rounds=${ROUNDS:-3} seconds=${SECONDS_PER_RUN:-3}

source "$(dirname "$0")/../tests/lib.sh"
need_tools redis-server redis-cli
start_redis_on; rport=$RPORT
url="redis://127.0.0.1:$rport"

field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" <<<"$2"; }
ratios=()
for round in $(seq "$rounds"); do
  decide=$("$sluice" bench redis --redis "$url" --algorithm fixed_window --limit 1000000 \
    --window 1h --keys 10000 --seconds "$seconds")
  holds=$("$sluice" bench redis --redis "$url" --mode holds --limit 1000 --keys 10000 \
    --seconds "$seconds")
  echo "$decide"
  echo "$holds"
  d=$(field redis_cpu_us_per_decision "$decide") h=$(field redis_cpu_us_per_decision "$holds")
  ratio=$(awk -v d="$d" -v h="$h" 'BEGIN { printf "%.2f", (h > 0 ? d / h : 0) }')
  echo "round $round: Redis CPU per decision $d us, per acquire + release $h us: ratio $ratio"
  ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END {
  printf "acquire + release per Redis CPU-second, as a share of decisions: median %.2f (%.2f to %.2f over %d rounds)\n",
    v[int((NR + 1) / 2)], v[1], v[NR], NR }'
[[ ${CALLGRIND:-0} == 1 ]] || exit 0

need_tools valgrind callgrind_control
free_port; cport=$FREE_PORT
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$tmp/redis.callgrind" \
  redis-server --port "$cport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
  >"$tmp/callgrind-redis.log" 2>&1 &
cpid=$!
pids+=("$cpid")
for _ in $(seq 200); do redis-cli -p "$cport" ping 2>/dev/null | grep PONG >/dev/null && break; sleep 0.1; done
# instructions MODE ARGS...: Redis's instructions per operation of one 3 s run of MODE.
instructions() {
  local mode=$1 out events n ir
  shift
  redis-cli -p "$cport" flushall >/dev/null
  "$sluice" bench redis --redis "redis://127.0.0.1:$cport" "$@" --seconds 1 >/dev/null 2>&1
  callgrind_control -z "$cpid" >/dev/null 2>&1
  callgrind_control -i on "$cpid" >/dev/null 2>&1
  out=$("$sluice" bench redis --redis "redis://127.0.0.1:$cport" "$@" --seconds 3)
  events=$(callgrind_control -e "$cpid" 2>&1)  # (its main thread: "Th 1")
  callgrind_control -i off "$cpid" >/dev/null 2>&1
  n=$(sed -n 's/.*"decisions":\([0-9]*\).*/\1/p' <<<"$out")
  ir=$(awk '/Th 1 / { gsub(",", "", $3); print $3 }' <<<"$events")
  [[ -n $n && -n $ir && $n -gt 0 ]] || { echo "callgrind: no count for $mode" >&2; exit 1; }
  echo "$((ir / n))"
}
d=$(instructions decision --algorithm fixed_window --limit 1000000 --window 1h --keys 10000)
h=$(instructions holds --mode holds --limit 1000 --keys 10000)
echo "Redis instructions (callgrind) per decision $d, per acquire + release $h: ratio $(awk -v d="$d" -v h="$h" 'BEGIN { printf "%.2f", d / h }')"
