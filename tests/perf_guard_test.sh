#!/usr/bin/env bash
# The cost guard (tests/perf_guard.sh) catches a slowdown: a planted one must fail it.
#
#   SLUICE=build/release/sluice bash tests/perf_guard_test.sh
#
# The slowdown is planted in the budget, not in the code: the same binary is measured on the
# guard's cheapest scenario (store_decide, instructions per store decision) against a budget
# equal to what a first run measured (must pass: the count repeats within the tolerance), and
# against a budget 10 % lower than that (must fail, naming the scenario as OVER): exactly what
# the guard sees when a change makes that path 11 % dearer than its budget. So the guard's whole
# path, from measurement to verdict, is shown both ways without building a slower sluice. A
# scenario with no budget must fail too.
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"
need_tools valgrind callgrind_control python3
scenario=store_decide

# guard BUDGET_FILE NAME: runs the guard on $scenario against BUDGET_FILE, output in $tmp/NAME.out
# (and shown), its measurement in $tmp/NAME.measured; sets RC to its exit status.
guard() {
  SLUICE=$sluice SCENARIOS=$scenario BUDGET=$1 MEASURED_OUT="$tmp/$2.measured" \
    bash "$here/perf_guard.sh" >"$tmp/$2.out" 2>&1
  RC=$?
  sed 's/^/  | /' "$tmp/$2.out"
}
budget() {  # budget FILE INSTRUCTIONS REASON: a budget file for $scenario
  printf 'scenario\tinstructions_per_request\treason\n%s\t%s\t%s\n' "$scenario" "$2" "$3" >"$1"
}

# 1. A first measurement (against the repository's budget: its verdict does not matter here).
guard "$here/../bench/perf_budget.tsv" first
measured=$(awk -v s=$scenario '$1 == s {print $2}' "$tmp/first.measured" 2>/dev/null)
check "the guard measured $scenario" yes "$([[ $measured =~ ^[1-9][0-9]*$ ]] && echo yes)"
[[ $measured =~ ^[1-9][0-9]*$ ]] || { finish; exit 1; }

# 2. A budget equal to that measurement: within budget.
budget "$tmp/same.tsv" "$measured" "what the first run measured"
guard "$tmp/same.tsv" same
check "a budget equal to the measurement passes" 0 "$RC"

# 3. The planted slowdown: a budget 10 % below the measurement, as if the code had become 11 %
#    dearer than its budget. The guard must fail and say which scenario is over.
budget "$tmp/planted.tsv" $((measured * 90 / 100)) "planted: 10 % below the measurement"
guard "$tmp/planted.tsv" planted
check "a budget 10 % below the measurement fails the guard (exit 1)" 1 "$RC"
check "the guard names $scenario as over its budget" yes \
  "$(grep -qE "^$scenario .*OVER" "$tmp/planted.out" && echo yes)"

# 4. A scenario without a budget fails it too: a new scenario comes with its budget.
printf 'scenario\tinstructions_per_request\treason\n' >"$tmp/none.tsv"
guard "$tmp/none.tsv" none
check "a scenario without a budget fails the guard (exit 1)" 1 "$RC"

finish
