#!/usr/bin/env bash
# Latency at a fixed load: sluice's forward-auth path and nginx limit_req at the same constant
# offered rate, measured without coordinated omission (issue 23).
#
#   bench/fixed_load.sh                 measure nginx's saturation rate on each scenario (wrk,
#                                       closed loop, SATURATION seconds), then run bench/openloop at
#                                       LOAD (50 %) of the lowest against each server, every scenario
#                                       at that one rate, ROUNDS times
#   bench/fixed_load.sh --rate 20000    that offered rate instead of measuring one (or RATE=20000)
#
# Servers and policies are compare.sh's: nginx is the anchor in $ANCHORS/nginx (one worker,
# limit_req keyed on X-Key); sluice is `sluice serve --threads 1 --config bench/compare/bench.yaml`
# hit on its forward-auth endpoint /v1/auth/<path>. Both servers run on SERVER_CPUS and the load
# generators (wrk, openloop) on CLIENT_CPUS (taskset), so that the client does not take the
# server's core. Scenarios:
#   allow_100k   /allow, X-Key drawn uniformly from NKEYS (100,000): every request allowed
#   deny_1key    /deny, one key: every request but the first answered 429
# Within each round and scenario the two peers alternate, nginx first.
#
# openloop measures each request from its intended send time (start + i / rate) to its response,
# over CONNECTIONS keep-alive connections (requests wait in the client when all are busy, and
# that wait counts). stdout: one row per scenario and peer: how many rounds were clean (every
# request sent and answered, with the expected statuses), then each figure the median over the
# rounds with the min-max spread in brackets: the rate achieved; in µs, p50, p99, p99.9 and max
# latency, and the client's own lag at p99 (how late openloop's event loop noticed that a
# request was due, whatever the server did: on a busy machine that is part of every latency
# figure, so read those beside it), and the share of its core openloop used (near 100 % the
# client is a bottleneck itself). stderr: the machine, the rates, progress, and a WARN for a run
# that did not send or complete everything, got unexpected statuses, or used over 80 % of the
# client's core. Raw output stays in /tmp/sluice-fixed-load.*/.
#
# Env: ROUNDS (3), DURATION (10, seconds per run), RATE (measured), LOAD (0.5), SATURATION (3),
#   CONNECTIONS (64), WARMUP (2, seconds of openloop per peer first; 0 = none), NKEYS (100000),
#   SCENARIOS ("allow_100k deny_1key"), SERVER_CPUS (0), CLIENT_CPUS (1), SLUICE
#   (build/release/sluice), OPENLOOP (build/release/openloop), ANCHORS (bench/anchors),
#   NGINX_PORT (18080), SLUICE_PORT (18090), SLUICE_ADMIN_PORT (18091).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-10}"
RATE="${RATE:-}"
LOAD="${LOAD:-0.5}"
SATURATION="${SATURATION:-3}"
CONNECTIONS="${CONNECTIONS:-64}"
WARMUP="${WARMUP:-2}"
NKEYS="${NKEYS:-100000}"
SCENARIOS="${SCENARIOS:-allow_100k deny_1key}"
SERVER_CPUS="${SERVER_CPUS:-0}"
CLIENT_CPUS="${CLIENT_CPUS:-1}"
SLUICE="${SLUICE:-$root/build/release/sluice}"
OPENLOOP="${OPENLOOP:-$root/build/release/openloop}"
ANCHORS="${ANCHORS:-$root/bench/anchors}"
NGINX_PORT="${NGINX_PORT:-18080}"
SLUICE_PORT="${SLUICE_PORT:-18090}"
SLUICE_ADMIN_PORT="${SLUICE_ADMIN_PORT:-18091}"
PEERS="nginx sluice"

log() { echo "fixed_load: $*" >&2; }
die() { log "$*"; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --rate) [ $# -ge 2 ] || die "--rate needs a value"; RATE="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[ -z "$RATE" ] || [[ "$RATE" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--rate must be a number of requests per second"

for b in "$SLUICE" "$OPENLOOP"; do
    [ -x "$b" ] || die "no binary at $b; build it with
  cmake --preset release && cmake --build --preset release --target sluice openloop   (from $root)"
done
[ -x "$ANCHORS/nginx/run.sh" ] || die "no nginx anchor in $ANCHORS (set ANCHORS)"
command -v wrk >/dev/null || [ -n "$RATE" ] || die "wrk is missing (needed to measure the rate; or set RATE)"
command -v taskset >/dev/null || die "taskset is missing (util-linux)"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"
for s in $SCENARIOS; do
    case "$s" in allow_100k|deny_1key) ;; *) die "unknown scenario $s" ;; esac
done

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/sluice-fixed-load.XXXXXX")"
sluice="$SLUICE"
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

# Stops sluice and nginx on exit; refuses ports already taken (bench/lib.sh).
against_nginx_session "$run_dir/nginx"

log "$(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), load average" \
    "$(cut -d' ' -f1-3 /proc/loadavg); servers on cpu $SERVER_CPUS, clients on cpu $CLIENT_CPUS"

# ---------------------------------------------------------------- servers
# taskset's affinity is inherited by nginx's master and worker; sluice's threads (all of them,
# -a) are pinned once it is up, and any thread it starts later inherits that.
taskset -c "$SERVER_CPUS" "$ANCHORS/nginx/run.sh" start "$NGINX_PORT" "$nginx_dir" >&2
nginx_started=1
start "$run_dir/sluice" --config "$here/compare/bench.yaml" --threads 1 --grpc 0 \
    --listen "127.0.0.1:$SLUICE_PORT" --admin "127.0.0.1:$SLUICE_ADMIN_PORT" ||
    { cat "$run_dir/sluice.err" >&2; die "sluice did not start (output in $run_dir)"; }
taskset -a -p -c "$SERVER_CPUS" "$PID" >/dev/null
log "nginx pid $(cat "$nginx_dir/nginx.pid") on :$NGINX_PORT; sluice pid $PID on :$SLUICE_PORT"

url() {
    local path="${2%%_*}"   # allow_100k -> allow
    if [ "$1" = nginx ]; then echo "http://127.0.0.1:$NGINX_PORT/$path"
    else echo "http://127.0.0.1:$SLUICE_PORT/v1/auth/$path"; fi
}

# key_args SCENARIO: openloop's key options.
key_args() {
    case "$1" in
        allow_100k) echo "--keys $NKEYS --key-header X-Key" ;;
        deny_1key)  echo "--header X-Key:one-key" ;;
    esac
}

openloop() { taskset -c "$CLIENT_CPUS" "$OPENLOOP" "$@"; }

# saturation SCENARIO: nginx's closed-loop rate (wrk -t1 -cCONNECTIONS), requests per second.
saturation() {
    local scen="$1" out="$run_dir/saturation.$1.txt" args
    case "$scen" in
        allow_100k) args=(-s "$ANCHORS/wrk/keys.lua" "$(url nginx "$scen")" -- "$NKEYS") ;;
        *)          args=(-s "$ANCHORS/wrk/fixed.lua" "$(url nginx "$scen")" -- one-key) ;;
    esac
    taskset -c "$CLIENT_CPUS" wrk -t1 -c"$CONNECTIONS" -d"${SATURATION}s" "${args[@]}" >"$out" 2>&1 \
        || { cat "$out" >&2; die "wrk failed"; }
    awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$out"
}

# ---------------------------------------------------------------- runs
# One rate for every scenario: LOAD of the lowest saturation measured, so that it stays below each
# scenario's (on a shared machine one measurement can be far off).
if [ -z "$RATE" ]; then
    lowest=""
    for scen in $SCENARIOS; do
        sat="$(saturation "$scen")"
        [ -n "$sat" ] || die "could not read wrk's rate in $run_dir/saturation.$scen.txt"
        log "$scen: nginx saturates at $sat r/s (wrk -t1 -c$CONNECTIONS, ${SATURATION}s)"
        if [ -z "$lowest" ] || [ "$sat" -lt "$lowest" ]; then lowest="$sat"; fi
    done
    RATE="$(awk -v s="$lowest" -v l="$LOAD" 'BEGIN { printf "%.0f", s * l }')"
fi
log "offering $RATE r/s to each server in every scenario"

if [ "$WARMUP" != 0 ]; then
    first="${SCENARIOS%% *}"
    for peer in $PEERS; do
        # shellcheck disable=SC2046
        openloop --url "$(url "$peer" "$first")" --rate "$RATE" --duration "$WARMUP" \
            --connections "$CONNECTIONS" $(key_args "$first") >"$run_dir/$peer.warmup.json"
    done
fi

results="$run_dir/rows.tsv"   # round peer scenario offered clean achieved p50 p99 p999 max lag_p99 client_%
: >"$results"

run_one() {
    local round="$1" peer="$2" scen="$3" out json intended sent completed problems client_pct
    out="$run_dir/$peer.$scen.$round.json"
    # shellcheck disable=SC2046
    openloop --url "$(url "$peer" "$scen")" --rate "$RATE" --duration "$DURATION" \
        --connections "$CONNECTIONS" $(key_args "$scen") >"$out" || die "openloop failed for $peer $scen"
    json="$(cat "$out")"
    intended="$(field intended "$json")" sent="$(field sent "$json")" completed="$(field completed "$json")"
    problems=""
    [ "$sent" = "$intended" ] || problems+=" only $sent of $intended sent;"
    [ "$completed" = "$sent" ] || problems+=" only $completed of $sent completed ($(field errors "$json") errors, $(field timeouts "$json") timeouts);"
    case "$scen" in
        allow_*) [ "$(field non_2xx "$json")" = 0 ] || problems+=" $(field non_2xx "$json") non-2xx;" ;;
        deny_*)  [ "$(field non_2xx "$json")" -ge $((completed - 2)) ] || problems+=" only $(field non_2xx "$json") 429s;" ;;
    esac
    [ -z "$problems" ] || log "WARN round $round $peer $scen:$problems"
    # The client's share of its core: near 100 % it is itself a bottleneck (its lag shows it).
    client_pct="$(awk -v c="$(field client_cpu_s "$json")" -v d="$DURATION" 'BEGIN { printf "%.0f", 100 * c / d }')"
    [ "$client_pct" -le 80 ] || log "WARN round $round $peer $scen: openloop used $client_pct % of a core"
    log "round $round $peer $scen: $(field achieved_rps "$json") r/s, p50 $(field p50_us "$json") µs," \
        "p99 $(field p99_us "$json") µs, p99.9 $(field p999_us "$json") µs, max $(field max_us "$json") µs," \
        "client lag p99 $(field lag_p99_us "$json") µs, client CPU $client_pct %"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$peer" "$scen" "$RATE" \
        "$([ -z "$problems" ] && echo 1 || echo 0)" \
        "$(field achieved_rps "$json")" "$(field p50_us "$json")" "$(field p99_us "$json")" \
        "$(field p999_us "$json")" "$(field max_us "$json")" "$(field lag_p99_us "$json")" \
        "$client_pct" >>"$results"
}

for round in $(seq 1 "$ROUNDS"); do
    for scen in $SCENARIOS; do
        for peer in $PEERS; do run_one "$round" "$peer" "$scen"; done
    done
done

# ---------------------------------------------------------------- table
# Per peer and scenario, each column on its own: the median over the rounds, [min-max].
{
    printf 'scenario\tpeer\toffered_rps\tclean_rounds\tachieved_rps\tp50_us\tp99_us\tp99.9_us\tmax_us\tclient_lag_p99_us\tclient_cpu_%%\n'
    awk -F'\t' -v scenarios="$SCENARIOS" -v peers="$PEERS" '
        function sorted(list, a,   n, i, j, t) {
            n = split(list, a, " ")
            for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
            return n
        }
        function median(list,   a, n) {
            n = sorted(list, a)
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        function spread(list,   a, n) {
            n = sorted(list, a)
            if (n == 1) return sprintf("%.0f", a[1])
            return sprintf("%.0f [%.0f-%.0f]", median(list), a[1], a[n])
        }
        { k = $2 SUBSEP $3; offered[k] = $4; clean[k] += $5; rounds[k]++
          for (c = 6; c <= 12; c++) v[k, c] = v[k, c] " " $c }
        END {
            ns = split(scenarios, sc, " "); np = split(peers, pe, " ")
            for (s = 1; s <= ns; s++) for (p = 1; p <= np; p++) {
                k = pe[p] SUBSEP sc[s]
                printf "%s\t%s\t%s\t%d/%d", sc[s], pe[p], offered[k], clean[k], rounds[k]
                for (c = 6; c <= 12; c++) printf "\t%s", spread(v[k, c])
                printf "\n"
            }
        }' "$results"
} >"$run_dir/table.tsv"
column -t -s $'\t' "$run_dir/table.tsv"
log "rounds: $ROUNDS, openloop -c$CONNECTIONS, ${DURATION}s per run; median [min-max] over rounds;" \
    "raw output and table.tsv in $run_dir"
