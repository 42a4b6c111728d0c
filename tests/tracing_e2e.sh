#!/usr/bin/env bash
# End-to-end test of OpenTelemetry traces (docs/operations.md, "Traces"): `sluice serve` with
# `tracing:` exports to tests/otlp_collector.cc (OTLP over HTTP/protobuf, then gRPC), which writes
# every span it receives as a JSON line. Requests sent with a W3C traceparent, as Envoy sends it:
#   - /v1/check, forward-auth, the reverse proxy (the upstream gets the trace on, as a child of
#     sluice's upstream span) and gRPC ShouldRateLimit (the trace context in its metadata): each
#     a span of the caller's trace with the caller's span as parent, the decision's span below it
#     (domain, limits, verdict, the denying limit); (the memory store answers inline: no backend
#     call's span; the engine's unit tests and redis_tracing's cover those);
#   - sampling is parent-based: at sampling_rate 0 only a caller's sampled trace is recorded, and
#     an unsampled one is not; keys stay out of the spans unless record_keys;
#   - a collector that is down, or slow, never holds a decision up: the queue stays bounded, its
#     drops and failed batches are counted in sluice_trace_spans_total.
# Usage: SLUICE=... UPSTREAM=... COLLECTOR=... tests/tracing_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}
upstream=${UPSTREAM:?set UPSTREAM to the upstream_server binary}
collector=${COLLECTOR:?set COLLECTOR to the otlp_collector binary}
fixtures=$(cd "$(dirname "$0")/grpc" && pwd)

source "$(dirname "$0")/lib.sh"
need_tools curl python3 node redis-server

# start_collector NAME [ARGS]: the collector, output in otlp-NAME.out; sets CPID, CGRPC and CHTTP.
start_collector() {
  local out=$tmp/otlp-$1.out _
  shift
  "$collector" "$@" >"$out" 2>"$tmp/collector.err" &
  CPID=$!
  pids+=("$CPID")
  for _ in $(seq 100); do
    grep -q '^otlp_collector: grpc' "$out" 2>/dev/null && break
    sleep 0.05
  done
  CGRPC=$(sed -n 's/^otlp_collector: grpc \([^ ]*\) http .*/\1/p' "$out")
  CHTTP=$(sed -n 's/^otlp_collector: grpc [^ ]* http \(.*\)/\1/p' "$out")
  [[ -n $CHTTP ]]
}

# wait_spans FILE TRACE N: waits (10 s) until FILE holds N spans of trace TRACE.
wait_spans() {
  local _
  for _ in $(seq 200); do
    (($(grep -c "\"trace_id\":\"$2\"" "$1" 2>/dev/null) >= $3)) && return 0
    sleep 0.05
  done
  return 1
}

# tree FILE TRACE: the trace's spans as "NAME <- PARENT_NAME kind=K" lines, sorted (by code
# point: uppercase first), where the
# parent is named by its span's name, or "caller" when it is the caller's (CALLER) span.
tree() {
  python3 - "$1" "$2" "${CALLER:-}" <<'PY'
import json, sys
spans = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
spans = [s for s in spans if s['trace_id'] == sys.argv[2]]
names = {s['span_id']: s['name'] for s in spans}
out = []
for s in spans:
    parent = 'caller' if s['parent'] == sys.argv[3] else names.get(s['parent'], '?' + s['parent'])
    out.append(f"{s['name']} <- {parent} kind={s['kind']}")
print('\n'.join(sorted(out)))
PY
}

# attr FILE TRACE NAME KEY: attribute KEY of the span NAME of trace TRACE, as JSON.
attr() {
  python3 - "$@" <<'PY'
import json, sys
f, trace, name, key = sys.argv[1:]
for l in open(f):
    if not l.startswith('{'): continue
    s = json.loads(l)
    if s['trace_id'] == trace and s['name'] == name:
        print(json.dumps(s['attrs'].get(key, s.get(key)), separators=(',', ':'))); break
PY
}


mkdir -p "$tmp/rules"
start_upstream || fail_setup "the test upstream did not start"
cat >"$tmp/rules/api.yaml" <<YAML
domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: hour, requests_per_unit: 2}
http:
  upstream: http://$UP
  routes:
    - match: {prefix: /}
      rate_limits:
        - actions:
            - request_headers: {header_name: X-User, descriptor_key: user}
YAML

# ---------------------------------------------------------------- over HTTP/protobuf
start_collector http || fail_setup "the collector did not start: $(cat "$tmp/collector.err")"
cat >"$tmp/sluice.yaml" <<YAML
rules: ./rules
tracing:
  enabled: true
  protocol: http
  endpoint: http://$CHTTP
  sampling_rate: 0        # only what a caller sampled
  export_interval: 100ms
YAML
clear_of_hour_end 30
start http --config "$tmp/sluice.yaml" || fail_setup "sluice did not start: $(cat "$tmp/http.err")"
spans=$tmp/otlp-http.out

T1=4bf92f3577b34da6a3ce929d0e0e4736
CALLER=00f067aa0ba902b7
curl -s -o /dev/null -m 5 -H "traceparent: 00-$T1-$CALLER-01" -H 'tracestate: congo=t61rcWkgMzE' \
  -H 'content-type: application/json' -d "$(check_body api user alice)" "http://$DATA/v1/check"
wait_spans "$spans" "$T1" 2 || echo "(the /v1/check spans did not come)"
check "/v1/check: the request's span of the caller's trace, the decision below it" \
  "POST /v1/check <- caller kind=2
decide <- POST /v1/check kind=1" "$(tree "$spans" "$T1")"
check "/v1/check: domain on the decision" '"api"' "$(attr "$spans" "$T1" decide sluice.domain)"
check "/v1/check: the limits that applied" '["per-user"]' "$(attr "$spans" "$T1" decide sluice.limits)"
check "/v1/check: the verdict" '"allowed"' "$(attr "$spans" "$T1" decide sluice.verdict)"
check "/v1/check: the answer's status" 200 \
  "$(attr "$spans" "$T1" 'POST /v1/check' http.response.status_code)"
check "/v1/check: the caller's tracestate kept" '"congo=t61rcWkgMzE"' \
  "$(attr "$spans" "$T1" 'POST /v1/check' trace_state)"
check "the resource names the service" '"sluice"' "$(attr "$spans" "$T1" decide service)"

# Not sampled by its caller, or no caller at all at rate 0: no span.
T_OFF=11111111111111111111111111111111
curl -s -o /dev/null -m 5 -H "traceparent: 00-$T_OFF-$CALLER-00" \
  -H 'content-type: application/json' -d "$(check_body api user carol)" "http://$DATA/v1/check"
curl -s -o /dev/null -m 5 -H 'content-type: application/json' -d "$(check_body api user carol)" \
  "http://$DATA/v1/check"

# Forward-auth, and a denial: alice's third request this hour.
T2=22222222222222222222222222222222
curl -s -o /dev/null -m 5 -H "traceparent: 00-$T2-$CALLER-01" -H 'X-User: alice' \
  "http://$DATA/v1/auth/orders"
T3=33333333333333333333333333333333
status=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H "traceparent: 00-$T3-$CALLER-01" \
  -H 'X-User: alice' "http://$DATA/v1/auth/orders")
check "forward-auth: alice's third request denied" 429 "$status"
wait_spans "$spans" "$T3" 2 || echo "(the forward-auth spans did not come)"
check "forward-auth: the request's span and the decision" \
  "GET /v1/auth <- caller kind=2
decide <- GET /v1/auth kind=1" "$(tree "$spans" "$T2")"
check "a denial: the verdict" '"denied"' "$(attr "$spans" "$T3" decide sluice.verdict)"
check "a denial: the limit that denied" '"per-user"' "$(attr "$spans" "$T3" decide sluice.denied_by)"
check "a denial: the answer's status" 429 "$(attr "$spans" "$T3" 'GET /v1/auth' http.response.status_code)"

# The reverse proxy: the upstream gets the trace on, with sluice's upstream span as its parent.
T4=44444444444444444444444444444444
# (Flags 09: sampled, and a bit version 00 reserves, which is not passed on; a tracestate that is
# not one is not either.)
echoed=$(curl -s -m 5 -H "traceparent: 00-$T4-$CALLER-09" -H 'tracestate: BAD KEY=1' \
  -H 'X-User: bob' "http://$DATA/orders/7")
wait_spans "$spans" "$T4" 3 || echo "(the proxy's spans did not come)"
check "proxy: the request's span, the decision and the upstream call" \
  "GET <- GET kind=3
GET <- caller kind=2
decide <- GET kind=1" "$(tree "$spans" "$T4")"
upstream_span=$(python3 - "$spans" "$T4" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        s = json.loads(l)
        if s['trace_id'] == sys.argv[2] and s['kind'] == 3: print(s['span_id'])
PY
)
check_contains "proxy: the upstream's traceparent names sluice's upstream span" \
  "traceparent: 00-$T4-$upstream_span-01" "$echoed"
check "proxy: an invalid tracestate is not passed upstream" 0 "$(grep -ci '^tracestate:' <<<"$echoed")"
check "proxy: the upstream span's status" 200 \
  "$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        s = json.loads(l)
        if s["trace_id"] == sys.argv[2] and s["kind"] == 3: print(s["attrs"]["http.response.status_code"])' "$spans" "$T4")"
# A proxied path may name a customer: the span is named by the method, the path is not kept.
check "proxy: no path in the spans (record_keys is off)" 0 "$(grep -c '/orders/7' "$spans")"
check "no key in the spans (record_keys is off)" 0 "$(grep -c -e alice -e bob "$spans")"
# (The one without a caller would be a trace of its own: the exact count of spans ended, below,
# says there is none.)
check "an unsampled caller's request: no span" 0 "$(grep -c -e "$T_OFF" "$spans")"
check "every span is of a sampled trace" 0 "$(grep '^{' "$spans" | grep -vc -e "$T1" -e "$T2" -e "$T3" -e "$T4")"
m=$(metrics "$ADMIN")
check "sluice_trace_spans_total: 9 ended, 9 exported, none dropped or failed" "9 9 0 0" \
  "$(for o in ended exported dropped failed; do
       grep "^sluice_trace_spans_total{outcome=\"$o\"}" <<<"$m" | awk '{printf "%s ", $2}'
     done | sed 's/ $//')"
stop "$PID"
check "serve stops cleanly with tracing on" 0 "$STATUS"

# ---------------------------------------------------------------- over gRPC, with the keys
need_grpc_client "$fixtures"
cat >"$tmp/sluice.yaml" <<YAML
rules: ./rules
tracing:
  enabled: true
  protocol: grpc
  endpoint: $CGRPC
  sampling_rate: 1
  record_keys: true
  export_interval: 100ms
  service_name: sluice-rls
YAML
start grpc --config "$tmp/sluice.yaml" --grpc 127.0.0.1:0 ||
  fail_setup "sluice did not start: $(cat "$tmp/grpc.err")"
T5=55555555555555555555555555555555
answer=$(TRACEPARENT="00-$T5-$CALLER-01" timeout 20 node "$fixtures/should_rate_limit.js" "$GRPC" \
  api user dave 2>&1)
check "gRPC: the call is answered" "OK 2/HOUR" "$answer"
wait_spans "$spans" "$T5" 2 || echo "(the gRPC spans did not come)"
check "gRPC: the call's span of Envoy's trace and the decision" \
  "decide <- envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit kind=1
envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit <- caller kind=2" "$(tree "$spans" "$T5")"
check "gRPC: exported over gRPC" '"grpc"' "$(attr "$spans" "$T5" decide via)"
check "gRPC: the status code" 0 \
  "$(attr "$spans" "$T5" envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit rpc.grpc.status_code)"
check "gRPC: service_name" '"sluice-rls"' "$(attr "$spans" "$T5" decide service)"
check "record_keys: the descriptors on the decision" '["user=dave"]' \
  "$(attr "$spans" "$T5" decide sluice.descriptors)"
# At rate 1, a request without a caller starts a trace of its own (a root span).
curl -s -o /dev/null -m 5 -H 'content-type: application/json' -d "$(check_body api user erin)" \
  "http://$DATA/v1/check"
for _ in $(seq 100); do grep -q 'user=erin' "$spans" && break; sleep 0.05; done
root_parent=$(python3 - "$spans" <<'PY'
import json, sys
spans = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
trace = next((s['trace_id'] for s in spans if 'user=erin' in s['attrs'].get('sluice.descriptors', [])), '')
print(','.join(s['parent'] or 'root' for s in spans if s['trace_id'] == trace and s['kind'] == 2))
PY
)
check "rate 1: a request without a caller is the root of a new trace" root "$root_parent"
stop "$PID"

# ---------------------------------------------------------------- on Redis: its round trips
start_redis_on || fail_setup "redis-server did not start"
cat >"$tmp/rules/leased.yaml" <<'YAML'
domain: leased
consistency: leased
descriptors:
  - key: user
    rate_limit: {algorithm: token_bucket, requests: 1000, window: 1s}
YAML
# A deadline of 500 ms: a round trip on a loaded machine takes more than the default 10 ms, and
# the "worked" checks need one that worked (the STOPped Redis below times out all the same).
cat >"$tmp/sluice.yaml" <<YAML
rules: ./rules
tracing: {enabled: true, endpoint: "http://$CHTTP", sampling_rate: 0, export_interval: 100ms}
redis: {timeout: 500ms}
YAML
start redis --config "$tmp/sluice.yaml" --redis "redis://127.0.0.1:$RPORT" ||
  fail_setup "sluice did not start: $(cat "$tmp/redis.err")"
T6=66666666666666666666666666666666
curl -s -o /dev/null -m 5 -H "traceparent: 00-$T6-$CALLER-01" \
  -H 'content-type: application/json' -d "$(check_body api user frank)" "http://$DATA/v1/check"
wait_spans "$spans" "$T6" 3 || echo "(the Redis spans did not come)"
check "Redis: the round trip is a client span below the decision" \
  "POST /v1/check <- caller kind=2
decide <- POST /v1/check kind=1
redis <- decide kind=3" "$(tree "$spans" "$T6")"
check "Redis: the round trip names its database" '"redis"' "$(attr "$spans" "$T6" redis db.system)"
check "Redis: a round trip that worked is no error" false "$(attr "$spans" "$T6" redis error)"
check "Redis: decided by Redis itself" '"backend"' "$(attr "$spans" "$T6" redis sluice.answered_by)"
# consistency: leased: the first request takes a lease from Redis, a later one spends it here.
# (One curl on one connection: a token bucket's lease lives 100 ms, lease_interval.)
leased_args=()
for i in 1 2 3; do
  ((i == 1)) || leased_args+=(--next)
  leased_args+=(-s -o /dev/null -m 5 -H "traceparent: 00-8888888888888888888888888888888$i-$CALLER-01"
    -H 'content-type: application/json' -d "$(check_body leased user g)" "http://$DATA/v1/check")
done
curl "${leased_args[@]}"
wait_spans "$spans" 88888888888888888888888888888883 3 || echo "(the leased spans did not come)"
check "leased: a request spent from a lease says so" '"lease"' \
  "$(attr "$spans" 88888888888888888888888888888883 redis sluice.answered_by)"
kill -STOP "$RPID"  # Redis stops answering: the round trip times out
T7=77777777777777777777777777777777
curl -s -o /dev/null -m 5 -H "traceparent: 00-$T7-$CALLER-01" \
  -H 'content-type: application/json' -d "$(check_body api user frank)" "http://$DATA/v1/check"
kill -CONT "$RPID"
wait_spans "$spans" "$T7" 3 || echo "(the failed round trip's spans did not come)"
check "Redis down: the round trip's span is an error" true "$(attr "$spans" "$T7" redis error)"
check "Redis down: the decision says how the failure policy answered" '"failed_open"' \
  "$(attr "$spans" "$T7" decide sluice.backend_state)"
stop "$PID"
rm "$tmp/rules/leased.yaml"

# ---------------------------------------------------------------- a collector down, or slow
free_port
cat >"$tmp/sluice.yaml" <<YAML
rules: ./rules
tracing: {enabled: true, endpoint: "http://127.0.0.1:$FREE_PORT", queue_size: 16,
          max_batch: 4, export_interval: 50ms, export_timeout: 200ms}
YAML
start down --config "$tmp/sluice.yaml" || fail_setup "sluice did not start: $(cat "$tmp/down.err")"
# 300 checks of 50 users, by one curl on one connection (a process per request took seconds).
requests=()
for i in $(seq 300); do
  ((i == 1)) || requests+=(--next)
  requests+=(-s -o /dev/null -w '%{http_code}\n' -m 5 -H 'content-type: application/json'
    -d "$(check_body api user "u$((i % 50))")"
    "http://$DATA/v1/check")
done
answered=$(curl "${requests[@]}" | grep -cE '^(200|429)$')
check "collector down: every decision answered" 300 "$answered"
ended=$(metric "$ADMIN" 'sluice_trace_spans_total{outcome="ended"}')
lost=$(python3 -c "print(int($(metric "$ADMIN" 'sluice_trace_spans_total{outcome="dropped"}') + \
  $(metric "$ADMIN" 'sluice_trace_spans_total{outcome="failed"}')))")
check "collector down: 600 spans ended (two a request)" 600 "${ended%.*}"
check "collector down: none exported" 0 \
  "$(metric "$ADMIN" 'sluice_trace_spans_total{outcome="exported"}')"
check "collector down: what was not queued is counted lost (dropped or failed)" 1 \
  "$(python3 -c "print(int($lost >= 600 - 16))")"
stop "$PID"
check "collector down: serve stops within its export timeouts" 0 "$STATUS"

start_collector slow --delay-ms 3000 || fail_setup "the slow collector did not start"
cat >"$tmp/sluice.yaml" <<YAML
rules: ./rules
tracing: {enabled: true, endpoint: "http://$CHTTP", export_interval: 50ms, export_timeout: 10s}
YAML
start slow --config "$tmp/sluice.yaml" || fail_setup "sluice did not start: $(cat "$tmp/slow.err")"
for i in 1 2 3; do
  curl -s -o /dev/null -m 5 -H 'content-type: application/json' -d "$(check_body api user "s$i")" \
    "http://$DATA/v1/check"
done
sleep 0.2  # (an export is now held by the collector's delay)
took=$(curl -s -o /dev/null -w '%{time_total}' -m 5 -H 'content-type: application/json' \
  -d "$(check_body api user s9)" "http://$DATA/v1/check")
check "slow collector: a decision is not held by an export in progress (under 2 s of its 3)" 1 \
  "$(python3 -c "print(int($took < 2.0))")"
stop "$PID" 15
check "slow collector: serve still stops cleanly" 0 "$STATUS"

finish
