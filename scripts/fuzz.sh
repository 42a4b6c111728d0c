#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang-14, ASan + UBSan) and runs each for a
# bounded time on a copy of its seed corpus (fuzz/corpus/<target>/; the copy grows, the
# repository's corpus does not), with fuzz/<target>.dict as its dictionary. Exits non-zero if any
# target found a crash, leak, timeout or out-of-memory, and says where the reproducer is.
#
#   FUZZ_SECONDS   seconds per target (default 20)
#   FUZZ_TARGETS   targets to run (default: all)
#   FUZZ_JOBS      build parallelism (default 2)
#
# Reproduce a finding: build/fuzz/<target> <reproducer>
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-20}"
read -r -a targets <<<"${FUZZ_TARGETS:-fuzz_check_json fuzz_config fuzz_resp fuzz_http fuzz_http_server fuzz_rls}"

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "${FUZZ_JOBS:-2}"

work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-fuzz.XXXXXX")"
failed=()
for t in "${targets[@]}"; do
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  cp fuzz/corpus/"$t"/* "$work/$t/corpus/"
  echo "fuzz: $t for ${seconds}s"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  # -timeout: one input over 5 s is a hang; -rss_limit_mb also caps a single malloc.
  if build/fuzz/"$t" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 "${dict[@]}" \
      -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" "$work/$t/corpus" \
      >"$work/$t/log" 2>&1; then
    grep -E '^stat::number_of_executed_units' "$work/$t/log" | sed "s/^/fuzz: $t: /" || true
  else
    failed+=("$t")
    echo "fuzz: $t FAILED; last lines of $work/$t/log:" >&2
    grep -v -E '^(#[0-9]+|INFO:|MS:|\s*$)' "$work/$t/log" | tail -25 >&2 || true
    for a in "$work/$t/artifacts"/*; do
      [ -e "$a" ] && echo "fuzz: reproducer: $a (run: build/fuzz/$t $a)" >&2
    done
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: failed: ${failed[*]} (logs and reproducers under $work)" >&2
  exit 1
fi
rm -rf "$work"
echo "fuzz: ${#targets[@]} targets, ${seconds}s each: nothing found"
