#!/usr/bin/env bash
# The cost guard: instructions per request of fixed scenarios, counted by callgrind, against the
# budgets in bench/perf_budget.tsv. Fails when a count is more than TOLERANCE_PCT (3) % over its
# budget; prints measured against budget for each scenario. A ctest test (label perf, release
# builds only), so `make test` runs it. bench/README.md says how to change a budget.
#
#   SLUICE=build/release/sluice bash tests/perf_guard.sh
#
# Why instructions: they do not depend on how busy the (shared) machine is, unlike rps or CPU
# time, and a fixed sequence of requests gives the same count run after run (well under 1 %
# apart). So the load is a fixed number of requests (REQUESTS after WARMUP), one at a time on
# one connection, with keys from a seeded generator (tests/perf_drive.py; gRPC:
# tests/grpc/perf_drive.js), and counting is turned on after the warm-up and off after the last
# reply (callgrind --instr-atstart=no, callgrind_control -i on/off), then dumped per scenario.
#
# Scenarios (one `sluice serve --threads 1` under callgrind with bench/compare/bench.yaml, the
# rules of bench/compare.sh and bench/callgrind.sh; instructions of the whole server process,
# all threads, divided by the requests):
#   auth_allow_1key    GET /v1/auth/allow, X-Key: k1 (forward-auth, never denied)
#   auth_allow_100k    the same with keys drawn from k1..k100000: almost every key is new
#   auth_deny_1key     GET /v1/auth/deny, X-Key: k1: 1 a minute, all but the first are 429
#   check_allow_1key   POST /v1/check, JSON, the allow limit on k1
#   grpc_allow_1key    RLS ShouldRateLimit, the same descriptor (skipped, saying so, when the
#                      Node.js client's packages are not installed: scripts/bootstrap.sh); not
#                      counting absl::Mutex's lock and wait functions, where gRPC's threads spin
#                      for as long as their timing makes them
# and in-process, `sluice bench store --keys 1` under callgrind with --toggle-collect on the
# decision's entry point (instructions per decision, the store's own cost):
#   store_decide       MemoryStore as a backend (its DecideAll), a token bucket, one key
#   store_denials      LocalOverLimitCache in front of it: what the memory-only server's stack does for
#                      an exact limit (LocalLeases only passes such an item on). Leases are not
#                      measured: when a thread takes one depends on its pace (kHotDecisions per
#                      millisecond), so their count is not fixed
#
# Env: SLUICE (required), BUDGET (bench/perf_budget.tsv), TOLERANCE_PCT (3), REQUESTS (2000),
#   WARMUP (300), SCENARIOS (all of the above, in that order), MEASURED_OUT (also write
#   "scenario<TAB>instructions/request" lines there), KEEP (1: keep the callgrind files).
# Exit: 0 all within budget; 1 a scenario over its budget (or without one); 2 the run failed.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
SLUICE="${SLUICE:?set SLUICE to the sluice binary}"
BUDGET="${BUDGET:-$root/bench/perf_budget.tsv}"
TOLERANCE_PCT="${TOLERANCE_PCT:-3}"
REQUESTS="${REQUESTS:-2000}"
WARMUP="${WARMUP:-300}"
all_scenarios="auth_allow_1key auth_allow_100k auth_deny_1key check_allow_1key grpc_allow_1key store_decide store_denials"
SCENARIOS="${SCENARIOS:-$all_scenarios}"

die() { echo "perf_guard: $*" >&2; exit 2; }
for tool in valgrind callgrind_control callgrind_annotate python3; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/bootstrap.sh installs it)"
done
[ -x "$SLUICE" ] || die "no sluice binary at $SLUICE"
[ -r "$BUDGET" ] || die "no budget file at $BUDGET"
for s in $SCENARIOS; do
  case " $all_scenarios " in *" $s "*) ;; *) die "unknown scenario $s" ;; esac
done
# Always in the order above, whatever the order asked: scenarios share the server's states.
selected=()
for s in $all_scenarios; do
  case " $SCENARIOS " in *" $s "*) selected+=("$s") ;; esac
done

sluice=$SLUICE
# shellcheck source=tests/lib.sh
source "$here/lib.sh"  # $tmp, and its cleanup stops what was started, by pid, on exit
keep_files() {  # KEEP=1: the callgrind files (and the rest of $tmp) outlive the run
  local d
  d=$(mktemp -d /tmp/sluice-perf-guard.XXXXXX) && cp -r "$tmp"/. "$d" &&
    echo "perf_guard: files kept in $d" >&2
}
[ "${KEEP:-0}" != 1 ] || cleanup_hooks+=(keep_files)
started=$SECONDS

measured="$tmp/measured.tsv"  # scenario, instructions/request
: >"$measured"

# The instructions a callgrind output file counted: its "totals:" line (a dump's "summary:"
# line says 0).
totals() { awk '/^totals:/ {print $2; exit}' "$1"; }

# ------------------------------------------------------------------ the server's scenarios
server_scenarios=()
for s in "${selected[@]}"; do
  case "$s" in auth_*|check_*|grpc_*) server_scenarios+=("$s") ;; esac
done
if [ ${#server_scenarios[@]} -gt 0 ]; then
  out="$tmp/callgrind.serve.out"
  start_prefix=(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out")
  start_wait=60  # valgrind starts slowly
  start serve --config "$root/bench/compare/bench.yaml" --threads 1 --grpc 127.0.0.1:0 ||
    { cat "$tmp/serve.err" >&2; die "sluice did not start under valgrind"; }
  on="callgrind_control -i on $PID >/dev/null"
  # Off, then a dump of what was counted (the counters start from zero again after it).
  off="callgrind_control -i off $PID >/dev/null && callgrind_control -d $PID >/dev/null"
  dumps=0
  for s in "${server_scenarios[@]}"; do
    args=()
    case "$s" in
      auth_allow_1key) args=(--mode auth --path /v1/auth/allow --keys 1) ;;
      auth_allow_100k) args=(--mode auth --path /v1/auth/allow --keys 100000 --seed 1) ;;
      auth_deny_1key) args=(--mode auth --path /v1/auth/deny --keys 1 --expect deny) ;;
      check_allow_1key) args=(--mode check --keys 1) ;;
    esac
    if [[ $s == grpc_* ]]; then
      if [ ! -d "$here/grpc/node_modules/@grpc/grpc-js" ] || ! command -v node >/dev/null; then
        echo "perf_guard: SKIP $s: the Node.js gRPC client is not installed (scripts/bootstrap.sh)"
        continue
      fi
      node "$here/grpc/perf_drive.js" "$GRPC" "$WARMUP" "$REQUESTS" "$on" "$off" \
        >"$tmp/$s.json" 2>"$tmp/$s.err" || { cat "$tmp/$s.err" >&2; die "$s: the client failed"; }
    else
      python3 "$here/perf_drive.py" --port "${DATA##*:}" "${args[@]}" --warmup "$WARMUP" \
        --requests "$REQUESTS" --on-start "$on" --on-end "$off" \
        >"$tmp/$s.json" 2>"$tmp/$s.err" || { cat "$tmp/$s.err" >&2; die "$s: the client failed"; }
    fi
    dumps=$((dumps + 1))
    # callgrind_control -d returns once the dump is written; its file is OUT.<n>, n counting
    # dumps from 1.
    file="$out.$dumps"
    [ -s "$file" ] || die "$s: no callgrind dump at $file"
    instructions="$(totals "$file")"
    [ -n "$instructions" ] || die "$s: no totals in $file"
    if [[ $s == grpc_* ]]; then
      # gRPC's own threads meet on absl::Mutex, which spins before it sleeps: how long depends
      # on how the threads ran (2-3 % of a call's count from run to run). Its lock and wait
      # functions are left out of the count.
      spun=$(callgrind_annotate --threshold=100 --inclusive=no "$file" 2>/dev/null | awk '
        /absl::[A-Za-z0-9_]*::(Mutex::|synchronization_internal::)|AbslInternalPerThreadSem/ {
          gsub(",", "", $1); n += $1 }
        END { print n + 0 }')
      instructions=$((instructions - spun))
    fi
    mv "$file" "$tmp/callgrind.$s.out"
    awk -v s="$s" -v i="$instructions" -v n="$REQUESTS" \
      'BEGIN { printf "%s\t%.0f\n", s, i / n }' >>"$measured"
  done
  stop "$PID" 10
fi

# ------------------------------------------------------------------ in-process: the store
for s in "${selected[@]}"; do
  case "$s" in
    store_decide) through=backend; entry='sluice::store::MemoryStore::Decide(*' ;;
    store_denials) through=local_over_limit_cache; entry='sluice::store::LocalOverLimitCache::Decide(*' ;;
    *) continue ;;
  esac
  out="$tmp/callgrind.$s.out"
  # Collected only inside the entry point: start-up, the clock and the loop are left out. The
  # decisions are counted by the bench itself (its JSON's "decisions").
  valgrind --tool=callgrind --collect-atstart=no --toggle-collect="$entry" \
    --callgrind-out-file="$out" "$SLUICE" bench store --keys 1 --threads 1 --seconds 0.5 \
    --through "$through" --algorithm token_bucket --limit 1000000 --window 1s \
    >"$tmp/$s.json" 2>"$tmp/$s.err" || { cat "$tmp/$s.err" >&2; die "$s: sluice bench store failed"; }
  decisions="$(sed -n 's/.*"decisions":\([0-9]*\).*/\1/p' "$tmp/$s.json")"
  instructions="$(totals "$out")"
  [ -n "$decisions" ] && [ "$decisions" -gt 0 ] && [ -n "$instructions" ] ||
    { cat "$tmp/$s.json" >&2; die "$s: could not read the decisions or the instructions"; }
  awk -v s="$s" -v i="$instructions" -v n="$decisions" \
    'BEGIN { printf "%s\t%.0f\n", s, i / n }' >>"$measured"
done

[ -z "${MEASURED_OUT:-}" ] || cp "$measured" "$MEASURED_OUT"

# ------------------------------------------------------------------ against the budgets
# Budget file: "scenario<TAB>instructions/request<TAB>reason", # comments, a header line.
awk -F'\t' -v tol="$TOLERANCE_PCT" '
  FNR == NR { if ($0 !~ /^#/ && $1 != "scenario" && NF >= 2) budget[$1] = $2; next }
  {
    s = $1; m = $2
    if (!(s in budget)) { printf "%-18s %8d instructions/request, NO BUDGET\n", s, m; bad = 1; next }
    b = budget[s]; pct = (m / b - 1) * 100
    verdict = pct > tol ? "OVER (more than " tol " % over budget)" : "ok"
    if (pct < -10) verdict = "ok (more than 10 % under: lower the budget, bench/README.md)"
    if (pct > tol) bad = 1
    printf "%-18s %8d instructions/request, budget %8d (%+.1f %%)  %s\n", s, m, b, pct, verdict
  }
  END { exit bad }' "$BUDGET" "$measured"
rc=$?
echo "perf_guard: $(wc -l <"$measured") scenarios in $((SECONDS - started)) s, tolerance $TOLERANCE_PCT %," \
  "budgets in $BUDGET"
exit "$rc"
