#!/usr/bin/env bash
# Tests that `make lint`'s checks catch what they are for, on planted files:
#
#   bash tests/lint_test.sh [REPO_ROOT]        (default: this script's parent directory)
#
#   - format (scripts/check_format.sh): a copy with clang-format-clean files passes; the same
#     copy with one unformatted line planted fails and names that file;
#   - thread safety (scripts/lint.sh FILE: clang-tidy with clang-14 -Wthread-safety -Werror):
#     a guarded field read with its lock held passes; read without it fails, both on an
#     absl::Mutex and on util::SpinLock; a function that requires a lock called without it fails;
#     a test file (*_test.cc, checked for thread safety alone) reading it without the lock fails;
#   - clang-tidy's own checks: a use after std::move fails (bugprone-use-after-move);
#   - function size (scripts/check_function_size.py): a function over 100 lines fails, unless
#     marked as a dispatch table; so does one whose signature spans lines, a constructor with an
#     initializer list, and a lambda at namespace scope; a string, comment or `#if` holding braces
#     changes nothing.
#
# Needs the lint preset's compilation database (scripts/lint.sh configures it when missing).
# Prints `N passed, M failed`; exits 1 on any failure.

set -uo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
source "$(dirname "$0")/lib.sh"  # pass, fail, finish; $tmp, removed on exit
work=$tmp

# expect NAME pass|fail PATTERN COMMAND...: runs COMMAND; checks its exit status and, when
# PATTERN is not empty, that its output matches PATTERN (grep -E).
expect() {
  local name=$1 want=$2 pattern=$3 out status=0
  shift 3
  out=$("$@" 2>&1) || status=$?
  if [[ $want == pass && $status -ne 0 ]]; then
    fail "$name" "expected success, exit $status" "$out"
  elif [[ $want == fail && $status -eq 0 ]]; then
    fail "$name" "expected a failure, it passed" "$out"
  elif [[ -n $pattern ]] && ! grep -qE -- "$pattern" <<<"$out"; then
    fail "$name" "output does not match /$pattern/" "$out"
  else
    pass "$name"
  fi
}

# --- format -------------------------------------------------------------------------------
fmt="$work/format"
mkdir -p "$fmt/src"
cp "$root/.clang-format" "$fmt/"
cp "$root/src/util/spin_lock.h" "$root/src/types/clock.cc" "$fmt/src/"
expect "format: clean copies pass" pass 'files clang-format clean' \
  bash "$root/scripts/check_format.sh" "$fmt"
# An unformatted line in the middle of a formatted file.
sed -i '0,/^namespace /s//int  planted( ){return 1;}\nnamespace /' "$fmt/src/clock.cc"
expect "format: a planted unformatted line fails, naming the file" fail \
  'src/clock\.cc:[0-9]+:[0-9]+: error: code should be clang-formatted' \
  bash "$root/scripts/check_format.sh" "$fmt"

# --- thread safety and clang-tidy ----------------------------------------------------------
# Each planted file is a translation unit of its own, checked the way `make lint` checks src/.
plant() {
  cat >"$work/$1.cc"
  echo "$work/$1.cc"
}

cat >"$work/prelude.h" <<'EOF'
#pragma once
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "util/spin_lock.h"

namespace planted {

class OnMutex {
 public:
  void Add() {
    absl::MutexLock lock(&mu_);
    AddLocked();
  }
  int Read();

 private:
  void AddLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++n_; }
  absl::Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};

class OnSpinLock {
 public:
  int Read();

 private:
  sluice::util::SpinLock mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace planted
EOF

lint() { bash "$root/scripts/lint.sh" "$@"; }
tsa='requires holding (mutex|spin lock|spinlock)?.*mu_'

f=$(plant locked <<EOF
#include "$work/prelude.h"
namespace planted {
int OnMutex::Read() {
  absl::MutexLock lock(&mu_);
  return n_;
}
int OnSpinLock::Read() {
  sluice::util::SpinLockHolder lock(&mu_);
  return n_;
}
}  // namespace planted
EOF
)
expect "thread safety: guarded fields read under their locks pass" pass '' lint "$f"

f=$(plant mutex_unlocked <<EOF
#include "$work/prelude.h"
namespace planted {
int OnMutex::Read() { return n_; }
}  // namespace planted
EOF
)
expect "thread safety: a field guarded by an absl::Mutex read without it fails" fail \
  "mutex_unlocked\.cc:3:.*$tsa" lint "$f"

f=$(plant spin_unlocked <<EOF
#include "$work/prelude.h"
namespace planted {
int OnSpinLock::Read() { return n_; }
}  // namespace planted
EOF
)
expect "thread safety: a field guarded by a SpinLock read without it fails" fail \
  "spin_unlocked\.cc:3:.*$tsa" lint "$f"

f=$(plant requires_unlocked <<EOF
#include "$work/prelude.h"
namespace planted {
int OnMutex::Read() {
  AddLocked();
  absl::MutexLock lock(&mu_);
  return n_;
}
}  // namespace planted
EOF
)
expect "thread safety: calling a function that requires the lock without it fails" fail \
  "requires_unlocked\.cc:4:.*(calling function 'AddLocked' requires holding)" lint "$f"

# A test gets the thread-safety analysis without clang-tidy's checks: still caught there (the
# unlocked read above, as a test file).
f=$work/unlocked_test.cc
cp "$work/mutex_unlocked.cc" "$f"
expect "thread safety: in a test (*_test.cc), a guarded field read without its lock fails" fail \
  "unlocked_test\.cc:3:.*$tsa" lint "$f"

# The full run checks a library's sources as one unit of #includes (scripts/lint.sh --together):
# a finding in one of them is still reported at its file and line, and fails the run. (Copies
# under src/, where .clang-tidy's HeaderFilterRegex shows findings of included files.)
mkdir -p "$work/src"
# The locked plant's two halves (its OnMutex read, its OnSpinLock read), and the unlocked one.
sed '/^int OnSpinLock::Read/,/^}$/d' "$work/locked.cc" >"$work/src/together_mutex.cc"
sed '/^int OnMutex::Read/,/^}$/d' "$work/locked.cc" >"$work/src/together_spin_locked.cc"
cp "$work/spin_unlocked.cc" "$work/src/together_spin_unlocked.cc"
expect "thread safety: files checked together, each read under its lock, pass" pass '' \
  lint --together "$work/src/together_mutex.cc" "$work/src/together_spin_locked.cc"
expect "thread safety: checked together with a clean file, an unlocked read fails, named" fail \
  "together_spin_unlocked\.cc:3:.*$tsa" lint --together "$work/src/together_mutex.cc" \
  "$work/src/together_spin_unlocked.cc"

f=$(plant use_after_move <<'EOF'
#include <string>
#include <utility>
namespace planted {
std::string Twice(std::string s) {
  std::string kept = std::move(s);
  return kept + s;
}
}  // namespace planted
EOF
)
expect "clang-tidy: a use after std::move fails (bugprone-use-after-move)" fail \
  'use_after_move\.cc:6:.*bugprone-use-after-move' lint "$f"

# 103 lines from the name to the closing brace.
long_body=$(for i in $(seq 1 100); do echo "  n += $i;"; done)
f=$(plant long_function <<EOF
namespace planted {
int Long(int n) {
$long_body
  return n;
}
}  // namespace planted
EOF
)
expect "function size: a function over 100 lines fails" fail \
  'long_function\.cc:2:.*readability-function-size' lint "$f"

f=$(plant long_dispatch_table <<EOF
namespace planted {
int Dispatch(int n) {  // NOLINT(readability-function-size): a dispatch table
$long_body
  return n;
}
}  // namespace planted
EOF
)
expect "function size: a long function marked as a dispatch table passes" pass '' lint "$f"

# 100 lines between the braces passes (clang-tidy's count: closing line minus opening line).
short_body=$(for i in $(seq 1 98); do echo "  n += $i;"; done)
f=$(plant exactly_100 <<EOF
namespace planted {
int Exactly(int n) {
$short_body
  return n;
}
}  // namespace planted
EOF
)
expect "function size: a body of exactly 100 lines passes" pass '' lint "$f"

# Braces in strings, comments, character literals and preprocessor lines, a signature over two
# lines, a constructor's initializer list with a braced member, a lambda at namespace scope.
f=$(plant long_shapes <<EOF
#include <string>
#if defined(__has_feature)  // {
#endif
namespace planted {
struct Counter {
  explicit Counter(int start);
  int n;
  std::string s;
};
Counter::Counter(int start)
    : n(start), s{"{"} {
$long_body
  s += '}';  // }
}
const auto kLambda = [](int n) {
$long_body
  return n;
};
int Wrapped(int n,
            int m) {
  const char* brace = "}}}";  /* { */
$long_body
  return n + m + brace[0];
}
}  // namespace planted
EOF
)
expect "function size: a constructor with an initializer list fails" fail \
  'long_shapes\.cc:11:.*readability-function-size' lint "$f"
expect "function size: a lambda at namespace scope fails" fail \
  'long_shapes\.cc:114:.*readability-function-size' lint "$f"
expect "function size: a signature over two lines fails, named at its first line" fail \
  'long_shapes\.cc:217:.*readability-function-size' lint "$f"

finish
