#!/usr/bin/env bash
# Checks that every C++ file (*.h, *.cc) is formatted as clang-format-14 with the root
# .clang-format would format it:
#
#   bash scripts/check_format.sh [ROOT]      (default: this script's repository)
#
# In a git checkout the files are the tracked ones (`git ls-files`); in a plain directory (the
# test's copies) every *.h and *.cc under ROOT. Prints the first place clang-format would change
# in each offender and exits 1 if there is one; exits 0 with a one-line summary otherwise.
# To fix: clang-format-14 -i FILE.
set -euo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
format=${CLANG_FORMAT:-clang-format-14}
command -v "$format" >/dev/null || {
  echo "check_format: $format is missing" >&2
  exit 2
}
cd "$root"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=()
  while IFS= read -r f; do
    [[ -f $f ]] && files+=("$f") # not one deleted in the work tree but still in the index
  done < <(git ls-files -- '*.h' '*.cc')
else
  mapfile -t files < <(find . -type f \( -name '*.h' -o -name '*.cc' \) -printf '%P\n' | sort)
fi
if ((${#files[@]} == 0)); then
  echo "check_format: no C++ files under $root" >&2
  exit 2
fi

# One clang-format process for all files: --dry-run reports each file's first difference as
# `FILE:LINE:COL: error: code should be clang-formatted` (with the line and a caret).
report=$("$format" --style=file --dry-run --Werror --ferror-limit=1 "${files[@]}" 2>&1) || true
if [[ -n $report ]]; then
  printf '%s\n' "$report"
  offenders=$(printf '%s\n' "$report" | grep -c 'code should be clang-formatted' || true)
  echo "check_format: $offenders of ${#files[@]} files need $format -i" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files clang-format clean"
