#!/usr/bin/env bash
# End-to-end test of consistency: leased (backend/hybrid/leases.h): four `sluice serve` processes share
# one real redis-server. Hammering one key, they admit no more than the limit between them, and
# exactly the limit once the load has outlasted the leases (under-admission is transient); most
# decisions cost Redis no call; a zipf-skewed set of 50 keys is never admitted over its limits
# either, and exactly where the load exceeded them; SIGTERM on one instance gives its unspent units back to the
# others; an admin reset reaches the leases of every instance; Redis killed while leases are held:
# the leases are spent, then the domain's failure_mode answers, and leases resume when it returns.
# Usage: SLUICE=path/to/sluice tests/leases_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl redis-server redis-cli
source "$(dirname "$0")/lease_load.sh"

script_calls() { redis_script_calls "$rport"; }

# fire_leased KEY VALUE N [INSTANCES...]: lib.sh's fire on the domain `leased`, 4 at a time per
# instance.
fire_leased() { FIRE_PARALLEL=4 fire leased "$@"; }

mkdir -p "$tmp/rules"
cat >"$tmp/rules/leased.yaml" <<'EOF'
domain: leased
consistency: leased
failure_mode: closed
descriptors:
  - key: fixed
    rate_limit: {algorithm: fixed_window, requests: 60, window: 1h}
  - key: sliding
    rate_limit: {algorithm: sliding_window, requests: 60, window: 1h}
  - key: bucket
    rate_limit: {algorithm: token_bucket, requests: 60, window: 1h}
  - key: exact
    rate_limit: {algorithm: fixed_window, requests: 60, window: 1h, consistency: exact}
  - key: zfixed
    rate_limit: {algorithm: fixed_window, requests: 20, window: 1d}
  - key: zbucket
    rate_limit: {algorithm: token_bucket, requests: 20, window: 1d}
EOF
# A window's lease lives 2 s here, so that a test can act while one is held and after it ended.
# The deadline is one a loaded machine does not reach: a call that timed out would be a 503
# (failure_mode closed) and spoil the exact counts; Redis's outage below refuses connections.
printf 'rules: %s\nredis:\n  instances: 4\n  timeout: 2s\n  lease_interval: 200ms\n  window_lease_life: 2s\n' \
  "$tmp/rules" >"$tmp/sluice.yaml"

clear_of_hour_end 90  # (its fixed windows must not roll over while it counts them)
start_redis_on; rport=$RPORT
datas=() admins=() spids=()
for i in 0 1 2 3; do
  start "s$i" --config "$tmp/sluice.yaml" --redis "redis://127.0.0.1:$rport" --threads 1
  datas+=("$DATA") admins+=("$ADMIN") spids+=("$PID")
done
check "four instances up" 4 "$(for d in "${datas[@]}"; do [[ -n $d ]] && echo; done | wc -l)"

# until_spent LIMIT VALUE INSTANCE...: rounds of 30 requests per instance given on the key VALUE
# of LIMIT, 2.3 s apart, until a round admits none (at most 5); prints how many were admitted in
# all. A round at a brisk pace can end with units in leases taken near its end; they go back
# when those leases end (each instance's first decision of the next round sweeps its ended
# ones), so only the rounds together admit every unit, once.
until_spent() {
  local limit=$1 value=$2 total=0 more
  shift 2
  for round in 1 2 3 4 5; do
    ((round == 1)) || sleep 2.3
    more=$(fire_leased "$limit" "$value" 30 "$@")
    total=$((total + more))
    ((more > 0)) || break
  done
  echo "$total"
}

# ----------------------------------------------------- one key, four instances, never over
for algo in fixed sliding; do
  first=$(fire_leased "$algo" hot 30)  # 120 requests for a limit of 60
  check "$algo: no more than the limit admitted across 4 instances" yes \
    "$([[ $first -le 60 && $first -ge 40 ]] && echo yes || echo "no: $first")"
  sleep 2.3  # the leases end; their unspent units go back
  check "$algo: exactly the limit once the leases ended" 60 \
    "$((first + $(until_spent "$algo" hot 0 1 2 3)))"
done
bucket=$(fire_leased bucket hot 30)
# (A bucket's unspent leased units are not given back, docs/algorithms.md: under a loaded
# machine more of them end unspent, so only the upper bound is exact.)
check "bucket: no more than the limit admitted" yes \
  "$([[ $bucket -le 60 && $bucket -ge 20 ]] && echo yes || echo "no: $bucket")"
local_decisions=$(lease_metric sluice_lease_decisions_total)
check "decisions were made from leases (over 100)" yes \
  "$([[ $local_decisions -ge 100 ]] && echo yes || echo "no: $local_decisions")"

# ------------------------------------------------------- leases cost Redis far fewer calls
before=$(script_calls)
fire_leased fixed calls 10 >/dev/null
leased_calls=$(($(script_calls) - before))
before=$(script_calls)
fire_leased exact calls 10 >/dev/null
exact_calls=$(($(script_calls) - before))
check "40 leased decisions cost fewer script calls than 40 exact ones" yes \
  "$([[ $leased_calls -lt $exact_calls && $leased_calls -le 20 ]] && echo yes || echo "no: leased $leased_calls, exact $exact_calls")"

# ------------------------------------------------------- a zipf set of keys, four instances
# zK asked round(60 / K) times a round (60, 30, 20, 15, ... 1) per algorithm, limit 20 a day,
# shuffled and dealt over the four instances; two rounds, the leases ended in between. (The
# same checks as tests/leases_cluster_e2e.sh, there through a Redis Cluster.)
domain=leased
{ zipf_requests zfixed 60; zipf_requests zbucket 60; } >"$tmp/zipf"
deal "$tmp/zipf" >"$tmp/zipf.dealt"
clear_of_midnight
fire_dealt "$tmp/zipf.dealt" >"$tmp/zipf.1"
check "zipf round 1: no fixed_window key over its limit of 20" "" "$(over_limit <(tally "$tmp/zipf.1") zfixed 20)"
sleep 2.3
printf '%s zfixed sweep\n' 0 1 2 3 >"$tmp/sweep"
fire_dealt "$tmp/sweep" >/dev/null
sleep 0.3
fire_dealt "$tmp/zipf.dealt" >"$tmp/zipf.2"
tally "$tmp/zipf.1" "$tmp/zipf.2" >"$tmp/zipf.tally"
check "zipf: every request answered 200 or 429" "" \
  "$(cat "$tmp/zipf.1" "$tmp/zipf.2" | awk '$3 != 200 && $3 != 429' | sort | uniq -c | head -3)"
check "zipf: no fixed_window key over its limit of 20 in both rounds" "" "$(over_limit "$tmp/zipf.tally" zfixed 20)"
check "zipf: fixed_window keys asked 20+ times a round: exactly 20 once the leases ended" "" \
  "$(not_exact "$tmp/zipf.tally" zfixed 20 40 1000)"
# (Far below the limit no request is denied: the leases out at once hold at most 4 x 2 units.)
check "zipf: fixed_window keys asked at most 10 times in all: every request admitted" "" \
  "$(not_exact "$tmp/zipf.tally" zfixed 20 1 10)"
# (A bucket's unspent units are not given back: only its upper bound is exact.)
check "zipf: no token_bucket key over its limit of 20 in both rounds" "" "$(over_limit "$tmp/zipf.tally" zbucket 20)"
echo "# zipf: admitted fixed_window $(admitted "$tmp/zipf.tally" zfixed) (exactly: 368)," \
  "token_bucket $(admitted "$tmp/zipf.tally" zbucket)"

# ------------------------------------------------------- SIGTERM gives the lease back
# two_on INSTANCE VALUE: two requests 50 ms apart on one instance: the first leases 1 unit, the
# second (its rate known) a larger lease of which it spends 1. Prints how many were admitted.
two_on() {
  local a b
  a=$(fire_leased fixed "$2" 1 "$1"); sleep 0.05; b=$(fire_leased fixed "$2" 1 "$1")
  echo $((a + b))
}
check "instance 0: two admitted, a lease held" 2 "$(two_on 0 term)"
PID=${spids[0]}; stop
check "instance 0 stopped cleanly" 0 "$STATUS"
unset 'datas[0]' 'admins[0]'
check "the other three then admit the other 58" 58 "$(until_spent fixed term 1 2 3)"

# ------------------------------------------------------- an admin reset reaches every lease
fire_leased fixed reset 30 1 2 3 >/dev/null  # the limit spent, leases held
curl -s -X DELETE "http://${admins[1]}/v1/limits?domain=leased&descriptors=fixed=reset" >/dev/null
sleep 1
# (Every instance dropped the leases it held: none is spent on top of the new limit.)
first=$(fire_leased fixed reset 30 1 2 3)
sleep 2.3  # the new leases end
check "after a reset, exactly the whole limit again for all of them" 60 \
  "$((first + $(until_spent fixed reset 1 2 3)))"

# ------------------------------------------------------- Redis killed while leases are held
check "instance 1: two admitted, a lease held" 2 "$(two_on 1 outage)"
kill -9 "$RPID"; wait "$RPID" 2>/dev/null
held=$(fire_leased fixed outage 20 1)
check "Redis down: instance 1 spends what its lease held (some, not all 20)" yes \
  "$([[ $held -ge 2 && $held -lt 20 ]] && echo yes || echo "no: $held")"
check "... then failure_mode closed answers (503, none admitted)" 0 "$(fire_leased fixed outage 3 1)"
start_redis "$rport" >/dev/null
ok=0
for _ in $(seq 50); do
  [[ $(fire_leased fixed back 1 1) == 1 ]] && { ok=1; break; }
  sleep 0.1
done
check "Redis back: decisions (and leases) resume" 1 "$ok"

finish
