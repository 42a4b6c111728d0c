#!/usr/bin/env bash
# End-to-end test of `sluice sim` (docs/sim.md): the real binary, 4 instances in exact mode
# against a real redis-server on a free port, a few short runs at a low rate. Checks the JSON
# line: no over-admission in any window, admitted equal to the exact model's within the
# tolerance docs/sim.md explains (Redis decides in its own clock, a little after each arrival),
# and the over-limit cache saving script calls on a hot key; leased mode with no over-admission
# and a fraction of exact mode's Redis work (a tenth on an hour's window once leases are taken);
# eventual mode within its bound on bursts and a hot key, and with cold keys from leases a
# fraction of a copy per key's Redis work on a zipf mix and within the bound on a key hot on one
# instance and cold on the others; --warmup's steady_* fields count from
# its end. Also: an unknown mode, a bad limit and a warm-up as long as the run are usage errors
# (exit 2).
# Usage: SLUICE=path/to/sluice tests/sim_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools redis-server redis-cli

# ok EXPR: "yes" when the awk expression over the numbers in it holds.
holds() { awk "BEGIN { print (($1) ? \"yes\" : \"no\") }"; }

start_redis_on; rport=$RPORT
url="redis://127.0.0.1:$rport"
sim() { timeout 60 "$sluice" sim --redis "$url" --instances 4 --rate 2000 --seconds 1.5 "$@" 2>>"$tmp/sim.err"; }

# ------------------------------------------------------- exact mode: what the exact model admits
# 200 zipf keys at 2000/s: the first keys get ~300/s against a limit of 20/s, the last keys 2/s.
line=$(sim --trace zipf --keys 200 --limit fixed_window:20/1s --over-limit-cache off)
echo "  $line"
check "fixed_window: JSON line with 3000 decisions" "3000" "$(field decisions "$line")"
check "fixed_window: no errors" "0" "$(field errors "$line")"
check "fixed_window: no over-admission in any window" "0" "$(field over_admission_max "$line")"
admitted=$(field admitted "$line") exact=$(field exact_admitted "$line")
# docs/sim.md: Redis decides each request a little after its arrival, so one near a window's end
# may count in the next window, and the cache may deny one arriving just after a window reopened.
# Allowed: 2 % of the admissions (at least 5), far more than 2000/s x a few ms of latency x 2
# window ends; on a loaded machine whose slowest decisions take a share of the window, that share
# more (p99: the late ones are what move a decision across a window's end).
# near_exact LINE WINDOW_US: "yes" when admitted is within that tolerance of exact_admitted.
near_exact() {
  local admitted exact p99
  admitted=$(field admitted "$1") exact=$(field exact_admitted "$1") p99=$(field p99_us "$1")
  holds "$exact > 100 && ($admitted - $exact)^2 <= ((($exact / 50 > 5) ? $exact / 50 : 5) + $exact * $p99 / $2)^2"
}
check "fixed_window: admitted ($admitted) = exact model ($exact) within 2 % (+ p99/window)" "yes" \
  "$(near_exact "$line" 1000000)"

line=$(sim --trace uniform --keys 20 --limit sliding_log:30/500ms)
echo "  $line"
check "sliding_log: no over-admission in any span of the window" "0" "$(field over_admission_max "$line")"
check "sliding_log: no errors" "0" "$(field errors "$line")"
admitted=$(field admitted "$line") exact=$(field exact_admitted "$line")
check "sliding_log: admitted ($admitted) = exact model ($exact) within 2 % (+ p99/window)" "yes" \
  "$(near_exact "$line" 500000)"

# ---------------------------------------------------------- the over-limit cache on a hot key
on=$(sim --trace hot --limit fixed_window:20/1s --over-limit-cache on)
off=$(sim --trace hot --limit fixed_window:20/1s --over-limit-cache off --warmup 0.5)
echo "  $on"
echo "  $off"
calls_on=$(field redis_script_calls_per_decision "$on")
calls_off=$(field redis_script_calls_per_decision "$off")
check "hot key: cache on costs fewer script calls per decision ($calls_on) than off ($calls_off)" \
  "yes" "$(holds "$calls_on < $calls_off / 4")"
check "hot key: the cache answered" "yes" "$(holds "$(field over_limit_cache_hits "$on") > 1000")"
check "hot key, cache on: no over-admission" "0" "$(field over_admission_max "$on")"
check "hot key, cache off: every decision a Redis state operation" "1.0000" \
  "$(field redis_state_ops_per_decision "$off")"
# --warmup 0.5: the 2000 decisions due from 0.5 s on, and Redis's work counted from then (one
# state each; counted from the start, it would be 1.5 each).
check "--warmup: the decisions due after it" "2000" "$(field steady_decisions "$off")"
steady=$(field steady_redis_state_ops_per_decision "$off")
check "--warmup: one state operation per decision counted after it ($steady)" "yes" \
  "$(holds "$steady >= 0.95 && $steady <= 1.05")"

# ------------------------------------------------------------------ leased mode, side by side
# A hot key at 2000/s for a limit of 1000/s, and 50 zipf keys: leases spend locally, never over.
for trace in hot zipf; do
  leased=$(sim --trace "$trace" --keys 50 --limit fixed_window:1000/1s --mode leased)
  exact=$(sim --trace "$trace" --keys 50 --limit fixed_window:1000/1s --mode exact --over-limit-cache off)
  echo "  $leased"
  echo "  $exact"
  check "leased, $trace: no over-admission in any window" "0" "$(field over_admission_max "$leased")"
  check "leased, $trace: no errors" "0" "$(field errors "$leased")"
  ops_leased=$(field redis_state_ops_per_decision "$leased")
  ops_exact=$(field redis_state_ops_per_decision "$exact")
  check "leased, $trace: Redis state operations per decision ($ops_leased) under a third of exact's ($ops_exact)" \
    "yes" "$(holds "$ops_leased < $ops_exact / 3")"
  admitted=$(field admitted "$leased") model=$(field exact_admitted "$leased")
  check "leased, $trace: under-admission ($admitted of $model) under 10 %" "yes" \
    "$(holds "$model > 100 && $admitted >= $model * 0.9")"
done

# An hour's window, counted once every key and instance has its first lease (--warmup): a lease
# lives a minute (window_lease_life's default) and the next one of a key is sized by its rate, so
# the last 3 s cost Redis a small fraction of what exact mode's do.
long() { timeout 60 "$sluice" sim --redis "$url" --instances 4 --rate 2000 --seconds 6 --warmup 3 \
  --trace zipf --keys 100 --limit fixed_window:60000/1h "$@" 2>>"$tmp/sim.err"; }
leased=$(long --mode leased)
exact=$(long --mode exact)
echo "  $leased"
echo "  $exact"
steady_leased=$(field steady_redis_state_ops_per_decision "$leased")
steady_exact=$(field steady_redis_state_ops_per_decision "$exact")
check "leased, 1h window, after the warm-up: state operations per decision ($steady_leased) under a tenth of exact's ($steady_exact)" \
  "yes" "$(holds "$steady_exact > 0.5 && $steady_leased < $steady_exact / 10")"
check "leased, 1h window: no over-admission" "0" "$(field over_admission_max "$leased")"

# ---------------------------------------------------------- eventual mode: within its bound
# Bursts (onoff) and one hot key, 4 instances merging every 100 ms: the over-admission of every
# key in every window stays under the bound of backend/hybrid/eventual.h measured on the run (what the
# other instances admitted in their busiest span of V + T + D), and a hot key costs Redis a
# handful of state operations per second, not one per decision. (Most decisions are on the copies:
# over half; more on a quiet machine, where 60 % and more are, but a late merge sends a key to
# Redis until the next one, and a loaded one was seen at 58 % during a whole `make test`.)
for trace in onoff hot; do
  for algorithm in fixed_window token_bucket sliding_window; do
    line=$(sim --trace "$trace" --keys 20 --limit "$algorithm:200/1s" --mode eventual)
    echo "  $line"
    check "eventual, $trace, $algorithm: no errors" "0" "$(field errors "$line")"
    check "eventual, $trace, $algorithm: over-admission ($(field over_admission_max "$line")) within the bound ($(field eventual_bound_max "$line"))" \
      "true" "$(field eventual_within_bound "$line")"
    check "eventual, $trace, $algorithm: most decisions on the copies" "yes" \
      "$(holds "$(field eventual_local_decisions "$line") > $(field decisions "$line") * 0.5")"
  done
done
# A hot key costs a merge per instance and interval (4 x 10 per second), whatever its rate: at
# 2000/s that is 0.02 per decision (the issue's 0.02 at this rate, 0.0004 at 100 000/s). A merge
# that is late sends the key's decisions to Redis until the next one, so a loaded machine adds
# more: 61 a second seen during a whole `make test`, 249 (0.125 per decision) during another.
# The check is that copies save at least three quarters of the
# state operations exact mode makes (one per decision): at most a quarter per decision.
ops=$(field redis_state_ops_per_decision "$line")  # (hot key, sliding_window)
check "eventual, hot key: Redis state operations per decision ($ops) at most a quarter" "yes" \
  "$(holds "$ops <= 0.25")"

# ------------------------------------------- eventual mode, cold keys from leases: the zipf mix
# 200 zipf keys at 2000/s, an hour's window: with --cold-keys-rate 20 the few keys an instance
# sees at more than 20/s are decided on copies, the rest from leases. Once the leases are taken
# that costs Redis far less than a copy of every key merged each interval (a copy per key asked
# in the interval): 0.29 of it on a quiet machine, 0.39 with three busy loops on its two cores
# (leases taken late, after the warm-up): under half.
run_eventual() {
  timeout 60 "$sluice" sim --redis "$url" --instances 4 --rate 2000 --seconds 3 --warmup 1.5 \
    --trace zipf --keys 200 --limit fixed_window:100000/1h --mode eventual "$@" 2>>"$tmp/sim.err"
}
split=$(run_eventual --cold-keys-rate 20)
echo "  $split"
copies=$(run_eventual)
echo "  $copies"
check "eventual, cold keys from leases: no errors" "0" "$(field errors "$split")"
check "eventual, cold keys from leases: both leases and copies decided" "yes" \
  "$(holds "$(field eventual_leased_decisions "$split") > 1000 && $(field eventual_local_decisions "$split") > 500")"
steady_split=$(field steady_redis_state_ops_per_decision "$split")
steady_copies=$(field steady_redis_state_ops_per_decision "$copies")
check "eventual, after the warm-up: state operations per decision ($steady_split) under half of copies' ($steady_copies)" \
  "yes" "$(holds "$steady_copies > 0.1 && $steady_split < $steady_copies / 2")"

# A key hot on one instance and cold on the others, over its limit every second: arrivals 0, 4,
# 8, ... (instance 0, round-robin) are key h, 250/s; a tenth of the others are h too (about 25/s
# on each other instance), the rest 100 cold keys. Instance 0 decides h on a copy whose merges
# fence it; the others' leases of h are refused while it does, and they decide it on copies too:
# the over-admission stays within the bound. (With no fence a lease taken after a copy's merge
# would be hidden from it; on this trace no lease is then refused, and the second check fails.)
awk 'BEGIN { srand(7); for (i = 0; i < 3000; i++) {
       k = (i % 4 == 0 || rand() < 0.1) ? "h" : "c" int(rand() * 100); print i, k } }' \
  >"$tmp/mixed.trace"
mixed=$(timeout 60 "$sluice" sim --redis "$url" --instances 4 --trace "$tmp/mixed.trace" \
  --limit fixed_window:100/1s --mode eventual --cold-keys-rate 50 2>>"$tmp/sim.err")
echo "  $mixed"
check "eventual, one key hot on one instance: no errors" "0" "$(field errors "$mixed")"
check "eventual, one key hot on one instance: leases refused by the copy's fence" "yes" \
  "$(holds "$(field eventual_fenced_leases "$mixed") > 0")"
check "eventual, one key hot on one instance: the limit was reached" "yes" \
  "$(holds "$(field exact_admitted "$mixed") < $(field decisions "$mixed")")"
check "eventual, one key hot on one instance: over-admission ($(field over_admission_max "$mixed")) within the bound ($(field eventual_bound_max "$mixed"))" \
  "true" "$(field eventual_within_bound "$mixed")"

# ------------------------------------------------ --accuracy: an algorithm against the exact log
# No Redis. On/off bursts over 10 keys at 1.2 x the limit: the exact log is never wrong and never
# over N in a span of W; a fixed window never refuses what the log admits but lets 2 N through
# across a boundary.
acc() { timeout 60 "$sluice" sim --accuracy --trace onoff --keys 10 --rate 1200 --seconds 20 --limit "$1" 2>>"$tmp/sim.err"; }
line=$(acc sliding_log:100/1s)
echo "  $line"
check "--accuracy, sliding_log: no wrong decision" "0.0000" "$(field wrong_pct "$line")"
check "--accuracy, sliding_log: at most N in any span of W" "1.000" "$(field most_in_window_per_limit "$line")"
line=$(acc fixed_window:100/1s)
echo "  $line"
check "--accuracy, fixed_window: no false deny" "0" "$(field false_denies "$line")"
check "--accuracy, fixed_window: 2 N across a boundary" "2.000" "$(field most_in_window_per_limit "$line")"

# ------------------------------------------------------------------------------- usage errors
out=$("$sluice" sim --redis "$url" --mode loose 2>&1)
check "--mode loose: exit 2" "2" "$?"
check_contains "--mode loose: the modes there are" "exact, leased, eventual" "$out"
out=$("$sluice" sim --redis "$url" --limit fixed_window:100 2>&1)
check "a bad --limit: exit 2" "2" "$?"
check_contains "a bad --limit: the expected form" "ALGORITHM:N/WINDOW" "$out"

out=$("$sluice" sim --redis "$url" --seconds 1 --warmup 1 2>&1)
check "--warmup as long as the run: exit 2" "2" "$?"
check_contains "--warmup as long as the run: why" "less than --seconds" "$out"

[[ -s $tmp/sim.err ]] && { echo "stderr of the runs:"; cat "$tmp/sim.err"; }
finish
