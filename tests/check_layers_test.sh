#!/usr/bin/env bash
# Tests scripts/check_layers.sh on copies of the tree with forbidden includes planted:
#
#   bash tests/check_layers_test.sh [REPO_ROOT]        (default: this script's parent directory)
#
#   - the unchanged copy passes (the control);
#   - `#include "http/service.h"` planted in an algo file fails, naming that file and the edge;
#   - a test-only allowance does not extend to the module's other files: `backend/memory/`
#     planted in headers' non-test code fails;
#   - an include of a folder that is no module of the table fails;
#   - nested modules are modules of their own: backend/memory -> http fails as
#     `backend/memory -> http`, the Backend interface may not include its implementation
#     (backend -> backend/memory), nor the HTTP transport its endpoints (http/transport -> http);
#   - the build's links follow the table too: sluice_algo linked to sluice_http in
#     src/algo/CMakeLists.txt fails, and so does headers' library linked to the memory store,
#     which only headers' tests may link;
#   - the unit tests' kit (tests/support/) is for tests only, and its core knows the public types
#     only: algo's library code including it fails, and so does linking sluice_algo to
#     sluice_testing; the kit's core including backend/memory fails; its Redis store calls
#     (tests/support/redis_store/) are for backend/redis's tests only: algo's tests including them
#     fail.
#
# Prints `N passed, M failed`; exits 1 on any failure.

set -uo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
check="$root/scripts/check_layers.sh"
source "$(dirname "$0")/lib.sh"  # pass, fail, finish; $tmp, removed on exit
work=$tmp

# A fresh copy of src/, include/ and the kit (tests/support/) under $work/$1.
copy_tree() {
  mkdir -p "$work/$1/tests"
  cp -r "$root/src" "$root/include" "$work/$1/"
  cp -r "$root/tests/support" "$work/$1/tests/"
}

# Inserts `#include "$3"` into $work/$1/$2 after its first include line.
plant() {
  sed -i "0,/^#include/s||#include \"$3\"\n&|" "$work/$1/$2"
}

# Runs the check on $work/$1; sets `out` and `status`.
run_check() {
  out=$(bash "$check" "$work/$1" 2>&1)
  status=$?
}

# 1. The unchanged tree passes.
copy_tree clean
run_check clean
if [[ $status == 0 ]]; then
  pass "unchanged tree passes"
else
  fail "unchanged tree passes" "exit $status" "$out"
fi

# 2. algo -> http: fails, naming the file and the edge.
file=src/algo/algorithms.cc
copy_tree algo
plant algo "$file" "http/service.h"
run_check algo
if [[ $status == 1 && $out == *"$file:"*"algo -> http (\"http/service.h\") is not allowed"* ]]; then
  pass "algo -> http fails and names $file"
else
  fail "algo -> http fails and names $file" "exit $status" "$out"
fi
if [[ $(grep -c 'is not allowed' <<<"$out") == 1 ]]; then
  pass "only the planted include is reported"
else
  fail "only the planted include is reported" "other lines" "$out"
fi

# 3. A test's allowance (headers' tests may include backend/memory) is not the module's.
file=src/headers/rate_limit_headers.cc
copy_tree headers
plant headers "$file" "backend/memory/memory_store.h"
run_check headers
if [[ $status == 1 && $out == *"$file:"*"headers -> backend/memory"* ]]; then
  pass "headers -> backend/memory fails outside headers' tests"
else
  fail "headers -> backend/memory fails outside headers' tests" "exit $status" "$out"
fi

# 4. A folder that is no module.
file=src/util/json_string.cc
copy_tree unknown
plant unknown "$file" "nowhere/thing.h"
run_check unknown
if [[ $status == 1 && $out == *"$file:"*"'nowhere' is not a module of the table"* ]]; then
  pass "an unknown module fails"
else
  fail "an unknown module fails" "exit $status" "$out"
fi

# 5. Nested modules: each is found by the longest folder of the table, on both ends of an edge.
# expect_edge NAME FILE INCLUDE EDGE: planting INCLUDE into FILE fails, naming FILE and EDGE.
expect_edge() {
  local name=$1 file=$2 include=$3 edge=$4
  copy_tree "$name"
  plant "$name" "$file" "$include"
  run_check "$name"
  if [[ $status == 1 && $out == *"$file:"*"$edge (\"$include\") is not allowed"* &&
    $(grep -c 'is not allowed' <<<"$out") == 1 ]]; then
    pass "$edge fails and names $file"
  else
    fail "$edge fails and names $file" "exit $status" "$out"
  fi
}
expect_edge memory_http src/backend/memory/memory_store.cc "http/service.h" "backend/memory -> http"
expect_edge backend_memory src/backend/failover.cc "backend/memory/memory_store.h" \
  "backend -> backend/memory"
expect_edge transport_http src/http/transport/server.cc "http/check_json.h" \
  "http/transport -> http"
expect_edge redis_store src/redis/client.cc "backend/redis/redis_store.h" "redis -> backend/redis"
# The kit: for tests only; its core on the public types only; its Redis store calls for the tests
# of backend/redis only.
expect_edge kit_in_library src/algo/algorithms.cc "tests/support/limits.h" "algo -> tests/support"
expect_edge kit_core_backend tests/support/temp_dir.cc "backend/memory/memory_store.h" \
  "tests/support -> backend/memory"
expect_edge kit_redis_store src/algo/refund_test.cc "tests/support/redis_store/redis_calls.h" \
  "algo -> tests/support/redis_store"

# 6. Links in the folders' CMakeLists.txt.
# expect_link NAME CMAKELISTS LINE EDGE: appending LINE to CMAKELISTS fails, naming it and EDGE.
expect_link() {
  local name=$1 file=$2 line=$3 edge=$4
  copy_tree "$name"
  echo "$line" >>"$work/$name/$file"
  run_check "$name"
  if [[ $status == 1 && $out == *"$file: $edge is not allowed"* &&
    $(grep -c 'is not allowed' <<<"$out") == 1 ]]; then
    pass "link $edge fails"
  else
    fail "link $edge fails" "exit $status" "$out"
  fi
}
expect_link link_algo src/algo/CMakeLists.txt "target_link_libraries(sluice_algo PUBLIC sluice_http)" \
  "sluice_algo -> http (sluice_http)"
expect_link link_headers src/headers/CMakeLists.txt \
  "target_link_libraries(sluice_headers PRIVATE sluice_backend_memory)" \
  "sluice_headers -> backend/memory (sluice_backend_memory)"
expect_link link_kit src/algo/CMakeLists.txt "target_link_libraries(sluice_algo PUBLIC sluice_testing)" \
  "sluice_algo -> tests/support (sluice_testing)"

finish
