#!/usr/bin/env bash
# The README's quick start stays true: its commands, run in order against `sluice serve` with no
# config (what `make run` starts), print what the README says they print.
# Usage: SLUICE=path/to/sluice tests/readme_quickstart_e2e.sh [README.md]
#
# The quick start is the fenced block between `<!-- quickstart -->` and `<!-- /quickstart -->`.
# In it, a line `# → TEXT` is an expectation of the command before it: its output (stdout, CRs
# removed) contains TEXT, where `…` stands for anything (the pieces between must come in order).
# Other `#` lines are comments; a command line ending in `\` goes on on the next line. The
# commands use make run's ports, 127.0.0.1:8080 (data plane) and 127.0.0.1:9091 (admin), which
# are rewritten to the ports of the server started here.
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}
readme=${1:-$(dirname "$0")/../README.md}
[[ -r $readme ]] || { echo "cannot read $readme"; echo "0 passed, 1 failed"; exit 1; }
source "$(dirname "$0")/lib.sh"
need_tools curl

# Parse the block into commands[i] and expects[i] (expectations separated by newlines).
commands=() expects=()
in_block=0 pending=""
while IFS= read -r line; do
  case $line in
    '<!-- quickstart -->') in_block=1; continue ;;
    '<!-- /quickstart -->') in_block=0; continue ;;
  esac
  ((in_block)) || continue
  [[ $line == '```'* ]] && continue
  if [[ -n $pending ]]; then  # continuation of a command
    pending+=$'\n'"$line"
    [[ $line == *\\ ]] && continue
    commands+=("$pending"); expects+=(""); pending=""
    continue
  fi
  if [[ $line == '# → '* ]]; then
    n=${#commands[@]}
    if ((n == 0)); then
      check "an expectation follows a command" "a command" "[$line] first"; continue
    fi
    expects[n - 1]+="${line#'# → '}"$'\n'
  elif [[ $line == '#'* || -z ${line// /} ]]; then
    continue
  elif [[ $line == *\\ ]]; then
    pending=$line
  else
    commands+=("$line"); expects+=("")
  fi
done <"$readme"

if ((${#commands[@]} < 5)); then
  check "README has a quick-start block of at least 5 commands" "at least 5" "${#commands[@]}"
  finish; exit
fi
echo "README quick start: ${#commands[@]} commands"

start quickstart
check "sluice serve started on the embedded default" 1 \
  "$(grep -q '^sluice: config <embedded default>' "$tmp/quickstart.out" && echo 1)"
[[ -n $DATA && -n $ADMIN ]] || { cat "$tmp/quickstart.err"; finish; exit; }

for i in "${!commands[@]}"; do
  cmd=${commands[i]}
  name="quick start $((i + 1)): $(head -1 <<<"$cmd" | cut -c1-70)"
  if [[ $cmd != *127.0.0.1:8080* && $cmd != *127.0.0.1:9091* ]]; then
    check "$name: uses 127.0.0.1:8080 or 127.0.0.1:9091" yes no
    continue
  fi
  if [[ -z ${expects[i]} ]]; then
    check "$name: has a '# →' expectation in README" yes no
    continue
  fi
  cmd=${cmd//127.0.0.1:8080/$DATA}
  cmd=${cmd//127.0.0.1:9091/$ADMIN}
  out=$(bash -c "$cmd" 2>&1 | tr -d '\r')
  while IFS= read -r want; do
    [[ -n $want ]] || continue
    if contains_in_order "$out" "$want"; then
      passed=$((passed + 1)); echo "ok   $name → $want"
    else
      failed=$((failed + 1)); echo "FAIL $name: expected [$want] in:"; sed 's/^/       /' <<<"$out"
    fi
  done <<<"${expects[i]}"
done

stop
check "SIGTERM: exit 0" 0 "$STATUS"
finish
