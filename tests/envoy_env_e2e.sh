#!/usr/bin/env bash
# End-to-end test of `sluice serve --envoy-env`: an envoyproxy/ratelimit deployment (its
# environment variables, its runtime directory behind a RUNTIME_ROOT symlink, a real Redis on
# TCP) runs sluice unchanged. Checks the ports (PORT: /json and /healthcheck, GRPC_PORT: RLS and
# health with an independent Node.js client, DEBUG_PORT: /readyz and /metrics), rules from the
# tree in upstream's YAML (a file without .yaml, a domain merged from two files), Redis keys
# under CACHE_KEY_PREFIX, a symlink swap of RUNTIME_ROOT loaded within 5 s, and start-up
# messages: a warning naming an unsupported variable, a refusal naming a decision-changing one.
# Every process is started on loopback and stopped by its pid.
# Usage: SLUICE=path/to/sluice tests/envoy_env_e2e.sh tests/grpc
set -u
fixtures=$(cd "$1" && pwd)
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl redis-server redis-cli node
need_grpc_client "$fixtures"

# --- Redis on a free loopback port.
start_redis_on; rport=$RPORT

# --- The runtime tree, as upstream's docker-compose has it: RUNTIME_ROOT is a symlink to a
# version directory; rules live in $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config.
runtime=$tmp/srv/runtime_data
mkdir -p "$runtime/v1/ratelimit/config"
cat >"$runtime/v1/ratelimit/config/api.yaml" <<'EOF'
domain: api
descriptors:
  - key: user
    value: alice
    rate_limit:
      unit: day
      requests_per_unit: 2
EOF
# A second file of the same domain (MERGE_DOMAIN_CONFIG=true), without a .yaml name.
cat >"$runtime/v1/ratelimit/config/api_more.conf" <<'EOF'
domain: api
descriptors:
  - key: user
    value: bob
    rate_limit:
      unit: day
      requests_per_unit: 3
EOF
ln -s v1 "$runtime/current"

free_port; port=$FREE_PORT
free_port; grpc_port=$FREE_PORT
free_port; debug_port=$FREE_PORT
free_port; prom_port=$FREE_PORT
deployment=(
  RUNTIME_ROOT="$runtime/current" RUNTIME_SUBDIRECTORY=ratelimit
  HOST=127.0.0.1 PORT="$port" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc_port"
  DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug_port"
  REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" REDIS_TYPE=SINGLE
  # sluice's own default is 10 ms, past which the domain's failure_mode (open) answers without
  # counting: too short for a loaded test machine, where every answer here must come from Redis.
  REDIS_TIMEOUT=2s
  CACHE_KEY_PREFIX=e2e_prefix_ MERGE_DOMAIN_CONFIG=true USE_STATSD=false LOG_LEVEL=info
  REDIS_POOL_SIZE=5 STATSD_HOST=statsd.example
  # Upstream's Prometheus sink: sluice's /metrics also on PROMETHEUS_ADDR, at PROMETHEUS_PATH.
  USE_PROMETHEUS=true PROMETHEUS_ADDR="127.0.0.1:$prom_port" PROMETHEUS_PATH=/prom
)

json() {  # json USER: one /json request for domain api; prints the status code, keeps the body
  curl -s -o "$tmp/body" -w '%{http_code}' -m 5 -H 'content-type: application/json' \
    -d "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"$1\"}]}]}" \
    "http://127.0.0.1:$port/json"
}

# --- The deployment starts and serves on upstream's ports.
start_env main "${deployment[@]}"
started=$(grep -q '^sluice: config' "$tmp/main.out" && echo 1)
check "serves with upstream's variables" 1 "$started"
[[ $started == 1 ]] || sed 's/^/  | /' "$tmp/main.err"
check "data plane on PORT" "127.0.0.1:$port" "$(sed -n 's/^sluice: data plane listening on //p' "$tmp/main.out")"
check "gRPC on GRPC_PORT" "127.0.0.1:$grpc_port" "$(sed -n 's/^sluice: grpc listening on //p' "$tmp/main.out")"
check "admin on DEBUG_PORT" "127.0.0.1:$debug_port" "$(sed -n 's/^sluice: admin listening on //p' "$tmp/main.out")"
check "metrics on PROMETHEUS_ADDR" "127.0.0.1:$prom_port" "$(sed -n 's/^sluice: prometheus listening on //p' "$tmp/main.out")"
check_contains "config is the runtime directory" "$runtime/current/ratelimit/config" "$(grep '^sluice: config' "$tmp/main.out")"
check_contains "backend is REDIS_URL" "redis 127.0.0.1:$rport" "$(grep '^sluice: config' "$tmp/main.out")"
check_contains "an unsupported variable is named (warning)" "warning: STATSD_HOST: not supported" "$(cat "$tmp/main.err")"
check_contains "an irrelevant variable is named (info)" "info: REDIS_POOL_SIZE: no effect" "$(cat "$tmp/main.err")"

check "/healthcheck on PORT" 200 "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$port/healthcheck")"
check "/json: first request" 200 "$(json alice)"
check_contains "/json: the limit from the tree" '"currentLimit":{"requestsPerUnit":2,"unit":"DAY"}' "$(cat "$tmp/body")"
check "/json: a limit from the merged .conf file" 200 "$(json bob)"
check_contains "/json: bob's limit" '"requestsPerUnit":3' "$(cat "$tmp/body")"
grpc_answer=$(timeout 10 node "$fixtures/should_rate_limit.js" "127.0.0.1:$grpc_port" api user alice 2>&1 | tail -1)
check "gRPC ShouldRateLimit on GRPC_PORT (2nd of 2)" "OK 2/DAY" "$grpc_answer"
check "gRPC health on GRPC_PORT" SERVING "$(timeout 10 node "$fixtures/health_status.js" "127.0.0.1:$grpc_port" 2>&1 | tail -1)"
check "/json: third request is over the limit" 429 "$(json alice)"
check_contains "/json: OVER_LIMIT" '"overallCode":"OVER_LIMIT"' "$(cat "$tmp/body")"
check "/readyz on DEBUG_PORT" 200 "$(curl -s -o "$tmp/ready" -w '%{http_code}' -m 5 "http://127.0.0.1:$debug_port/readyz")"
check_contains "/readyz: decided on Redis" "backend: redis" "$(cat "$tmp/ready")"
check_contains "/metrics on DEBUG_PORT" "sluice_backend_up 1" "$(curl -s -m 5 "http://127.0.0.1:$debug_port/metrics")"
# The same registry at PROMETHEUS_ADDR + PROMETHEUS_PATH: the decisions above were counted there
# (alice twice and bob once on /json, alice once on gRPC), and nothing else is served.
prom_decisions=$(curl -sf -m 5 "http://127.0.0.1:$prom_port/prom" |
  awk '/^sluice_decisions_total[{ ]/ {n += $NF} END {print n + 0}')
check "PROMETHEUS_PATH on PROMETHEUS_ADDR counts the decisions" 4 "$prom_decisions"
check "PROMETHEUS_ADDR serves PROMETHEUS_PATH only" 404 \
  "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$prom_port/metrics")"
keys=$(redis-cli -p "$rport" --scan --pattern 'e2e_prefix_*' | wc -l)
check "Redis holds keys under CACHE_KEY_PREFIX" 1 "$((keys > 0))"
check "and none outside it" "$keys" "$(redis-cli -p "$rport" --scan | wc -l)"

# --- A symlink swap of RUNTIME_ROOT (RUNTIME_WATCH_ROOT's default) loads the new tree.
mkdir -p "$runtime/v2/ratelimit/config"
sed 's/requests_per_unit: 2/requests_per_unit: 7/' "$runtime/v1/ratelimit/config/api.yaml" \
  >"$runtime/v2/ratelimit/config/api.yaml"
ln -s v2 "$runtime/current.new" && mv -T "$runtime/current.new" "$runtime/current"
swapped=0
for i in $(seq 50); do
  json alice >/dev/null
  if grep -q '"requestsPerUnit":7' "$tmp/body"; then swapped=$i; break; fi
  sleep 0.1
done
check "a symlink swap of RUNTIME_ROOT is loaded within 5 s" 1 "$((swapped > 0))"
check "the swapped tree no longer has bob's file" 200 "$(json bob)"
check "bob has no limit now" 0 "$(grep -c requestsPerUnit "$tmp/body")"

stop
check "stops on SIGTERM with status 0" 0 "$STATUS"

# --- Refusals: variables whose being ignored would change decisions.
refuse() {  # refuse NAME VAR=VALUE...: must exit non-zero, naming the variable
  local name=$1 variable=${2%%=*}
  start_env "$name" "${deployment[@]}" "${@:2}"
  local exited=1
  kill -0 "$PID" 2>/dev/null && exited=0
  if ((exited == 0)); then stop; fi
  wait "$PID" 2>/dev/null
  check "$variable=${2#*=} refuses to start" 1 "$exited"
  check_contains "$variable=${2#*=} is named as an error" "error: $variable:" "$(cat "$tmp/$name.err")"
}
refuse memcache BACKEND_TYPE=memcache
refuse persecond REDIS_PERSECOND=true
refuse stop_increment STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true
refuse redis_type REDIS_TYPE=twemproxy
# Sentinel's REDIS_URL is MASTER_NAME,host:port,...: one address alone is refused.
refuse sentinel_url REDIS_URL=127.0.0.1:6379 REDIS_TYPE=sentinel
refuse unix REDIS_SOCKET_TYPE=unix

# --- --envoy-env reads nothing else: --config is refused with it.
"$sluice" serve --envoy-env --config "$tmp" >"$tmp/both.out" 2>&1
check "--envoy-env with --config is a usage error" 1 "$(( $? != 0 ))"

finish
