#!/usr/bin/env bash
# Checks that the repository stands on its own: no tracked file refers to the team's folder
# `shared` beside the checkout, which a clone does not have, either relatively (the parent
# directory's `shared`, spelled with `..`) or by its absolute path on the development machine.
# What the project needs from there is written in its own docs and scripts instead
# (docs/design.md, docs/rls.md, docs/algorithms.md, bench/anchors/, bench/device/).
#
#   bash scripts/check_standalone.sh [ROOT]      (default: this script's repository)
#
# Looks at every file `git ls-files` lists in ROOT (as it is in the work tree, binary files
# included) and at the targets of tracked symbolic links. Prints every reference as
# `FILE:LINE: TEXT` (a link as `FILE: -> TARGET`) and exits 1 if there is one; exits 0 with a
# one-line summary otherwise, and 2 when ROOT is not a git work tree. The needles below are
# built from pieces, so this file does not match itself.
set -euo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
relative=".."/"shared"
absolute="/work"/"shared"

cd "$root"
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || {
  echo "check_standalone: $root is not a git work tree" >&2
  exit 2
}

files=()
found=0
while IFS= read -r -d '' file; do
  if [[ -L $file ]]; then
    target=$(readlink "$file")
    if [[ $target == *"$relative"* || $target == *"$absolute"* ]]; then
      echo "$file: -> $target"
      found=$((found + 1))
    fi
  elif [[ -f $file ]]; then
    files+=("$file")
  fi
done < <(git ls-files -z)

if ((${#files[@]} > 0)); then
  # Lines are printed as text (binary files too), cut short and with control bytes replaced.
  while IFS= read -r line; do
    printf '%s\n' "${line:0:200}" | LC_ALL=C tr '\000-\010\013-\037\177' '?'
    found=$((found + 1))
  done < <(printf '%s\0' "${files[@]}" |
    xargs -0 grep -n -H -F -a -e "$relative" -e "$absolute" -- || true)
fi

if ((found > 0)); then
  echo "check_standalone: $found reference(s) to a folder outside the repository (above);" \
    "write what is needed into the repository instead" >&2
  exit 1
fi
echo "check_standalone: ${#files[@]} tracked files, no reference outside the repository"
