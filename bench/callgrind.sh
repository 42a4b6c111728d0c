#!/usr/bin/env bash
# Instructions per forward-auth request of `sluice serve --threads 1`, counted by callgrind: a
# figure that does not depend on how busy the (shared) machine is, unlike rps or CPU time.
#
#   bench/callgrind.sh [SCENARIO...]     allow_1key (default), allow_100k, deny_1key, plain
#
# For each scenario: starts sluice under valgrind --tool=callgrind with bench/compare/bench.yaml
# on 127.0.0.1, warms it up with 2 s of load, counts from then on (start-up, config loading and
# first-call costs are left out) while wrk runs against /v1/auth/<path> for DURATION, stops counting, stops sluice by its pid
# and prints "scenario requests instructions instructions/request". The callgrind output stays
# in a fresh /tmp/sluice-callgrind.XXXXXX/ for callgrind_annotate.
#
# Env: SLUICE (build/release/sluice), CONFIG (what --config names: bench/compare/bench.yaml, or
#   a settings file whose rules are its policies, e.g. with tracing on: bench/tracing.sh),
#   DURATION (5s), CONNECTIONS (8), PORT (18190),
#   ANCHORS (bench/anchors, for the wrk scripts), NKEYS (100000), CALLGRIND_ARGS (more valgrind
#   options, e.g. --cache-sim=yes to count cache misses, --demangle=no for bench/hot_path_order.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
SLUICE="${SLUICE:-$root/build/release/sluice}"
DURATION="${DURATION:-5s}"
CONNECTIONS="${CONNECTIONS:-8}"
PORT="${PORT:-18190}"
ANCHORS="${ANCHORS:-$root/bench/anchors}"
NKEYS="${NKEYS:-100000}"
CONFIG="${CONFIG:-$here/compare/bench.yaml}"
scenarios="${*:-allow_1key}"

command -v valgrind >/dev/null || { echo "callgrind: valgrind is missing" >&2; exit 1; }
command -v wrk >/dev/null || { echo "callgrind: wrk is missing" >&2; exit 1; }
[ -x "$SLUICE" ] || { echo "callgrind: no sluice binary at $SLUICE" >&2; exit 1; }

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/sluice-callgrind.XXXXXX")"
sluice="$SLUICE"
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"  # (its cleanup stops sluice, by pid, on exit)
start_wait=60  # valgrind starts slowly

for scen in $scenarios; do
    case "$scen" in
        allow_100k) script=("$ANCHORS/wrk/keys.lua"); arg="$NKEYS" ;;
        allow_1key|deny_1key|plain) script=("$ANCHORS/wrk/fixed.lua"); arg=one-key ;;
        *) echo "callgrind: unknown scenario $scen" >&2; exit 1 ;;
    esac
    out="$run_dir/callgrind.$scen.out"
    read -r -a extra <<<"${CALLGRIND_ARGS:-}"
    start_prefix=(valgrind --tool=callgrind --instr-atstart=no "${extra[@]}" --callgrind-out-file="$out")
    start "$run_dir/$scen" --config "$CONFIG" --threads 1 --grpc 0 \
        --listen "127.0.0.1:$PORT" || { cat "$run_dir/$scen.err" >&2; exit 1; }
    url="http://127.0.0.1:$PORT/v1/auth/${scen%%_*}"
    # Warm-up, not counted: code translated by valgrind, lazy bindings resolved, buffers grown.
    wrk -t1 -c"$CONNECTIONS" -d2s --timeout 10s -s "${script[0]}" "$url" -- "$arg" >/dev/null 2>&1 || true
    callgrind_control -i on "$PID" >/dev/null 2>&1
    wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --timeout 10s -s "${script[0]}" "$url" -- "$arg" \
        >"$run_dir/$scen.wrk" 2>&1
    callgrind_control -i off "$PID" >/dev/null 2>&1
    stop "$PID" 10
    requests="$(awk '/ requests in / {print $1}' "$run_dir/$scen.wrk")"
    instructions="$(awk '/^totals:/ {print $2}' "$out")"
    [ -n "$requests" ] && [ -n "$instructions" ] || { cat "$run_dir/$scen.wrk" >&2; exit 1; }
    awk -v s="$scen" -v r="$requests" -v i="$instructions" \
        'BEGIN { printf "%s\t%d requests\t%d instructions\t%.0f instructions/request\n", s, r, i, i / r }'
done
echo "callgrind: output in $run_dir" >&2
