#!/usr/bin/env bash
# `make test`: every check the project has, in phases, with a summary of where the time went.
#
#   scripts/test.sh            (JOBS: parallelism, default nproc)
#
# Phases, in order; the first that fails stops the run (the summary still prints):
#   bootstrap  scripts/bootstrap.sh: the Debian packages the build and the tests need
#   lint       scripts/lint.sh: format, locking style, no link outside the repository, clang-tidy
#   build      the release preset (the binary, the libraries, every test and benchmark)
#   ctest      every unit and end-to-end test of the release build
#   fuzz       scripts/fuzz.sh: the fuzz preset (clang, ASan + UBSan) and each target for 20 s
#   sanitized  the unit tests of the code that manages memory by hand, from the fuzz build
# The summary is one line per phase (`test: PHASE SECONDS ok|FAILED`) and the total.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

jobs=${JOBS:-$(nproc)}
names=()
times=()
results=()
start=$SECONDS

summary() {
  echo
  echo "make test: where the time went"
  local i
  for i in "${!names[@]}"; do
    printf 'make test: %-10s %5d s  %s\n' "${names[$i]}" "${times[$i]}" "${results[$i]}"
  done
  printf 'make test: %-10s %5d s\n' total "$((SECONDS - start))"
}

# phase NAME COMMAND...: runs the command, records its time and result; stops the run on failure.
phase() {
  local name=$1 t0=$SECONDS
  shift
  echo "=== make test: $name"
  "$@"
  local status=$?
  names+=("$name")
  times+=("$((SECONDS - t0))")
  if ((status == 0)); then
    results+=(ok)
  else
    results+=("FAILED (exit $status)")
    summary
    exit "$status"
  fi
}

build_release() {
  cmake --preset release && cmake --build --preset release -j "$jobs"
}

phase bootstrap scripts/bootstrap.sh
phase lint env JOBS="$jobs" scripts/lint.sh
phase build build_release
phase ctest ctest --preset release -j "$jobs"
phase fuzz env FUZZ_JOBS="$jobs" scripts/fuzz.sh
# The unit tests of the code that manages memory by hand (store, HTTP server and upstream client,
# pooled allocator, Redis connection and client), built by fuzz.sh with ASan + UBSan.
phase sanitized ctest --test-dir build/fuzz -L unit -j "$jobs" --output-on-failure
summary
