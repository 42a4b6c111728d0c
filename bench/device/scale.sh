#!/usr/bin/env bash
# How sluice scales over cores, on the lent many-core machine, run from inside the bundle that
# bench/device/bundle.sh makes (every binary through the bundled dynamic loader):
#
#   OUT=$OUT bash .device-bundle/scale.sh
#
#   1. forward-auth: nginx limit_req with N workers against `sluice serve --threads N`, the server
#      pinned to cores 0..N-1 and wrk to the others; allow_100k and deny_1key; rps, p99, server
#      CPU seconds and requests per server CPU-second. An N needs N + 2 cores; others are skipped.
#   2. the in-memory store at STORE_KEYS (10M) keys with 1 and 8 threads, beside the cost of one
#      dependent memory access (memory_latency), and one hot key.
#   3. one redis-server on its own core: sluice's batched decide.lua against the seed script
#      (bench/anchors/redis/seed_counter.lua, one call per request).
#
# Writes $OUT/scale.tsv, store.txt, redis.txt, the logs and raw.tgz; prints the rows as it goes.
# Env: OUT (/tmp/scale-out), NS ("1 2 4 6"), DUR (8s), CORES (nproc), STORE_KEYS (10000000),
#   STORE_S (5), REDIS_CORE (the last core), BUNDLE (this script's directory).
set -uo pipefail

B=${BUNDLE:-$(cd "$(dirname "$0")" && pwd)}
L=$B/lib
OUT=${OUT:-/tmp/scale-out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/scale.XXXXXX)
NS=${NS:-"1 2 4 6"}
DUR=${DUR:-8s}
CORES=${CORES:-$(nproc)}
STORE_KEYS=${STORE_KEYS:-10000000}
STORE_S=${STORE_S:-5}
REDIS_CORE=${REDIS_CORE:-$((CORES - 1))}
R=("$L/ld-linux-x86-64.so.2" --library-path "$L")
run() { "${R[@]}" "$@"; }
log() { echo "scale: $*" >&2; }
command -v taskset >/dev/null || { log "taskset is required"; exit 1; }

# The kit's copy of bench/lib.sh and tests/lib.sh (bundle.sh puts them there): starting and
# stopping sluice by pid, cpu_ticks (utime + stime of pids, in clock ticks); every process
# started (in `pids`) is killed by its pid on exit.
sluice=$B/bin/sluice
# shellcheck source=bench/lib.sh
source "$B/bench/lib.sh"
hz=$(getconf CLK_TCK)
stop_nginx() { [ -s "$W/ng/nginx.pid" ] && kill "$(cat "$W/ng/nginx.pid")" 2>/dev/null; }
cleanup_hooks+=(stop_nginx)

log "cores $CORES, sluice $(cat "$B/conf/sluice-commit"), $(uname -r)"
printf 'section\tpeer\tN\tscenario\trps\tp99_ms\tcpu_s\treq_per_cpu_s\tnon2xx\terrors\n' >"$OUT/scale.tsv"

# wrk_run PEER N SCENARIO URL PID...: 2 s of warm-up, then DUR measured; the server's CPU is
# read from its pids before and after.
wrk_run() {
  local peer=$1 n=$2 scen=$3 url=$4
  shift 4
  local wcpus="$n-$((CORES - 1))" wt=$((CORES - n))
  [ "$wt" -gt 10 ] && wt=10
  local args
  if [ "$scen" = allow_100k ]; then
    args=(-s "$B/conf/keys.lua" "$url" -- 100000)
  else
    args=(-s "$B/conf/fixed.lua" "$url" -- one-key)
  fi
  taskset -c "$wcpus" "${R[@]}" "$B/bin/wrk" -t"$wt" -c$((64 * wt)) -d2s "${args[@]}" >/dev/null 2>&1
  local f="$W/wrk.$peer.$n.$scen" t0 t1
  t0=$(cpu_ticks "$@")
  taskset -c "$wcpus" "${R[@]}" "$B/bin/wrk" -t"$wt" -c$((64 * wt)) -d"$DUR" --latency "${args[@]}" >"$f" 2>&1
  t1=$(cpu_ticks "$@")
  local rps p99 tot non2 errs cpu eff
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$f")
  tot=$(awk '/ requests in / {print $1}' "$f")
  p99=$(awk '$1 == "99%" {v = $2; n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n = n;
    else if (v ~ /s$/) n *= 1000; printf "%.3f", n}' "$f")
  non2=$(awk '/Non-2xx/ {print $NF}' "$f")
  errs=$(awk '/Socket errors/ {$1 = $2 = ""; print}' "$f" | tr -s ' ')
  cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" 'BEGIN {printf "%.2f", t / hz}')
  eff=$(awk -v n="${tot:-0}" -v c="$cpu" 'BEGIN {if (c > 0) printf "%.0f", n / c; else print 0}')
  printf 'http\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$peer" "$n" "$scen" "${rps:-0}" "${p99:-0}" \
    "$cpu" "$eff" "${non2:-0}" "${errs:-}" | tee -a "$OUT/scale.tsv"
}

# ---- 1. forward-auth, N cores each
mkdir -p "$W/ng/tmp"
for n in $NS; do
  [ $((n + 2)) -le "$CORES" ] || continue
  sed -e "s#@PORT@#18080#g" -e "s#@DIR@#$W/ng#g" -e "s#^worker_processes 1;#worker_processes $n;\nuser root;#" \
    "$B/conf/nginx.conf.template" >"$W/ng/nginx.conf"
  taskset -c "0-$((n - 1))" "${R[@]}" "$B/bin/nginx" -p "$W/ng/" -e "$W/ng/error.log" -c "$W/ng/nginx.conf" ||
    { log "nginx failed"; cat "$W/ng/error.log" >&2; }
  sleep 1
  master=$(cat "$W/ng/nginx.pid")
  read -r -a ngpids <<<"$master $(ps -o pid= --ppid "$master" | tr '\n' ' ')"
  for scen in allow_100k deny_1key; do
    wrk_run nginx "$n" "$scen" "http://127.0.0.1:18080/${scen%%_*}" "${ngpids[@]}"
  done
  kill "$master"
  sleep 1
  start_prefix=(taskset -c "0-$((n - 1))" "${R[@]}")
  start "$W/sluice.$n" --config "$B/conf/bench.yaml" --threads "$n" \
    --grpc 0 --listen 127.0.0.1:18090 --admin 127.0.0.1:18091 || log "sluice did not start: $(cat "$W/sluice.$n.err")"
  for scen in allow_100k deny_1key; do
    wrk_run sluice "$n" "$scen" "http://127.0.0.1:18090/v1/auth/${scen%%_*}" "$PID"
  done
  stop
  sleep 0.5
done

# ---- 2. the store at STORE_KEYS keys
run "$B/bin/memory_latency" 256 2>&1 | tail -3 | sed 's/^/memory_latency: /' | tee -a "$OUT/store.txt"
for t in 1 8; do
  run "$B/bin/sluice" bench store --algorithm token_bucket --keys "$STORE_KEYS" --threads "$t" \
    --seconds "$STORE_S" --clock-every 64 --prefetch 16 2>&1 | tail -1 | tee -a "$OUT/store.txt"
done
run "$B/bin/sluice" bench store --algorithm token_bucket --keys 1 --threads 1 --seconds 3 --clock-every 64 2>&1 |
  tail -1 | tee -a "$OUT/store.txt"

# ---- 3. one redis-server on its own core: sluice batched against the seed script
taskset -c "$REDIS_CORE" "${R[@]}" "$B/bin/redis-server" --bind 127.0.0.1 --port 16379 --save '' \
  --appendonly no --daemonize no >"$W/redis.log" 2>&1 &
rp=$!
pids+=("$rp")
sleep 1
for mode in seed sluice; do
  for alg in sliding_window token_bucket; do
    [ "$mode" = seed ] && [ "$alg" = token_bucket ] && continue
    extra=()
    [ "$mode" = seed ] && extra=(--script "$B/conf/seed_counter.lua")
    taskset -c "0-$((CORES - 3))" "${R[@]}" "$B/bin/sluice" bench redis --redis redis://127.0.0.1:16379 \
      --mode "$mode" --algorithm "$alg" --keys 100000 --connections 8 --inflight 512 --seconds 5 "${extra[@]}" 2>&1 |
      tail -1 | sed "s/^/$mode $alg: /" | tee -a "$OUT/redis.txt"
  done
done
cp "$W"/*.log "$W"/sluice.*.out "$W"/sluice.*.err "$OUT/" 2>/dev/null
tar -C "$W" -czf "$OUT/raw.tgz" . 2>/dev/null
log "done"
