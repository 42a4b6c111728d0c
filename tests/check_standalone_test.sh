#!/usr/bin/env bash
# Tests scripts/check_standalone.sh on copies of the repository's tracked files, with references
# to the folder outside it planted:
#
#   bash tests/check_standalone_test.sh [REPO_ROOT]     (default: this script's parent directory)
#
#   - the unchanged copy passes (the control: the tree as it is now stands on its own);
#   - a relative reference (`..` then `/shared/x`) planted in a doc fails, naming that file and
#     line, and only it;
#   - the absolute path planted in a script fails, naming that file;
#   - a tracked symbolic link into the folder fails, naming the link.
#
# Prints `N passed, M failed`; exits 1 on any failure.

set -uo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
check="$root/scripts/check_standalone.sh"
source "$(dirname "$0")/lib.sh"  # pass, fail, finish; $tmp, removed on exit
work=$tmp
# Built from pieces, so that this file is no reference itself.
relative=".."/"shared"
absolute="/work"/"shared"

# One copy of the repository's tracked files (as they are in the work tree) under $work/tree,
# made a git repository of its own with every file committed; each case plants its fault there
# and `fresh` puts the copy back as it was (copying 4,000 files for each case took most of this
# test's time).
tree="$work/tree"
copy_tree() {
  mkdir -p "$tree"
  (cd "$root" && git ls-files -z | while IFS= read -r -d '' f; do
    [[ -e $f || -L $f ]] && printf '%s\0' "$f"
  done | tar --null -T - -cf -) | tar -xf - -C "$tree"
  git -C "$tree" init -q
  git -C "$tree" add -A
  git -C "$tree" -c user.name=test -c user.email=test@localhost commit -q -m copy
}
fresh() {
  git -C "$tree" reset -q --hard HEAD
  git -C "$tree" clean -q -f -d
}

# Runs the check on the copy; sets `out` and `status`.
run_check() {
  out=$(bash "$check" "$tree" 2>&1)
  status=$?
}

if ! git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  fail "setup" "$root is not a git work tree"
  finish
  exit 1
fi

# 1. The unchanged tree passes.
copy_tree
run_check
if [[ $status == 0 ]]; then
  pass "unchanged tree passes"
else
  fail "unchanged tree passes" "exit $status" "$out"
fi

# 2. A relative reference in a doc: fails, naming the file and its line.
file=docs/cli.md
fresh
line=$(($(wc -l <"$tree/$file") + 1))
echo "See $relative/x for more." >>"$tree/$file"
run_check
if [[ $status == 1 && $out == *"$file:$line:"*"$relative/x"* ]]; then
  pass "a relative reference fails and names $file:$line"
else
  fail "a relative reference fails and names $file:$line" "exit $status" "$out"
fi
if [[ $(grep -c "^[^ ]*:[0-9]*:" <<<"$out") == 1 ]]; then
  pass "only the planted reference is reported"
else
  fail "only the planted reference is reported" "other lines" "$out"
fi

# 3. The absolute path in a script: fails, naming the file.
file=bench/compare.sh
fresh
sed -i "2i # kit: $absolute/bench/anchors" "$tree/$file"
run_check
if [[ $status == 1 && $out == *"$file:2:"* ]]; then
  pass "an absolute reference fails and names $file"
else
  fail "an absolute reference fails and names $file" "exit $status" "$out"
fi

# 4. A tracked symbolic link into the folder: fails, naming the link.
fresh
ln -s "$relative/bench/anchors" "$tree/anchors-link"
git -C "$tree" add anchors-link
run_check
if [[ $status == 1 && $out == *"anchors-link: -> $relative/bench/anchors"* ]]; then
  pass "a tracked link into the folder fails and names the link"
else
  fail "a tracked link into the folder fails and names the link" "exit $status" "$out"
fi

finish
