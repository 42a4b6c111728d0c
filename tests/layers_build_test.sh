#!/usr/bin/env bash
# Tests that the build enforces the layering too, not only scripts/check_layers.sh: every src/
# folder builds one library linked only to the libraries its row of the table allows, so a call
# into a forbidden module fails to link even when no forbidden #include names it (a hand-written
# declaration, or a header-only include that compiles). Static libraries never fail to link, so
# the copy is configured with SLUICE_LINK_CHECK (cmake/SluiceModule.cmake): each module library
# shared, linked with -Wl,--no-undefined. Only the libraries at stake are built, at -O0.
#
#   bash tests/layers_build_test.sh [REPO_ROOT]        (default: this script's parent directory)
#
#   - the unchanged algo and backend libraries link (the control);
#   - algo calling into http (sluice::http::RenderError, declared by hand) fails to link, naming
#     the symbol;
#   - backend, the interface, calling into its implementation backend/memory
#     (sluice::store::NewFrontId) fails to link: a nested module is a library of its own.
#
# Prints `N passed, M failed`; exits 1 on any failure.

set -uo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
source "$(dirname "$0")/lib.sh"  # pass, fail, finish; $tmp, removed on exit
work=$tmp

# The tree without its build directories and history.
tree=$work/tree
mkdir -p "$tree"
tar -C "$root" --exclude=./build --exclude=./.git -cf - . | tar -C "$tree" -xf -
build=$work/build
if ! out=$(cmake -S "$tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DSLUICE_LINK_CHECK=ON 2>&1); then
  fail "configure with SLUICE_LINK_CHECK" "cmake failed" "$out"
  finish
  exit 1
fi

# build TARGET: builds it in the copy; sets `out` and `status`.
build() {
  out=$(cmake --build "$build" --target "$1" -j "${JOBS:-2}" 2>&1)
  status=$?
}

# 1. The unchanged libraries link.
for target in sluice_algo sluice_backend; do
  build "$target"
  if [[ $status == 0 ]]; then
    pass "$target links unchanged"
  else
    fail "$target links unchanged" "exit $status" "$out"
  fi
done

# plant_call FILE DECLARATION CALL: appends to FILE a function of its own that calls CALL, which
# DECLARATION declares by hand (no include for check_layers.sh to see).
plant_call() {
  cat >>"$tree/$1" <<PLANTED

$2
namespace sluice {
void PlantedForbiddenCall() { (void)$3; }
}  // namespace sluice
PLANTED
}

# expect_link_failure NAME TARGET SYMBOL: building TARGET fails to link, naming SYMBOL.
expect_link_failure() {
  build "$2"
  if [[ $status != 0 && $out == *"undefined reference to \`$3"* ]]; then
    pass "$1 fails to link"
  else
    fail "$1 fails to link" "exit $status" "$out"
  fi
}

# 2. algo -> http.
plant_call src/algo/algorithms.cc \
  'namespace sluice::http { std::string RenderError(std::string_view message); }' \
  'http::RenderError("planted")'
expect_link_failure "algo -> http" sluice_algo "sluice::http::RenderError"

# 3. backend (the interface) -> backend/memory (an implementation).
plant_call src/backend/failover.cc 'namespace sluice::store { uint64_t NewFrontId(); }' \
  'store::NewFrontId()'
expect_link_failure "backend -> backend/memory" sluice_backend "sluice::store::NewFrontId"

finish
