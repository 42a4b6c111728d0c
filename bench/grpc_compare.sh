#!/usr/bin/env bash
# sluice's gRPC port (Envoy RLS v3 ShouldRateLimit) against its HTTP POST /v1/check, at the same
# concurrency, in one run on this machine (issue 7).
#
#   bench/grpc_compare.sh   for each concurrency and each gRPC threads setting, start
#                           `sluice serve --threads 1` with bench/compare/bench.yaml and a
#                           settings file saying `grpc: {threads: N}` on ports the kernel picks,
#                           run build/release/grpc_load against it (gRPC; HTTP too on the first
#                           setting's server), stop it; print one table
#
# grpc.threads 0 is the gRPC callback API on gRPC's own threads; N > 0 the async API with N
# completion queues, one thread each (src/rls/grpc_server.h). A fresh server per run keeps the
# settings' runs interleaved, so a machine whose load drifts skews them alike.
#
# gRPC: one channel (one HTTP/2 connection), CONCURRENCY streams in flight. HTTP: CONCURRENCY
# keep-alive connections, one request in flight on each. Every call is one decision on the
# descriptor (generic_key=allow, key=k<i>), limited at 1,000,000/s per key: always allowed.
# Server CPU is utime+stime from /proc/PID/stat before and after each run (the whole process:
# the gRPC port runs on gRPC's own threads or its completion-queue threads, which --threads does
# not set).
#
# stdout: the table (aligned columns). stderr: progress. The JSON lines of grpc_load stay in a
# fresh /tmp/sluice-grpc-compare.XXXXXX/.
#
# Env: SECONDS_PER_RUN (5), WARMUP (0.5), CONCURRENCY ("1 16 64"), KEYS ("1"; e.g. "1 100000"),
#   MODES ("grpc http"), THREADS (1), GRPC_THREADS ("0 1 2"), SLUICE (build/release/sluice),
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
GRPC_THREADS="${GRPC_THREADS:-0 1 2}"
SLUICE="${SLUICE:-$root/build/release/sluice}"
GRPC_LOAD="${GRPC_LOAD:-$root/build/release/grpc_load}"

log() { echo "grpc_compare: $*" >&2; }
die() { log "$*"; exit 1; }

for bin in "$SLUICE" "$GRPC_LOAD"; do
    [ -x "$bin" ] || die "no binary at $bin; build it with
  cmake --preset release && cmake --build --preset release -j2     (from $root)"
done

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/sluice-grpc-compare.XXXXXX")"
sluice="$SLUICE"
# shellcheck source=bench/lib.sh
source "$here/lib.sh"  # (its cleanup stops every server started here, by pid, on exit)

# One settings file per gRPC threads setting, each naming a rules directory holding bench.yaml.
mkdir -p "$run_dir/rules"
cp "$here/compare/bench.yaml" "$run_dir/rules/bench.yaml"
for gt in $GRPC_THREADS; do
    printf 'rules: ./rules\ngrpc: {threads: %s}\n' "$gt" >"$run_dir/sluice-grpc$gt.yaml"
done
first_gt="${GRPC_THREADS%% *}"

# serve GT: starts sluice with grpc.threads GT; port 0 everywhere (the kernel picks free ports
# and sluice prints them: tests/lib.sh's start). Sets PID, DATA and GRPC.
serve() {
    start "$run_dir/sluice" --config "$run_dir/sluice-grpc$1.yaml" --threads "$THREADS" \
        --grpc 127.0.0.1:0 || { cat "$run_dir/sluice.err" >&2; die "sluice did not start (output in $run_dir)"; }
    if [ -z "$DATA" ] || [ -z "$GRPC" ]; then die "could not read the ports from $run_dir/sluice.out"; fi
    log "sluice pid $PID: data plane $DATA, grpc $GRPC, --threads $THREADS, grpc.threads $1"
}

clk_tck="$(getconf CLK_TCK)"

{
    printf 'mode\tgrpc_threads\tconcurrency\tkeys\tdecisions_per_sec\tp50_us\tp99_us\terrors'
    printf '\tover_limit\tserver_cpu_s\tdecisions_per_server_cpu_s\tclient_cpu_s\n'
} >"$run_dir/table.tsv"

for keys in $KEYS; do
    for c in $CONCURRENCY; do
        for gt in $GRPC_THREADS; do
            serve "$gt"
            for mode in $MODES; do
                if [ "$mode" = grpc ]; then
                    target="$GRPC"; label="$gt"
                else
                    # HTTP does not depend on grpc.threads: measured once, on the first server.
                    [ "$gt" = "$first_gt" ] || continue
                    target="$DATA"; label="-"
                fi
                before="$(cpu_ticks "$PID")"
                line="$("$GRPC_LOAD" --mode "$mode" --target "$target" --concurrency "$c" \
                    --seconds "$SECONDS_PER_RUN" --warmup "$WARMUP" --keys "$keys")" \
                    || die "grpc_load failed: $mode grpc.threads=$gt c=$c keys=$keys"
                after="$(cpu_ticks "$PID")"
                echo "$line" >>"$run_dir/runs.jsonl"
                log "grpc.threads=$gt $line"
                # Server CPU covers the warm-up too, so divide all decisions made in it: the
                # measured rate times (warm-up + measured seconds).
                awk -v t=$((after - before)) -v hz="$clk_tck" -v rate="$(field decisions_per_sec "$line")" \
                    -v secs="$SECONDS_PER_RUN" -v warm="$WARMUP" -v gt="$label" \
                    -v mode="$mode" -v c="$c" -v k="$keys" -v p50="$(field p50_us "$line")" \
                    -v p99="$(field p99_us "$line")" -v err="$(field errors "$line")" \
                    -v over="$(field over_limit "$line")" -v ccpu="$(field client_cpu_s "$line")" \
                    'BEGIN { cpu = t / hz
                             printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.0f\t%s\n", mode, gt, c, k,
                                    rate, p50, p99, err, over, cpu,
                                    (cpu > 0 ? rate * (secs + warm) / cpu : 0), ccpu }' \
                    >>"$run_dir/table.tsv"
            done
            stop
        done
    done
done
column -t -s $'\t' "$run_dir/table.tsv"
log "raw JSON lines and table.tsv in $run_dir"
