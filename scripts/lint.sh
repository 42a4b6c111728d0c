#!/usr/bin/env bash
# sluice's static checks (`make lint`; `make test` runs them first):
#
#   bash scripts/lint.sh [FILE.cc...]       (default: every translation unit under src/)
#   bash scripts/lint.sh --together FILE.cc...   (the files as one unit, as below)
#
#   1. format: every tracked *.h/*.cc is clang-format-14 clean (scripts/check_format.sh);
#   2. locks: one locking style, the annotated one: no std::mutex, std::lock_guard,
#      std::unique_lock, std::scoped_lock, std::condition_variable or `// guarded by` comment in
#      src/ (absl::Mutex / util::SpinLock with ABSL_GUARDED_BY instead), so that step 4 checks
#      every lock;
#   3. standalone: no tracked file refers to a folder outside the repository
#      (scripts/check_standalone.sh);
#   4. clang-tidy-14 over src/ (the product's translation units, and the tests that take a lock)
#      on the `lint` preset's compilation database: clang-14 with -Wthread-safety -Werror (the
#      analysis runs in the front end, so no object code is made), and over the product the
#      checks the root .clang-tidy lists; a test (*_test.cc) gets the thread-safety analysis, what
#      it is here for, and no check (each walks every header the source includes); any finding
#      fails. The sources of one library (or test binary) are checked together, as one unit of
#      #includes: clang-tidy then parses and walks the headers they share once, not once each
#      (Asio, Beast and gRPC are most of each parse): 570 -> under 200 CPU-s on this 2-core VM;
#   5. function size: no function body over 100 lines in the files of step 4 and the headers of
#      src/ and include/sluice/ (scripts/check_function_size.py; a dispatch table is marked
#      NOLINT(readability-function-size) with the reason);
#   6. shell: shellcheck -x -S warning over every tracked *.sh (sourced files followed, the root
#      .shellcheckrc's settings), eight files at a time, $JOBS at once;
#   7. js: `node --check` (syntax) on every tracked *.js.
#
# Given files, runs steps 4 and 5 on those only (a file outside the database gets the flags of its
# nearest neighbour in it: tests/lint_test.sh plants files that way). Generated protobuf code and
# headers outside src/ and include/sluice/ are not checked. Env: JOBS (nproc), BUILD (build/lint).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${JOBS:-$(nproc)}
build=${BUILD:-$root/build/lint}
tidy=${CLANG_TIDY:-clang-tidy-14}
command -v "$tidy" >/dev/null || {
  echo "lint: $tidy is missing" >&2
  exit 2
}

# The lint preset: clang-14, compile_commands.json, and the generated protobuf headers that
# src/rls includes (nothing else is built).
prepare() {
  # (Configured again where an older checkout configured it with its test binaries as unity
  # builds, which list no test source in the database.)
  if [[ ! -f $build/build.ninja ]] ||
    ! grep -q '^SLUICE_UNITY_TESTS:BOOL=OFF' "$build/CMakeCache.txt"; then
    (cd "$root" && cmake --preset lint -B "$build" >/dev/null)
  fi
  cmake --build "$build" --target sluice_generated >/dev/null
}

# Runs clang-tidy on the files given, $jobs at a time; prints the findings, fails on any. A test
# (*_test.cc) gets the compiler's diagnostics alone (-Wthread-safety): clang-tidy runs nothing
# without a check, so it gets modernize-use-override, the cheapest of .clang-tidy's.
tidy_files() {
  local files=() tests=()
  for f in "$@"; do
    if [[ $f == *_test.cc ]]; then tests+=("$f"); else files+=("$f"); fi
  done
  local status=0
  ((${#files[@]} == 0)) || run_tidy "${files[@]}" || status=1
  ((${#tests[@]} == 0)) || run_tidy --checks='-*,modernize-use-override' "${tests[@]}" || status=1
  return "$status"
}

# run_tidy [--checks=...] FILE...: clang-tidy with the root .clang-tidy (and the checks given).
run_tidy() {
  local checks=()
  [[ $1 == --checks=* ]] && checks=("$1") && shift
  # clang-tidy's "N warnings generated." counts warnings in headers it does not show.
  local status
  set +e
  printf '%s\0' "$@" | xargs -0 -n 1 -P "$jobs" \
    "$tidy" -p "${BUILD_DB:-$build}" --config-file="$root/.clang-tidy" "${checks[@]}" --quiet \
    --warnings-as-errors='*' 2>&1 |
    grep --line-buffered -v -E '^[0-9]+ (warnings?|errors?)( and [0-9]+ (warnings?|errors?))? generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter|^$'
  status=${PIPESTATUS[1]}
  set -e
  return "$status"
}

# Step 5 on the files given.
function_size() {
  python3 "$root/scripts/check_function_size.py" "$@"
}

# The group files (one of #includes each) that scripts/tidy_groups.py listed in database DIR.
groups_in() {
  python3 -c 'import json, sys
for e in json.load(open(sys.argv[1])): print(e["file"])' "$1/compile_commands.json"
}

# Given files: steps 4 and 5 on those only. With --together, step 4 takes them as one translation
# unit (a file of #includes under $build/together/), the way the full run checks a library's
# sources (tests/lint_test.sh).
if (($# > 0)); then
  prepare
  db=$build
  if [[ $1 == --together ]]; then
    shift
    db=$build/together
    python3 "$root/scripts/tidy_groups.py" "$build/compile_commands.json" "$root/src/" "$db" \
      --together "$@"
    mapfile -t targets < <(groups_in "$db")
  else
    targets=("$@")
  fi
  status=0
  BUILD_DB=$db tidy_files "${targets[@]}" || status=1
  function_size "$@" || status=1
  exit "$status"
fi

start=$SECONDS
failed=()

echo "lint: format"
bash "$root/scripts/check_format.sh" "$root" || failed+=(format)

echo "lint: locks"
if grep -rnE 'std::(mutex|timed_mutex|recursive_mutex|shared_mutex|lock_guard|unique_lock|scoped_lock|condition_variable)\b|//.*guarded by' \
  "$root/src" --include='*.h' --include='*.cc'; then
  echo "lint: use absl::Mutex (or util::SpinLock) with ABSL_GUARDED_BY instead of the above" >&2
  failed+=(locks)
fi

echo "lint: standalone"
bash "$root/scripts/check_standalone.sh" "$root" || failed+=(standalone)

echo "lint: clang-tidy and -Wthread-safety (clang-14) over src/, $jobs at a time"
prepare
# The units to check (printed), and the same grouped by the library or test binary they belong
# to: one file of #includes per group, under $build/unity/, in a database of its own there.
# clang-tidy then parses the headers a library's sources share (Asio, Beast, gRPC) once for all
# of them, as the build's unity test binaries do; its findings still name the source and line.
mapfile -t units < <(python3 "$root/scripts/tidy_groups.py" "$build/compile_commands.json" \
  "$root/src/" "$build/unity")
mapfile -t groups < <(groups_in "$build/unity")
echo "lint: ${#units[@]} translation units, as ${#groups[@]} groups ($build/unity/)"
BUILD_DB=$build/unity tidy_files "${groups[@]}" || failed+=(clang-tidy)

echo "lint: function size"
mapfile -t headers < <(git -C "$root" ls-files 'src/*.h' 'include/sluice/*.h' | sed "s|^|$root/|")
function_size "${units[@]}" "${headers[@]}" || failed+=(function-size)

echo "lint: shell"
mapfile -t shell_files < <(git -C "$root" ls-files '*.sh')
if ! command -v shellcheck >/dev/null; then
  echo "lint: shellcheck is missing (scripts/bootstrap.sh installs it)" >&2
  failed+=(shell)
elif ! (cd "$root" && printf '%s\0' "${shell_files[@]}" |
  xargs -0 -n 8 -P "$jobs" shellcheck -x -S warning); then
  failed+=(shell)
fi

echo "lint: js"
mapfile -t js_files < <(git -C "$root" ls-files '*.js')
if ! command -v node >/dev/null; then
  echo "lint: node is missing (scripts/bootstrap.sh installs it)" >&2
  failed+=(js)
else
  js_ok=1
  for f in "${js_files[@]}"; do node --check "$root/$f" || js_ok=0; done
  ((js_ok)) || failed+=(js)
fi

if ((${#failed[@]} > 0)); then
  echo "lint: FAILED (${failed[*]}) in $((SECONDS - start)) s" >&2
  exit 1
fi
echo "lint: clean (${#units[@]} translation units) in $((SECONDS - start)) s"
