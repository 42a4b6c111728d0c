#!/usr/bin/env bash
# The Redis anchors' throughput, with redis-benchmark against 127.0.0.1:PORT.
#   bench.sh PORT
# Prints one line per test, "name rps":
#   incr_c50              INCR, 50 clients, no pipelining
#   sw_evalsha_c50        sliding_window.lua via EVALSHA, 50 clients, no pipelining
#   sw_evalsha_c50_P16    same, 16 commands pipelined per client
#   seed_evalsha_c50      seed_counter.lua (the seed script's sliding-window counter), 50 clients
#   seed_evalsha_c50_P16  same, 16 commands pipelined per client
# Keys are random over a 100,000-key space (-r 100000, __rand_int__).
# Env knobs: N_INCR (default 300000), N_SW (default 200000),
#   SW_LIMIT (default 100), SW_WINDOW_MS (default 10000), VERBOSE=1 (raw CSV to stderr).
# Writes keys (counter:*, swc:*, swp:*) into the target redis: point it at a
# throwaway instance (redis/run.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
port="${1:?usage: bench.sh PORT}"
host=127.0.0.1
n_incr="${N_INCR:-300000}"
n_sw="${N_SW:-200000}"
limit="${SW_LIMIT:-100}"
window="${SW_WINDOW_MS:-10000}"

command -v redis-benchmark >/dev/null 2>&1 || { echo "redis-benchmark not found (apt-get install -y redis-tools)" >&2; exit 1; }
[ "$(redis-cli -h "$host" -p "$port" ping 2>/dev/null)" = "PONG" ] || { echo "no redis on $host:$port" >&2; exit 1; }

sha="$(redis-cli -h "$host" -p "$port" script load "$(cat "$here/sliding_window.lua")")"
[[ "$sha" =~ ^[0-9a-f]{40}$ ]] || { echo "SCRIPT LOAD failed: $sha" >&2; exit 1; }
seed_sha="$(redis-cli -h "$host" -p "$port" script load "$(cat "$here/seed_counter.lua")")"
[[ "$seed_sha" =~ ^[0-9a-f]{40}$ ]] || { echo "SCRIPT LOAD failed: $seed_sha" >&2; exit 1; }
# A fixed caller clock (ms) for the seed script; redis-benchmark cannot vary it.
now_ms="$(date +%s%3N)"

# run NAME redis-benchmark-args... : prints "NAME rps" from the CSV line.
run() {
    local name="$1"; shift
    local csv
    csv="$(redis-benchmark -h "$host" -p "$port" --csv "$@" 2>/dev/null)"
    [ "${VERBOSE:-0}" = 1 ] && printf '%s\n%s\n' "$name" "$csv" >&2
    # Second line: "test","rps","avg",... -> field 2 without quotes.
    local rps
    rps="$(printf '%s\n' "$csv" | awk -F'","' 'NR==2 {print $2}')"
    [ -n "$rps" ] || { echo "$name: no result from redis-benchmark" >&2; return 1; }
    printf '%s %s\n' "$name" "$rps"
}

run incr_c50 -c 50 -n "$n_incr" -r 100000 -t incr
run sw_evalsha_c50 -c 50 -n "$n_sw" -r 100000 \
    evalsha "$sha" 1 "swc:__rand_int__" "$limit" "$window"
run sw_evalsha_c50_P16 -c 50 -P 16 -n "$((n_sw * 4))" -r 100000 \
    evalsha "$sha" 1 "swp:__rand_int__" "$limit" "$window"
run seed_evalsha_c50 -c 50 -n "$n_sw" -r 100000 \
    evalsha "$seed_sha" 1 "seedc:__rand_int__" "$limit" "$((window / 1000))" "$now_ms"
run seed_evalsha_c50_P16 -c 50 -P 16 -n "$((n_sw * 4))" -r 100000 \
    evalsha "$seed_sha" 1 "seedp:__rand_int__" "$limit" "$((window / 1000))" "$now_ms"
