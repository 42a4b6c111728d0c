#!/usr/bin/env bash
# `make test`: every check the project has, in phases, with a summary of where the time went.
#
#   scripts/test.sh            (JOBS: parallelism, default nproc)
#
# Phases, in order; the first that fails stops the run (the summary still prints):
#   bootstrap  scripts/bootstrap.sh: the Debian packages the build and the tests need
#   lint       scripts/lint.sh: format, locking style, no link outside the repository, clang-tidy
#   build      the release preset (the binary, the libraries, every test and benchmark)
#   ctest      every unit and end-to-end test of the release build; those labelled `light` (the
#              soaks, a simulation: minutes of a fixed-rate load that take a small share of a CPU)
#              run beside the others, all at once, instead of holding one of the $JOBS slots;
#              those labelled `serial` (they time how soon something happens) alone, at the end
#   fuzz       scripts/fuzz.sh run: each libFuzzer target for 20 s, two at a time
#   sanitized  the unit tests of the code that manages memory by hand, from the fuzz build
# The fuzz preset (clang, ASan + UBSan: the fuzz targets and those unit tests) builds in the
# background from the lint phase on, at the lowest CPU priority: it takes the time the phases
# before it leave idle (e2e tests that wait on a server, a link that runs alone) and barely slows
# them; the fuzz phase first waits for whatever of it is left. Its log is build/fuzz-build.log.
# The summary is one line per phase (`make test: PHASE SECONDS ok|FAILED`) and the total.
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

# The fuzz build, in a process group of its own (job control on while it starts) so that a run
# that stops early stops it too. Not a session of its own (setsid): Linux schedules each session
# as a group (autogroup) with an equal share of the CPU, whatever its nice value, and the
# background build then took half of the machine from the lint phase.
fuzz_build_pid=""
fuzz_build_status=build/fuzz-build.status
start_fuzz_build() {
  mkdir -p build
  rm -f "$fuzz_build_status"
  set -m
  bash -c 't0=$SECONDS; nice -n 19 env FUZZ_JOBS="$1" scripts/fuzz.sh build >build/fuzz-build.log 2>&1
    echo "$? $((SECONDS - t0))" >"$2"' _ "$jobs" "$fuzz_build_status" &
  fuzz_build_pid=$!
  set +m
}
light_pid=""
stop_background() {
  [[ -n $fuzz_build_pid ]] && kill -- "-$fuzz_build_pid" 2>/dev/null
  [[ -n $light_pid ]] && kill -- "-$light_pid" 2>/dev/null
  return 0
}
trap stop_background EXIT
# Waits for the background fuzz build; fails with its log's end if it failed.
finish_fuzz_build() {
  wait "$fuzz_build_pid"
  fuzz_build_pid=""
  local status seconds
  read -r status seconds <"$fuzz_build_status" || status=1
  echo "make test: the fuzz build took ${seconds:-?} s in the background (build/fuzz-build.log)"
  if ((status != 0)); then
    tail -30 build/fuzz-build.log
    return "$status"
  fi
}
fuzz() {
  finish_fuzz_build && scripts/fuzz.sh run
}

# Every ctest test: the light ones in a process group of their own in the background (their
# output in build/ctest-light.log, shown when they are done), the others but the serial ones
# $jobs at a time, then the serial ones.
run_ctest() {
  mkdir -p build
  set -m
  ctest --preset release -L light -j 8 >build/ctest-light.log 2>&1 &
  light_pid=$!
  set +m
  ctest --preset release -LE 'light|serial' -j "$jobs"
  local status=$?
  wait "$light_pid"
  local light_status=$?
  light_pid=""
  echo "=== make test: the light tests, run beside the others (build/ctest-light.log)"
  cat build/ctest-light.log
  ctest --preset release -L serial
  local serial_status=$?
  ((status == 0 && light_status == 0 && serial_status == 0))
}

phase bootstrap scripts/bootstrap.sh
start_fuzz_build
phase lint env JOBS="$jobs" scripts/lint.sh
phase build build_release
phase ctest run_ctest
phase fuzz fuzz
# The unit tests of the code that manages memory by hand (the memory store, the HTTP transport:
# server, pooled allocator, upstream client; the Redis wire client), built by fuzz.sh with ASan +
# UBSan (the fuzz preset's backend_memory_test, http_transport_test, redis_test). Twice $jobs at
# once: most of their time is Redis servers and clusters starting (at $jobs, 60 % of the CPU was
# used: 34 s; at twice, 22-23 s), and nothing else runs then.
phase sanitized ctest --test-dir build/fuzz -L unit -j "$((jobs * 2))" --output-on-failure
summary
