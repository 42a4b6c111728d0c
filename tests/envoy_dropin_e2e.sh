#!/usr/bin/env bash
# End-to-end checks of envoyproxy/ratelimit's behaviours that sluice matches (issue 19), over
# gRPC and /json (tests/grpc/dropin_test.js, Node.js), in memory and on a real redis-server:
# per-descriptor quota_mode (and its metrics, near_limit too), a descriptor with no entries, a named limit's JSON
# field order, and the settings' global shadow_mode and response_dynamic_metadata.
# Usage: SLUICE=path/to/sluice tests/envoy_dropin_e2e.sh tests/grpc
set -u
fixtures=$(cd "$1" && pwd)
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl redis-server redis-cli node
need_grpc_client "$fixtures"

mkdir -p "$tmp/rules"
cp "$fixtures/dropin/q.yaml" "$tmp/rules/"
# A Redis call past redis.timeout (10 ms by default) is answered by failure_mode open: on a
# loaded 2-core machine that happened, and an admission then looked like a wrong decision. The
# checks here are about decisions, not timeouts: a second is long enough.
printf 'rules: rules\nredis: {timeout: 1s}\n' >"$tmp/quota.yaml"
printf 'rules: rules\nshadow_mode: true\nresponse_dynamic_metadata: true\nredis: {timeout: 1s}\n' >"$tmp/shadow.yaml"

start_redis_on; rport=$RPORT
backends=("memory" "redis")

# run NAME MODE ARGS...: a server with ARGS, the Node.js checks in MODE against it.
run() {
  local name=$1 mode=$2; shift 2
  start "$name" "$@" --grpc 127.0.0.1:0 --threads 1
  if [[ -z $GRPC || -z $DATA ]]; then
    check "$name: started" 1 0; cat "$tmp/$name.err"; return
  fi
  timeout 60 node "$fixtures/dropin_test.js" "$GRPC" "$DATA" "$mode" >"$tmp/$name.node" 2>&1
  local status=$?
  sed "s/^/  $name: /" "$tmp/$name.node"
  check "$name: every check passed" 0 "$status"
  check "$name: ran its checks" 1 "$(grep -Eq '^[1-9][0-9]* passed, 0 failed$' "$tmp/$name.node" && echo 1)"
  if [[ $mode == quota ]]; then
    local quota
    # (The quota's limit has no name: it is labelled as headers and /v1/check name it.)
    quota=$(metrics "$ADMIN" | grep -c '^sluice_decisions_total{domain="q",limit="3-per-1d",decision="quota_exceeded"} [1-9]')
    check "$name: quota-mode denials counted apart in sluice_decisions_total" 1 "$quota"
    local near
    near=$(metrics "$ADMIN" | grep -c '^sluice_near_limit_decisions_total{domain="q",.*} [1-9]')
    check "$name: near-limit decisions counted (sluice_near_limit_decisions_total)" 1 "$(( near > 0 ? 1 : 0 ))"
  fi
  stop
}

for backend in "${backends[@]}"; do
  redis_args=()
  [[ $backend == redis ]] && redis_args=(--redis "redis://127.0.0.1:$rport")
  run "quota-$backend" quota --config "$tmp/quota.yaml" "${redis_args[@]}"
  run "shadow-$backend" shadow --config "$tmp/shadow.yaml" "${redis_args[@]}"
done
check "redis holds the states of the Redis runs" 1 \
  "$(( $(redis-cli -p "$rport" dbsize) > 0 ? 1 : 0 ))"

finish
