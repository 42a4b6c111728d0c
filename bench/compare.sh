#!/usr/bin/env bash
# sluice's forward-auth path against nginx limit_req, in one run on this machine (issue 5).
#
#   bench/compare.sh        start nginx (1 worker) and `sluice serve --threads 1`, run wrk on
#                           each scenario, print one table, stop both
#
# Peers (127.0.0.1 only):
#   nginx    the anchor in $ANCHORS/nginx: limit_req keyed on X-Key, /allow /deny /plain
#   sluice   `sluice serve --threads 1 --config bench/compare/bench.yaml`, the same policies,
#            hit on its forward-auth endpoint: /v1/auth/allow, /v1/auth/deny, /v1/auth/plain
#            (no X-Original-URI, so sluice limits the path after /v1/auth)
# Scenarios (wrk -t1 -cCONNECTIONS -dDURATION --latency, the anchor's wrk scripts):
#   allow_1key   /allow, one key             allow_100k   /allow, keys drawn from 100,000
#   deny_1key    /deny, one key (all but the first request are 429)
#   plain        no limiter: each server's own cost
#
# For each peer and scenario: rps and p99 from wrk, the server's CPU seconds during the wrk run
# (utime+stime of /proc/PID/stat before and after; nginx: master + worker), and requests per
# server CPU-second, and that CPU time per request split into user (the server's own code) and
# sys (the kernel: system calls, TCP over loopback, which on this path is most of it); then
# sluice/nginx ratios. Peers alternate within each scenario so that both
# see the same machine. With ROUNDS > 1 every figure is the median over the rounds (each column
# on its own).
#
# With SLUICE_BASELINE (another build of sluice, e.g. of an earlier commit) a third peer,
# `baseline`, serves the same config on BASELINE_PORT and runs in turn with the others; a second
# table then gives, per scenario, sluice's and the baseline's requests per CPU-second and their
# ratio: the median and the lowest and highest of the rounds' ratios (each round's pair ran
# back to back on the same machine).
#
# stdout: the table (aligned columns). stderr: progress and WARN lines (unexpected status codes,
# socket errors). Raw wrk output stays in a fresh /tmp/sluice-compare.XXXXXX/.
#
# Env: DURATION (5s), CONNECTIONS (64), ROUNDS (1), WARMUP (1s, 0 = none), NKEYS (100000),
#   SCENARIOS ("allow_1key allow_100k deny_1key plain"), SLUICE (build/release/sluice),
#   ANCHORS (bench/anchors), NGINX_PORT (18080), SLUICE_PORT (18090),
#   SLUICE_ADMIN_PORT (18091), SLUICE_BASELINE (none), BASELINE_PORT (18092),
#   BASELINE_ADMIN_PORT (18093).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

DURATION="${DURATION:-5s}"
CONNECTIONS="${CONNECTIONS:-64}"
ROUNDS="${ROUNDS:-1}"
WARMUP="${WARMUP:-1s}"
NKEYS="${NKEYS:-100000}"
SCENARIOS="${SCENARIOS:-allow_1key allow_100k deny_1key plain}"
SLUICE="${SLUICE:-$root/build/release/sluice}"
ANCHORS="${ANCHORS:-$root/bench/anchors}"
NGINX_PORT="${NGINX_PORT:-18080}"
SLUICE_PORT="${SLUICE_PORT:-18090}"
SLUICE_ADMIN_PORT="${SLUICE_ADMIN_PORT:-18091}"
SLUICE_BASELINE="${SLUICE_BASELINE:-}"
BASELINE_PORT="${BASELINE_PORT:-18092}"
BASELINE_ADMIN_PORT="${BASELINE_ADMIN_PORT:-18093}"
PEERS="nginx sluice"
[ -z "$SLUICE_BASELINE" ] || PEERS="nginx sluice baseline"

log() { echo "compare: $*" >&2; }
die() { log "$*"; exit 1; }

[ -x "$SLUICE" ] || die "no sluice binary at $SLUICE; build it with
  cmake --preset release && cmake --build --preset release -j2     (from $root)
or point SLUICE at one"
[ -z "$SLUICE_BASELINE" ] || [ -x "$SLUICE_BASELINE" ] ||
    die "SLUICE_BASELINE=$SLUICE_BASELINE is not an executable"
[ -x "$ANCHORS/nginx/run.sh" ] || die "no nginx anchor in $ANCHORS (set ANCHORS)"
command -v wrk >/dev/null || die "wrk is missing (scripts/bootstrap.sh installs it)"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"
for s in $SCENARIOS; do
    case "$s" in allow_1key|allow_100k|deny_1key|plain) ;; *) die "unknown scenario $s" ;; esac
done

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/sluice-compare.XXXXXX")"
sluice="$SLUICE"
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

# Stops sluice and nginx on exit; refuses ports already taken (bench/lib.sh).
against_nginx_session "$run_dir/nginx"

# ---------------------------------------------------------------- servers
"$ANCHORS/nginx/run.sh" start "$NGINX_PORT" "$nginx_dir" >&2
nginx_started=1
nginx_master="$(cat "$nginx_dir/nginx.pid")"
nginx_workers="$(ps -o pid= --ppid "$nginx_master" | tr -s ' \n' ' ')"
[ -n "${nginx_workers// /}" ] || die "nginx master $nginx_master has no worker"

start "$run_dir/sluice" --config "$here/compare/bench.yaml" --threads 1 --grpc 0 \
    --listen "127.0.0.1:$SLUICE_PORT" --admin "127.0.0.1:$SLUICE_ADMIN_PORT" ||
    { cat "$run_dir/sluice.err" >&2; die "sluice did not start (output in $run_dir)"; }
sluice_pid=$PID
log "nginx pids $nginx_master $nginx_workers on :$NGINX_PORT; sluice pid $sluice_pid on :$SLUICE_PORT"
if [ -n "$SLUICE_BASELINE" ]; then
    sluice="$SLUICE_BASELINE"
    start "$run_dir/baseline" --config "$here/compare/bench.yaml" --threads 1 --grpc 0 \
        --listen "127.0.0.1:$BASELINE_PORT" --admin "127.0.0.1:$BASELINE_ADMIN_PORT" ||
        { cat "$run_dir/baseline.err" >&2; die "the baseline did not start (output in $run_dir)"; }
    baseline_pid=$PID
    sluice="$SLUICE"
    log "baseline ($SLUICE_BASELINE) pid $baseline_pid on :$BASELINE_PORT"
fi

server_pids() {
    case "$1" in
        nginx) echo "$nginx_master $nginx_workers" ;;
        baseline) echo "$baseline_pid" ;;
        *) echo "$sluice_pid" ;;
    esac
}

url() {
    local path="${2%%_*}"   # allow_1key -> allow
    case "$1" in
        nginx) echo "http://127.0.0.1:$NGINX_PORT/$path" ;;
        baseline) echo "http://127.0.0.1:$BASELINE_PORT/v1/auth/$path" ;;
        *) echo "http://127.0.0.1:$SLUICE_PORT/v1/auth/$path" ;;
    esac
}

clk_tck="$(getconf CLK_TCK)"

# wrk prints latencies as 812.00us / 1.23ms / 2.01s; turn one into ms.
to_ms() {
    awk -v v="$1" 'BEGIN { n = v + 0
        if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n = n; else if (v ~ /m$/) n *= 60000
        else if (v ~ /s$/) n *= 1000
        printf "%.3f", n }'
}

# ---------------------------------------------------------------- runs
results="$run_dir/rows.tsv"   # round peer scenario rps p99_ms cpu_s req_per_cpu_s user_us sys_us
: >"$results"

run_one() {
    local round="$1" peer="$2" scen="$3" out args total rps p99 non2xx errs cpu eff
    local user0 sys0 user1 sys1 user_us sys_us
    out="$run_dir/$peer.$scen.$round.txt"
    case "$scen" in
        allow_100k) args=(-s "$ANCHORS/wrk/keys.lua" "$(url "$peer" "$scen")" -- "$NKEYS") ;;
        *)          args=(-s "$ANCHORS/wrk/fixed.lua" "$(url "$peer" "$scen")" -- one-key) ;;
    esac
    # shellcheck disable=SC2046
    read -r user0 sys0 < <(cpu_ticks_split $(server_pids "$peer"))
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency "${args[@]}" >"$out" 2>&1 \
        || { cat "$out" >&2; die "wrk failed for $peer $scen"; }
    # shellcheck disable=SC2046
    read -r user1 sys1 < <(cpu_ticks_split $(server_pids "$peer"))
    rps="$(awk '/^Requests\/sec:/ {print $2}' "$out")"
    p99="$(awk '$1 == "99%" {print $2}' "$out")"
    total="$(awk '/ requests in / {print $1}' "$out")"
    non2xx="$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$out")"; non2xx="${non2xx:-0}"
    errs="$(awk '/Socket errors:/ {sub(/^ *Socket errors: */, ""); print}' "$out")"
    if [ -z "$rps" ] || [ -z "$p99" ] || [ -z "$total" ]; then cat "$out" >&2; die "could not parse $out"; fi
    case "$scen" in
        deny_*) [ "$non2xx" -ge $((total - 2)) ] || log "WARN $peer $scen: only $non2xx of $total were non-2xx" ;;
        *)      [ "$non2xx" -eq 0 ] || log "WARN $peer $scen: $non2xx of $total were non-2xx" ;;
    esac
    [ -z "$errs" ] || log "WARN $peer $scen: socket errors: $errs"
    cpu="$(awk -v t=$((user1 - user0 + sys1 - sys0)) -v hz="$clk_tck" 'BEGIN { printf "%.2f", t / hz }')"
    eff="$(awk -v n="$total" -v c="$cpu" 'BEGIN { if (c > 0) printf "%.0f", n / c; else print "inf" }')"
    # CPU microseconds per request: in the server's own code (user) and in the kernel (sys).
    user_us="$(awk -v t=$((user1 - user0)) -v hz="$clk_tck" -v n="$total" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')"
    sys_us="$(awk -v t=$((sys1 - sys0)) -v hz="$clk_tck" -v n="$total" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')"
    log "round $round $peer $scen: $rps rps, p99 $(to_ms "$p99") ms, $cpu CPU-s, $eff req/CPU-s," \
        "$user_us us user + $sys_us us sys per request"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$peer" "$scen" "$rps" "$(to_ms "$p99")" \
        "$cpu" "$eff" "$user_us" "$sys_us" >>"$results"
}

if [ "$WARMUP" != 0 ]; then
    for peer in $PEERS; do
        wrk -t1 -c"$CONNECTIONS" -d"$WARMUP" -s "$ANCHORS/wrk/fixed.lua" \
            "$(url "$peer" allow_1key)" -- warm-up-key >"$run_dir/$peer.warmup.txt" 2>&1 || true
    done
fi

for round in $(seq 1 "$ROUNDS"); do
    for scen in $SCENARIOS; do
        for peer in $PEERS; do run_one "$round" "$peer" "$scen"; done
    done
done

# ---------------------------------------------------------------- table
# Medians per peer x scenario (each column on its own), then sluice/nginx ratios.
{
    printf 'scenario\tpeer\trps\tp99_ms\tcpu_s\treq_per_cpu_s\tuser_us\tsys_us\trps_ratio\tp99_ratio\treq_per_cpu_ratio\n'
    awk -F'\t' -v scenarios="$SCENARIOS" '
        function median(list,   a, n, i, j, t) {
            n = split(list, a, " ")
            for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        { k = $2 SUBSEP $3; for (c = 4; c <= 9; c++) v[k, c] = v[k, c] " " $c }
        END {
            ns = split(scenarios, sc, " ")
            for (s = 1; s <= ns; s++) {
                for (c = 4; c <= 9; c++) { n[c] = median(v["nginx", sc[s], c]); m[c] = median(v["sluice", sc[s], c]) }
                printf "%s\tnginx\t%.0f\t%.2f\t%.2f\t%.0f\t%.2f\t%.2f\t\t\t\n", sc[s], n[4], n[5], n[6], n[7], n[8], n[9]
                printf "%s\tsluice\t%.0f\t%.2f\t%.2f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", sc[s], m[4], m[5], m[6], m[7],
                       m[8], m[9], m[4] / n[4], (n[5] > 0 ? m[5] / n[5] : 0), (n[7] > 0 ? m[7] / n[7] : 0)
            }
        }' "$results"
} >"$run_dir/table.tsv"
column -t -s $'\t' "$run_dir/table.tsv"
log "ratios are sluice/nginx: want rps >= 1, p99 <= 1, req_per_cpu >= 1.3"
if [ -n "$SLUICE_BASELINE" ]; then
    # sluice against the baseline, round by round: each round's pair ran back to back.
    echo
    {
        printf 'scenario\tsluice_req_per_cpu\tbaseline_req_per_cpu\tratio_median\tratio_min\tratio_max\n'
        awk -F'\t' -v scenarios="$SCENARIOS" '
            function median(list,   a, n, i, j, t) {
                n = split(list, a, " ")
                for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
            }
            { eff[$1, $2, $3] = $7; rounds[$1] = 1; all[$2, $3] = all[$2, $3] " " $7 }
            END {
                ns = split(scenarios, sc, " ")
                for (s = 1; s <= ns; s++) {
                    list = ""; lo = ""; hi = ""
                    for (r in rounds) {
                        b = eff[r, "baseline", sc[s]]; if (b + 0 <= 0) continue
                        q = eff[r, "sluice", sc[s]] / b; list = list " " q
                        if (lo == "" || q < lo) lo = q; if (hi == "" || q > hi) hi = q
                    }
                    printf "%s\t%.0f\t%.0f\t%.3f\t%.3f\t%.3f\n", sc[s], median(all["sluice", sc[s]]),
                           median(all["baseline", sc[s]]), median(list), lo, hi
                }
            }' "$results"
    } >"$run_dir/baseline.tsv"
    column -t -s $'\t' "$run_dir/baseline.tsv"
    log "ratio: sluice / baseline requests per CPU-second; >= 1: sluice costs no more CPU per request"
fi
log "rounds: $ROUNDS, wrk -t1 -c$CONNECTIONS -d$DURATION; raw output and table.tsv in $run_dir"
