#!/usr/bin/env bash
# Golden end-to-end tests of `sluice replay`: runs the real binary on every case in a directory
# and compares stdout, stderr and the exit status with hand-derived expectations.
#
#   SLUICE=build/release/sluice bash tests/replay_golden.sh tests/replay
#
# A case NAME is the file NAME.trace plus:
#   arguments    the trace's first line `# args: --algorithm ... --window ...` (it is an ordinary
#                comment for sluice, so it counts as line 1), or a sibling NAME.args file (one
#                line) which then takes precedence. Arguments are split on white space; the word
#                {trace} is replaced by the trace's path, and then stdin is empty (--input FILE).
#                Otherwise the trace is fed on stdin.
#   NAME.expected  expected stdout, byte for byte (tab-separated fields; may be empty). Required.
#   NAME.status    expected exit status (default 0).
#   NAME.stderr    expected stderr, byte for byte. Without it: stderr must be empty when the
#                  expected status is 0, and non-empty otherwise.
# Expectations are derived by hand from the specification (issue 3 and the worked examples of
# docs/algorithms.md), never captured from the binary; each trace explains its numbers.
#
# Prints a unified diff for every mismatch, then `N passed, M failed`; exits 1 on any failure.

set -uo pipefail

dir=${1:?usage: SLUICE=path/to/sluice $0 CASE_DIR}
sluice=${SLUICE:?set SLUICE to the sluice binary}
if [[ ! -x $sluice ]]; then
  echo "replay_golden: $sluice is not an executable" >&2
  exit 1
fi
if [[ ! -d $dir ]]; then
  echo "replay_golden: $dir is not a directory" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
failed_names=()

# Shows how `actual` differs from `expected` under the label `what`.
show_diff() {
  local what=$1 expected=$2 actual=$3
  echo "  --- $what: expected vs actual"
  diff -u --label expected --label actual "$expected" "$actual" | sed 's/^/  /'
  if diff -q <(tr '\t\r' '  ' <"$expected") <(tr '\t\r' '  ' <"$actual") >/dev/null; then
    echo "  (the difference is only in tabs, spaces or carriage returns)"
  fi
}

shopt -s nullglob
traces=("$dir"/*.trace)
if ((${#traces[@]} == 0)); then
  echo "replay_golden: no *.trace cases in $dir" >&2
  exit 1
fi

for trace in "${traces[@]}"; do
  name=$(basename "$trace" .trace)
  base=$dir/$name

  # The arguments: NAME.args, else the `# args:` first line of the trace.
  if [[ -f $base.args ]]; then
    args_line=$(head -n 1 "$base.args")
  else
    args_line=$(head -n 1 "$trace")
    if [[ $args_line != "# args:"* ]]; then
      echo "FAIL $name: no $name.args and the first line is not '# args: ...'"
      failed=$((failed + 1))
      failed_names+=("$name")
      continue
    fi
    args_line=${args_line#"# args:"}
  fi
  args_line=${args_line//$'\r'/}
  read -r -a args <<<"$args_line"
  stdin=$trace
  for i in "${!args[@]}"; do
    if [[ ${args[$i]} == "{trace}" ]]; then
      args[i]=$trace
      stdin=/dev/null
    fi
  done

  if [[ ! -f $base.expected ]]; then
    echo "FAIL $name: missing $name.expected"
    failed=$((failed + 1))
    failed_names+=("$name")
    continue
  fi
  expected_status=0
  if [[ -f $base.status ]]; then
    expected_status=$(tr -d ' \t\r\n' <"$base.status")
  fi

  out=$work/$name.out
  err=$work/$name.err
  "$sluice" replay "${args[@]}" <"$stdin" >"$out" 2>"$err"
  status=$?

  ok=1
  report=()
  if [[ $status != "$expected_status" ]]; then
    ok=0
    report+=("  exit status: expected $expected_status, got $status")
  fi
  if ! cmp -s "$base.expected" "$out"; then
    ok=0
    report+=("$(show_diff stdout "$base.expected" "$out")")
  fi
  if [[ -f $base.stderr ]]; then
    if ! cmp -s "$base.stderr" "$err"; then
      ok=0
      report+=("$(show_diff stderr "$base.stderr" "$err")")
    fi
  elif [[ $expected_status == 0 && -s $err ]]; then
    ok=0
    report+=("  stderr: expected nothing, got:" "$(sed 's/^/  | /' "$err")")
  elif [[ $expected_status != 0 && ! -s $err ]]; then
    ok=0
    report+=("  stderr: expected a message, got nothing")
  fi

  if ((ok)); then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    failed_names+=("$name")
    echo "FAIL $name: sluice replay ${args[*]}$([[ $stdin != /dev/null ]] && echo " < $trace")"
    printf '%s\n' "${report[@]}"
  fi
done

if ((failed > 0)); then
  echo "failed: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed"
((failed == 0))
