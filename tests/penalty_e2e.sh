#!/usr/bin/env bash
# End-to-end test of penalties (`penalty:` on a limit; docs/configuration.md, "Penalties"): on
# the memory store (one `sluice serve`), then with four instances sharing one real redis-server,
# then a real 3-master Redis Cluster. A key denied twice within the span is blocked: the 429
# says `X-RateLimit-Status: penalty` with the block as Retry-After, on every instance; the
# admin API shows the block (GET /v1/limits) and the metrics count it (reason="penalty"); the
# block ends on its own (waited for, bounded), the next offence's block is longer (growth), and
# DELETE /v1/limits lifts block and limit on every instance.
# Usage: SLUICE=path/to/sluice tests/penalty_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl python3 redis-server redis-cli

mkdir -p "$tmp/rules"
cat >"$tmp/rules/api.yaml" <<'YAML'
domain: api
failure_mode: closed
descriptors:
  - key: user
    rate_limit:
      requests: 2
      window: 1h
      penalty: {after: 2, within: 1m, block: 2s, growth: 2, max: 3s}
YAML

# on I USER: one check of USER on instance I (datas[I]); prints the status, keeps headers.
on() { check_one "${datas[$1]}" api user "$2"; }

# penalty_flow LABEL USER: the whole story on the instances in `datas` (and `admins`), each
# request on the next instance in turn.
penalty_flow() {
  local label=$1 user=$2 n=${#datas[@]} i status _
  check "$label: the limit admits 2" "200 200" "$(on 0 "$user") $(on $((1 % n)) "$user")"
  check "$label: the first denial is the limit's" 429 "$(on $((2 % n)) "$user")"
  check "$label: ... with no penalty status" "" "$(header X-RateLimit-Status)"
  check "$label: the second denial within the span starts a block" 429 "$(on $((3 % n)) "$user")"
  check "$label: ... said so" penalty "$(header X-RateLimit-Status)"
  check "$label: ... Retry-After: the block, 2 s" 2 "$(header Retry-After)"
  check_contains "$label: ... and in the body" '"penalty":true' "$(cat "$tmp/body")"
  check "$label: every instance answers the block" "429 penalty" \
    "$(on 0 "$user") $(header X-RateLimit-Status)"
  check_contains "$label: GET /v1/limits shows it" '"penalty":true' \
    "$(curl -s -m 5 "http://${admins[$((1 % n))]}/v1/limits?domain=api&descriptors=user=$user")"
  check "$label: metrics count the penalty" 1 \
    "$(($(metric "${admins[0]}" 'sluice_decision_reasons_total{domain="api",limit="2-per-1h",reason="penalty"}' 0) >= 1))"
  # The block ends on its own (2 s; at most 4 s waited): then the limit's own denial again.
  status=penalty
  for _ in $(seq 40); do
    on $((1 % n)) "$user" >/dev/null
    status=$(header X-RateLimit-Status)
    [[ -z $status ]] && break
    sleep 0.1
  done
  check "$label: the block ends on its own" "" "$status"
  # That was a denial of a new span; one more is the second offence: 2 s x 2, capped at 3 s.
  check "$label: a second offence" "429 penalty" "$(on $((2 % n)) "$user") $(header X-RateLimit-Status)"
  check "$label: ... blocks longer, up to max" 3 "$(header Retry-After)"
  check "$label: DELETE /v1/limits lifts it" 200 \
    "$(curl -s -o /dev/null -w '%{http_code}' -m 5 -X DELETE \
      "http://${admins[$((3 % n))]}/v1/limits?domain=api&descriptors=user=$user")"
  for ((i = 0; i < n && i < 2; i++)); do
    check "$label: admitted again on instance $i" 200 "$(on "$i" "$user")"
  done
}

# ---------------------------------------------------------------- memory
clear_of_hour_end 20
start m --config "$tmp/rules"
datas=("$DATA") admins=("$ADMIN")
penalty_flow memory alice
stop
check "memory: stops cleanly" 0 "$STATUS"

# ---------------------------------------------------------------- one Redis, four instances
start_redis_on; rport=$RPORT
# (A generous timeout: this test is about blocks, not about a Redis slowed by a busy machine,
# which failure_mode closed would answer with a 503.)
mkdir -p "$tmp/redis-rules"
cp "$tmp/rules/api.yaml" "$tmp/redis-rules/"
printf 'redis:\n  timeout: 2s\n' >"$tmp/redis-rules/sluice.yaml"
start_four r --config "$tmp/redis-rules" --redis "redis://127.0.0.1:$rport"
penalty_flow redis bob
for i in 0 1 2 3; do PID=${spids[$i]} stop; check "redis instance $i stops cleanly" 0 "$STATUS"; done

# ---------------------------------------------------------------- a 3-master cluster
start_redis_cluster
mkdir -p "$tmp/cluster-rules"
cp "$tmp/rules/api.yaml" "$tmp/cluster-rules/"
cluster_settings "$tmp/cluster-rules"
start_four c --config "$tmp/cluster-rules"
check_contains "cluster: the instances decide on it" "backend redis cluster" "$(cat "$tmp/c0.out")"
penalty_flow cluster carol
for i in 0 1 2 3; do PID=${spids[$i]} stop; check "cluster instance $i stops cleanly" 0 "$STATUS"; done
finish
