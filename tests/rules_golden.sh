#!/usr/bin/env bash
# Golden end-to-end tests of the rules commands (`sluice check-config`, `sluice replay --config`,
# `sluice explain`): runs the real binary on every case and compares with hand-derived
# expectations.
#
#   SLUICE=build/release/sluice bash tests/rules_golden.sh tests/rules
#
# The binary runs inside the case directory's parent (tests/rules), so the file names it prints
# are relative and stable (`bad/units.yaml:4:24: ...`). Fixtures there:
#   examples/  example domains A-D (edge, api, files, checkout) in envoyproxy/ratelimit's format,
#              unchanged, plus a non-YAML file, a dot file and a dot directory (all ignored)
#   sluice/    sluice's extensions: several limits, plans with a clients CSV, count_denied, and a
#              settings file
#   settings/  a settings file named directly, whose `rules:` names ../examples
#   bad/       one file per family of errors; dup/ two files with the same domain
#
# A case NAME is cases/NAME.args plus:
#   NAME.args      one line: the arguments after `sluice`, split on white space (no quoting)
#   NAME.trace     fed on stdin (default: nothing)
#   NAME.expected  expected stdout, byte for byte, or
#   NAME.contains  lines that must each appear as a whole line of stdout (one of the two is required)
#   NAME.status    expected exit status (default 0)
#   NAME.stderr    expected stderr, byte for byte (default: empty)
# Each trace explains how its numbers were derived; none was captured from the binary.
#
# Prints a diff for every mismatch, then `N passed, M failed`; exits 1 on any failure.

set -uo pipefail

dir=${1:?usage: SLUICE=path/to/sluice $0 CASE_DIR}
sluice=${SLUICE:?set SLUICE to the sluice binary}
if [[ $sluice == */* ]]; then
  sluice=$(cd "$(dirname "$sluice")" && pwd)/$(basename "$sluice")
fi
if [[ ! -x $sluice ]]; then
  echo "rules_golden: $sluice is not an executable" >&2
  exit 1
fi
if [[ ! -d $dir/cases ]]; then
  echo "rules_golden: $dir/cases is not a directory" >&2
  exit 1
fi
cd "$dir" || exit 1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
failed_names=()

show_diff() {
  local what=$1 expected=$2 actual=$3
  echo "  --- $what: expected vs actual"
  diff -u --label expected --label actual "$expected" "$actual" | sed 's/^/  /'
}

shopt -s nullglob
cases=(cases/*.args)
if ((${#cases[@]} == 0)); then
  echo "rules_golden: no cases/*.args in $dir" >&2
  exit 1
fi

for args_file in "${cases[@]}"; do
  name=$(basename "$args_file" .args)
  base=cases/$name
  args_line=$(head -n 1 "$args_file")
  read -r -a args <<<"$args_line"
  stdin=/dev/null
  [[ -f $base.trace ]] && stdin=$base.trace

  if [[ ! -f $base.expected && ! -f $base.contains ]]; then
    echo "FAIL $name: missing $name.expected or $name.contains"
    failed=$((failed + 1))
    failed_names+=("$name")
    continue
  fi
  expected_status=0
  [[ -f $base.status ]] && expected_status=$(tr -d ' \t\r\n' <"$base.status")

  out=$work/$name.out
  err=$work/$name.err
  "$sluice" "${args[@]}" <"$stdin" >"$out" 2>"$err"
  status=$?

  ok=1
  report=()
  if [[ $status != "$expected_status" ]]; then
    ok=0
    report+=("  exit status: expected $expected_status, got $status")
  fi
  if [[ -f $base.expected ]] && ! cmp -s "$base.expected" "$out"; then
    ok=0
    report+=("$(show_diff stdout "$base.expected" "$out")")
  fi
  if [[ -f $base.contains ]]; then
    while IFS= read -r line || [[ -n $line ]]; do
      [[ -z $line ]] && continue
      if ! grep -qxF -- "$line" "$out"; then
        ok=0
        report+=("  stdout lacks the line: $line")
      fi
    done <"$base.contains"
    if ((!ok)); then
      report+=("  stdout was:" "$(sed 's/^/  | /' "$out")")
    fi
  fi
  if [[ -f $base.stderr ]]; then
    if ! cmp -s "$base.stderr" "$err"; then
      ok=0
      report+=("$(show_diff stderr "$base.stderr" "$err")")
    fi
  elif [[ -s $err ]]; then
    ok=0
    report+=("  stderr: expected nothing, got:" "$(sed 's/^/  | /' "$err")")
  fi

  if ((ok)); then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    failed_names+=("$name")
    echo "FAIL $name: (cd $dir && sluice ${args[*]}$([[ $stdin != /dev/null ]] && echo " < $stdin"))"
    printf '%s\n' "${report[@]}"
  fi
done

if ((failed > 0)); then
  echo "failed: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed"
((failed == 0))
