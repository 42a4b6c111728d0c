#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang-14, ASan + UBSan) and runs each for a
# bounded time on a copy of its seed corpus (fuzz/corpus/<target>/; the copy grows, the
# repository's corpus does not), with fuzz/<target>.dict as its dictionary. Exits non-zero if any
# target found a crash, leak, timeout or out-of-memory, and says where the reproducer is.
#
#   scripts/fuzz.sh [build|run]     (default: both, in that order)
#
#   FUZZ_SECONDS   seconds per target (default 20)
#   FUZZ_TARGETS   targets to run (default: all)
#   FUZZ_JOBS      build parallelism (default 2)
#   FUZZ_PARALLEL  targets run at once (default: the number of cores)
#
# Reproduce a finding: build/fuzz/<target> <reproducer>
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-20}"
read -r -a targets <<<"${FUZZ_TARGETS:-fuzz_check_json fuzz_config fuzz_resp fuzz_http fuzz_http_server fuzz_rls}"

what=${1:-all}
if [ "$what" != run ]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "${FUZZ_JOBS:-2}"
fi
[ "$what" = build ] && exit 0

work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-fuzz.XXXXXX")"

# run_target T: runs one target for its time; its status is its verdict, its log $work/T/log.
run_target() {
  local t=$1 dict=()
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  cp fuzz/corpus/"$t"/* "$work/$t/corpus/"
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  # -timeout: one input over 5 s is a hang; -rss_limit_mb also caps a single malloc.
  build/fuzz/"$t" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 "${dict[@]}" \
    -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" "$work/$t/corpus" \
    >"$work/$t/log" 2>&1
}

# Each target runs single-threaded for its time, so FUZZ_PARALLEL of them (default: the cores)
# run at once; every one still gets its whole time.
parallel="${FUZZ_PARALLEL:-$(nproc)}"
declare -A pid_of
failed=()
# report T STATUS: what a finished target found.
report() {
  local t=$1
  if [ "$2" -eq 0 ]; then
    grep -E '^stat::number_of_executed_units' "$work/$t/log" | sed "s/^/fuzz: $t: /" || true
  else
    failed+=("$t")
    echo "fuzz: $t FAILED; last lines of $work/$t/log:" >&2
    grep -v -E '^(#[0-9]+|INFO:|MS:|\s*$)' "$work/$t/log" | tail -25 >&2 || true
    for a in "$work/$t/artifacts"/*; do
      [ -e "$a" ] && echo "fuzz: reproducer: $a (run: build/fuzz/$t $a)" >&2
    done
  fi
}
# finish T: waits for target T and reports it.
finish() {
  local status=0
  wait "${pid_of[$1]}" || status=$?
  report "$1" "$status"
}
queue=("${targets[@]}")
running=()
while [ ${#queue[@]} -gt 0 ] || [ ${#running[@]} -gt 0 ]; do
  while [ ${#queue[@]} -gt 0 ] && [ ${#running[@]} -lt "$parallel" ]; do
    t=${queue[0]}
    queue=("${queue[@]:1}")
    echo "fuzz: $t for ${seconds}s"
    run_target "$t" &
    pid_of[$t]=$!
    running+=("$t")
  done
  # The oldest running target finishes first: each runs for the same time.
  finish "${running[0]}"
  running=("${running[@]:1}")
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: failed: ${failed[*]} (logs and reproducers under $work)" >&2
  exit 1
fi
rm -rf "$work"
echo "fuzz: ${#targets[@]} targets, ${seconds}s each: nothing found"
