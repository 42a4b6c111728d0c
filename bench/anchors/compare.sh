#!/usr/bin/env bash
# The anchors side by side, without sluice: nginx limit_req and rate-limiter-flexible (in memory
# and on Redis) under the same wrk runs, so that their figures can be set beside sluice's
# (bench/compare.sh runs sluice against the nginx anchor).
#
#   bash bench/anchors/compare.sh        install what the chosen peers lack, start them, run wrk,
#                                        print a TSV table, stop everything it started
#
# Peers (127.0.0.1 only; PEERS picks some):
#   nginx        nginx/: limit_req, one worker                       NGINX_PORT (18080)
#   rlf-memory   rlf/: node:http + rate-limiter-flexible, memory     RLF_MEM_PORT (18081)
#   rlf-redis    the same on Redis, through redis/run.sh's server    RLF_REDIS_PORT (18082),
#                                                                    REDIS_PORT (16379)
# Scenarios (wrk -tTHREADS -cCONNECTIONS -dDURATION --latency; SCENARIOS picks some):
#   allow_1key   /allow, one key (wrk/fixed.lua)       allow_100k   /allow, NKEYS keys (wrk/keys.lua)
#   deny_1key    /deny, one key: all but the first request are 429
#   plain        /plain, no limiter: the server's own cost
#
# stdout: "peer<TAB>scenario<TAB>rps<TAB>p99_ms", with a header line. stderr: progress, and a
# WARN line when a run's status codes are not what its route should give or wrk saw socket
# errors. Raw wrk output and table.tsv stay in RESULTS_DIR (default: a fresh
# /tmp/sluice-anchors.XXXXXX/results, named at the end). Refuses to start on a port already
# taken, so it never measures somebody else's server.
#
# Env: DURATION (5s), CONNECTIONS (64), THREADS (1), NKEYS (100000), WARMUP (1s, 0 = none),
#   PEERS ("nginx rlf-memory rlf-redis"), SCENARIOS ("allow_1key allow_100k deny_1key plain"),
#   RESULTS_DIR, the ports above, RLF_AUTOPIPELINE=1 (ioredis auto-pipelining).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

DURATION="${DURATION:-5s}"
CONNECTIONS="${CONNECTIONS:-64}"
THREADS="${THREADS:-1}"
NKEYS="${NKEYS:-100000}"
WARMUP="${WARMUP:-1s}"
PEERS="${PEERS:-nginx rlf-memory rlf-redis}"
SCENARIOS="${SCENARIOS:-allow_1key allow_100k deny_1key plain}"
NGINX_PORT="${NGINX_PORT:-18080}"
RLF_MEM_PORT="${RLF_MEM_PORT:-18081}"
RLF_REDIS_PORT="${RLF_REDIS_PORT:-18082}"
REDIS_PORT="${REDIS_PORT:-16379}"

log() { echo "anchors: $*" >&2; }
die() { log "$*"; exit 1; }

want_peer() { [[ " $PEERS " == *" $1 "* ]]; }

for p in $PEERS; do
    case "$p" in nginx|rlf-memory|rlf-redis) ;; *) die "unknown peer $p" ;; esac
done
for s in $SCENARIOS; do
    case "$s" in allow_1key|allow_100k|deny_1key|plain) ;; *) die "unknown scenario $s" ;; esac
done

# This run's own directory: pid files and logs of redis and rlf (their run.sh read
# SLUICE_ANCHOR_RUN), nginx's prefix, the results.
export SLUICE_ANCHOR_RUN
SLUICE_ANCHOR_RUN="$(mktemp -d "${TMPDIR:-/tmp}/sluice-anchors.XXXXXX")"
RESULTS_DIR="${RESULTS_DIR:-$SLUICE_ANCHOR_RUN/results}"
mkdir -p "$RESULTS_DIR"
nginx_dir="$SLUICE_ANCHOR_RUN/nginx"

# ---------------------------------------------------------------- what the peers need
# Debian packages (scripts/bootstrap.sh installs all but Node.js's when node is there already),
# then rlf's node_modules from its package-lock.json.
install_missing() {
    local pkgs=()
    command -v wrk >/dev/null 2>&1 || pkgs+=(wrk)
    if want_peer nginx; then
        command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || pkgs+=(nginx-light)
    fi
    if want_peer rlf-redis; then
        command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
        command -v redis-cli >/dev/null 2>&1 || pkgs+=(redis-tools)
    fi
    if want_peer rlf-memory || want_peer rlf-redis; then
        command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
        command -v npm >/dev/null 2>&1 || pkgs+=(npm)
    fi
    if [ ${#pkgs[@]} -gt 0 ]; then
        log "installing: ${pkgs[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >&2
        apt-get install -y -q --no-install-recommends "${pkgs[@]}" >&2
    fi
    # rlf/run.sh installs node_modules itself on its first start (npm ci).
}

# ---------------------------------------------------------------- start and stop
started=()   # what cleanup stops, in the order started

cleanup() {
    local rc=$? i
    trap - EXIT INT TERM
    for ((i = ${#started[@]} - 1; i >= 0; i--)); do
        case "${started[$i]}" in
            nginx) "$here/nginx/run.sh" stop "$nginx_dir" >&2 || true ;;
            rlf-*) "$here/rlf/run.sh" stop "${started[$i]#rlf-}" >&2 || true ;;
            redis) "$here/redis/run.sh" stop "$REDIS_PORT" >&2 || true ;;
        esac
    done
    rm -rf -- "$nginx_dir/tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

need_port() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null ||
        die "port $1 is already in use on 127.0.0.1; not benchmarking someone else's server"
}

start_peers() {
    if want_peer nginx; then
        need_port "$NGINX_PORT"
        started+=(nginx)
        "$here/nginx/run.sh" start "$NGINX_PORT" "$nginx_dir" >&2
    fi
    if want_peer rlf-redis; then
        need_port "$REDIS_PORT"
        started+=(redis)
        "$here/redis/run.sh" start "$REDIS_PORT" >&2
    fi
    if want_peer rlf-memory; then
        need_port "$RLF_MEM_PORT"
        started+=("rlf-$RLF_MEM_PORT")
        RLF_STORE=memory "$here/rlf/run.sh" start "$RLF_MEM_PORT" >&2
    fi
    if want_peer rlf-redis; then
        need_port "$RLF_REDIS_PORT"
        started+=("rlf-$RLF_REDIS_PORT")
        RLF_STORE=redis REDIS_PORT="$REDIS_PORT" "$here/rlf/run.sh" start "$RLF_REDIS_PORT" >&2
    fi
}

peer_port() {
    case "$1" in
        nginx) echo "$NGINX_PORT" ;;
        rlf-memory) echo "$RLF_MEM_PORT" ;;
        rlf-redis) echo "$RLF_REDIS_PORT" ;;
    esac
}

# ---------------------------------------------------------------- wrk
# A wrk latency (812.00us, 1.23ms, 2.01s, 1.00m) in milliseconds.
to_ms() {
    awk -v v="$1" 'BEGIN {
        n = v + 0
        if (v ~ /us$/) n = n / 1000
        else if (v ~ /ms$/) n = n
        else if (v ~ /m$/) n = n * 60000
        else if (v ~ /s$/) n = n * 1000
        printf "%.3f", n }'
}

# wrk_args SCENARIO PORT: sets `args` to wrk's script, URL and script arguments.
wrk_args() {
    local base="http://127.0.0.1:$2"
    case "$1" in
        allow_1key) args=(-s "$here/wrk/fixed.lua" "$base/allow" -- one-key) ;;
        allow_100k) args=(-s "$here/wrk/keys.lua" "$base/allow" -- "$NKEYS") ;;
        deny_1key) args=(-s "$here/wrk/fixed.lua" "$base/deny" -- one-key) ;;
        plain) args=(-s "$here/wrk/fixed.lua" "$base/plain" -- one-key) ;;
    esac
}

run_one() {
    local peer="$1" scen="$2" out rps p99 total non2xx errs
    local args=()
    out="$RESULTS_DIR/$peer.$scen.txt"
    wrk_args "$scen" "$(peer_port "$peer")"
    log "$peer $scen: wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency ${args[*]}"
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "${args[@]}" >"$out" 2>&1 ||
        { log "wrk failed for $peer $scen:"; cat "$out" >&2; return 1; }
    rps="$(awk '/^Requests\/sec:/ {print $2}' "$out")"
    p99="$(awk '$1 == "99%" {print $2}' "$out")"
    total="$(awk '/ requests in / {print $1}' "$out")"
    non2xx="$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$out")"
    non2xx="${non2xx:-0}"
    errs="$(awk '/Socket errors:/ {sub(/^ *Socket errors: */, ""); print}' "$out")"
    if [ -z "$rps" ] || [ -z "$p99" ]; then
        log "could not read wrk's output $out"; cat "$out" >&2; return 1
    fi
    # /allow and /plain must never be limited; /deny must be, after the first request.
    case "$scen" in
        deny_*) [ "$non2xx" -ge $((total - 2)) ] || log "WARN $peer $scen: only $non2xx of $total were non-2xx" ;;
        *) [ "$non2xx" -eq 0 ] || log "WARN $peer $scen: $non2xx of $total were non-2xx" ;;
    esac
    [ -z "$errs" ] || log "WARN $peer $scen: socket errors: $errs"
    printf '%s\t%s\t%s\t%s\n' "$peer" "$scen" "$rps" "$(to_ms "$p99")" | tee -a "$RESULTS_DIR/table.tsv"
}

warm_up() {
    [ "$WARMUP" = 0 ] && return 0
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$WARMUP" -s "$here/wrk/fixed.lua" \
        "http://127.0.0.1:$(peer_port "$1")/allow" -- warm-up-key >"$RESULTS_DIR/$1.warmup.txt" 2>&1 || true
}

# ---------------------------------------------------------------- main
install_missing
log "state and results in $SLUICE_ANCHOR_RUN"
start_peers

printf 'peer\tscenario\trps\tp99_ms\n' | tee "$RESULTS_DIR/table.tsv"
for peer in $PEERS; do
    warm_up "$peer"
    for scen in $SCENARIOS; do
        run_one "$peer" "$scen"
    done
done
log "raw wrk output and table.tsv kept in $RESULTS_DIR"
