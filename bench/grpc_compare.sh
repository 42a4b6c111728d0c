#!/usr/bin/env bash
# sluice's gRPC port (Envoy RLS v3 ShouldRateLimit) against its HTTP POST /v1/check, at the same
# concurrency, in one run on this machine (issue 7).
#
#   bench/grpc_compare.sh   start `sluice serve --threads 1` with bench/compare/bench.yaml on
#                           ports the kernel picks, run build/release/grpc_load in both modes at
#                           each concurrency, print one table, stop the server
#
# gRPC: one channel (one HTTP/2 connection), CONCURRENCY streams in flight. HTTP: CONCURRENCY
# keep-alive connections, one request in flight on each. Every call is one decision on the
# descriptor (generic_key=allow, key=k<i>), limited at 1,000,000/s per key: always allowed.
# Server CPU is utime+stime from /proc/PID/stat before and after each run (the whole process:
# the gRPC port runs on gRPC's own threads, which --threads does not set).
#
# stdout: the table (aligned columns). stderr: progress. The JSON lines of grpc_load stay in a
# fresh /tmp/sluice-grpc-compare.XXXXXX/.
#
# Env: SECONDS_PER_RUN (5), WARMUP (0.5), CONCURRENCY ("1 16 64"), KEYS ("1"; e.g. "1 100000"),
#   MODES ("grpc http"), THREADS (1), SLUICE (build/release/sluice),
#   GRPC_LOAD (build/release/grpc_load).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

SECONDS_PER_RUN="${SECONDS_PER_RUN:-5}"
WARMUP="${WARMUP:-0.5}"
CONCURRENCY="${CONCURRENCY:-1 16 64}"
KEYS="${KEYS:-1}"
MODES="${MODES:-grpc http}"
THREADS="${THREADS:-1}"
SLUICE="${SLUICE:-$root/build/release/sluice}"
GRPC_LOAD="${GRPC_LOAD:-$root/build/release/grpc_load}"

log() { echo "grpc_compare: $*" >&2; }
die() { log "$*"; exit 1; }

for bin in "$SLUICE" "$GRPC_LOAD"; do
    [ -x "$bin" ] || die "no binary at $bin; build it with
  cmake --preset release && cmake --build --preset release -j2     (from $root)"
done

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/sluice-grpc-compare.XXXXXX")"
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_sluice
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Port 0 everywhere: the kernel picks free ports and sluice prints them.
start_sluice "$SLUICE" --config "$here/compare/bench.yaml" --threads "$THREADS" \
    --listen 127.0.0.1:0 --admin 127.0.0.1:0 --grpc 127.0.0.1:0 || die "sluice did not start"
data="$(sluice_address "data plane")"
grpc="$(sluice_address grpc)"
if [ -z "$data" ] || [ -z "$grpc" ]; then die "could not read the ports from $run_dir/sluice.out"; fi
log "sluice pid $sluice_pid: data plane $data, grpc $grpc, --threads $THREADS"

clk_tck="$(getconf CLK_TCK)"
field() { sed -n "s/.*\"$1\":\\([^,}]*\\).*/\\1/p" <<<"$2"; }

{
    printf 'mode\tconcurrency\tkeys\tdecisions_per_sec\tp50_us\tp99_us\terrors\tover_limit'
    printf '\tserver_cpu_s\tdecisions_per_server_cpu_s\tclient_cpu_s\n'
} >"$run_dir/table.tsv"

for keys in $KEYS; do
    for c in $CONCURRENCY; do
        for mode in $MODES; do
            if [ "$mode" = grpc ]; then target="$grpc"; else target="$data"; fi
            before="$(cpu_ticks "$sluice_pid")"
            line="$("$GRPC_LOAD" --mode "$mode" --target "$target" --concurrency "$c" \
                --seconds "$SECONDS_PER_RUN" --warmup "$WARMUP" --keys "$keys")" \
                || die "grpc_load failed: $mode c=$c keys=$keys"
            after="$(cpu_ticks "$sluice_pid")"
            echo "$line" >>"$run_dir/runs.jsonl"
            log "$line"
            # Server CPU covers the warm-up too, so divide all decisions made in it: the
            # measured rate times (warm-up + measured seconds).
            awk -v t=$((after - before)) -v hz="$clk_tck" -v rate="$(field decisions_per_sec "$line")" \
                -v secs="$SECONDS_PER_RUN" -v warm="$WARMUP" \
                -v mode="$mode" -v c="$c" -v k="$keys" -v p50="$(field p50_us "$line")" \
                -v p99="$(field p99_us "$line")" -v err="$(field errors "$line")" \
                -v over="$(field over_limit "$line")" -v ccpu="$(field client_cpu_s "$line")" \
                'BEGIN { cpu = t / hz
                         printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.0f\t%s\n", mode, c, k, rate,
                                p50, p99, err, over, cpu, (cpu > 0 ? rate * (secs + warm) / cpu : 0), ccpu }' \
                >>"$run_dir/table.tsv"
        done
    done
done
column -t -s $'\t' "$run_dir/table.tsv"
log "raw JSON lines and table.tsv in $run_dir"
