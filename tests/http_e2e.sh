#!/usr/bin/env bash
# End-to-end tests of `sluice serve` over real HTTP (curl and raw sockets) on loopback ports.
# Usage: SLUICE=path/to/sluice tests/http_e2e.sh tests/http
set -u
fixtures=$1
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl

post() { curl -s -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' -X POST --data-binary "$2" "http://$DATA$1"; }

mkdir -p "$tmp/rules"
cp "$fixtures/api.yaml" "$tmp/rules/"
cat >"$tmp/sluice.yaml" <<YAML
rules: rules
http: {header_timeout: 1s, idle_timeout: 2s, max_header_bytes: 4096, max_body_bytes: 65536}
YAML

start main --config "$tmp/sluice.yaml"

# --- admin basics
check "healthz" 200 "$(curl -s -o /dev/null -w '%{http_code}' "http://$ADMIN/healthz")"
check "readyz" 200 "$(curl -s -o /dev/null -w '%{http_code}' "http://$ADMIN/readyz")"
check "healthcheck (envoyproxy/ratelimit compatible)" "OK" "$(curl -s "http://$DATA/healthcheck")"
rules=$(curl -s "http://$ADMIN/v1/rules")
check_contains "rules lists the domain" '"name":"api"' "$rules"
version1=$(sed 's/.*"version":"\([0-9a-f]*\)".*/\1/' <<<"$rules")

# --- /v1/check: allow, then deny with every header
req='{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}'
check "check 1 allowed" 200 "$(post /v1/check "$req")"
check "X-RateLimit-Limit" 2 "$(header X-RateLimit-Limit)"
check "X-RateLimit-Remaining after 1" 1 "$(header X-RateLimit-Remaining)"
check "check 2 allowed" 200 "$(post /v1/check "$req")"
check "check 3 denied" 429 "$(post /v1/check "$req")"
check "Retry-After on 429 (5 s, rounded up)" 5 "$(header Retry-After)"
check "X-RateLimit-Remaining on 429" 0 "$(header X-RateLimit-Remaining)"
check_contains "RateLimit-Policy names the limit" '"per_user"' "$(header RateLimit-Policy)"
check_contains "RateLimit field" '"per_user";r=0' "$(header RateLimit)"
check_contains "body says denied" '"allowed":false' "$(cat "$tmp/body")"
check "another user is independent" 200 "$(post /v1/check '{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u2"}]}]}')"

# --- inspect and reset a key through the admin API
limits_url="http://$ADMIN/v1/limits?domain=api&descriptors=user%3Du1"
check_contains "inspect shows the exhausted key" '"remaining":0' "$(curl -s "$limits_url")"
check_contains "inspecting consumed nothing" '"remaining":0' "$(curl -s "$limits_url")"
check "check still denied after inspecting" 429 "$(post /v1/check "$req")"
check_contains "DELETE forgets the key" '"reset":1' "$(curl -s -X DELETE "$limits_url")"
check "allowed again after the reset" 200 "$(post /v1/check "$req")"
check "inspect without descriptors -> 400" 400 "$(curl -s -o /dev/null -w '%{http_code}' "http://$ADMIN/v1/limits?domain=api")"

# --- all or nothing across two limits: 3/day and 5/s on a tenant; a cost-2 request against
# 1 left is denied and consumes nothing
treq() { echo "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"tenant\",\"value\":\"t1\"}]}],\"cost\":$1}"; }
check "tenant cost 2 allowed" 200 "$(post /v1/check "$(treq 2)")"
check "tenant cost 2 denied (1 left)" 429 "$(post /v1/check "$(treq 2)")"
check "remaining 1 reported on the deny" 1 "$(header X-RateLimit-Remaining)"
check "tenant cost 1 allowed (nothing was consumed)" 200 "$(post /v1/check "$(treq 1)")"

# --- envoyproxy/ratelimit's /json endpoint (proto3 JSON), on a fresh user
jreq='{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"j1"}]}]}'
check "/json allowed" 200 "$(post /json "$jreq")"
check_contains "/json body" '"overallCode":"OK"' "$(cat "$tmp/body")"
post /json "$jreq" >/dev/null
check "/json over limit" 429 "$(post /json "$jreq")"
check_contains "/json OVER_LIMIT body" '"overallCode":"OVER_LIMIT"' "$(cat "$tmp/body")"
check "/json unknown field -> 400" 400 "$(post /json '{"domain":"api","bogus":1,"descriptors":[{"entries":[{"key":"user","value":"j2"}]}]}')"

# --- bad requests
check "bad JSON -> 400" 400 "$(post /v1/check '{"domain":')"
check_contains "bad JSON has a JSON error body" '"error"' "$(cat "$tmp/body")"
check "missing domain -> 400" 400 "$(post /v1/check '{"descriptors":[]}')"
check "unknown domain -> 400" 400 "$(post /v1/check '{"domain":"nope","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}')"
check "GET /v1/check -> 405" 405 "$(curl -s -o /dev/null -w '%{http_code}' "http://$DATA/v1/check")"
check "unknown path -> 404" 404 "$(curl -s -o /dev/null -w '%{http_code}' "http://$DATA/nope")"
unicode='{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"ユーザー😀"}]}]}'
check "unicode key allowed" 200 "$(post /v1/check "$unicode")"
long=$(head -c 4096 /dev/zero | tr '\0' 'k')
check "4 KiB key allowed" 200 "$(post /v1/check "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"$long\"}]}]}")"
check "4 KiB + 1 key -> 400" 400 "$(post /v1/check "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"${long}k\"}]}]}")"

# --- robustness: header block limit, body limit, malformed request, pipelining, timeouts
big=$(head -c 5000 /dev/zero | tr '\0' 'h')
check "header block too large -> 431" 431 "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Big: $big" "http://$DATA/healthcheck")"
check "body too large -> 413" 413 "$(head -c 70000 /dev/zero | curl -s -o /dev/null -w '%{http_code}' -X POST --data-binary @- "http://$DATA/v1/check")"
host=${DATA%:*} port=${DATA##*:}
raw() {  # raw BYTES: sends them on a fresh connection, prints what comes back (bounded)
  exec 3<>"/dev/tcp/$host/$port"
  printf '%b' "$1" >&3
  timeout 3 cat <&3
  exec 3<&-
}
check_contains "malformed request -> 400" "400 Bad Request" "$(raw 'GARBAGE\r\n\r\n')"
pipelined=$(raw 'GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\nGET /healthcheck HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
check "two pipelined requests, two responses" 2 "$(grep -o 'HTTP/1.1 200' <<<"$pipelined" | wc -l)"
start_s=$(date +%s)
raw 'GET /healthcheck HTTP/1.1\r\nHost: x\r\n' >/dev/null  # never finishes its headers
check "slow headers are cut off by the header timeout" 1 "$(( $(date +%s) - start_s <= 2 ))"

# --- Prometheus metrics: promtool-clean, and counting what happened above
metrics "$ADMIN" >"$tmp/metrics"
check "promtool check metrics (exit 0, no lint output)" "0:" "$(promtool check metrics <"$tmp/metrics" >"$tmp/lint" 2>&1; echo "$?:$(cat "$tmp/lint")")"
check_contains "decisions counted by domain/limit/decision" 'sluice_decisions_total{domain="api",limit="per_user",decision="denied"}' "$(cat "$tmp/metrics")"
check_contains "responses counted by status" 'sluice_http_requests_total{code="429"}' "$(cat "$tmp/metrics")"
check_contains "decision latency histogram" 'sluice_decision_duration_seconds_bucket' "$(cat "$tmp/metrics")"
denied=$(metric "$ADMIN" 'sluice_decisions_total{domain="api",limit="per_user",decision="denied"}')
check "the denials' reason: over_limit, as many as denied ($denied)" "$denied" \
  "$(metric "$ADMIN" 'sluice_decision_reasons_total{domain="api",limit="per_user",reason="over_limit"}')"
check "the configured limit's gauge: 2 requests" 2 "$(metric "$ADMIN" 'sluice_limit{domain="api",limit="per_user"}')"
check "and its window: 10 s" 10 "$(metric "$ADMIN" 'sluice_limit_window_seconds{domain="api",limit="per_user"}')"

# --- reload through the admin API while serving
sed -i 's/requests: 2, window: 10s/requests: 7, window: 10s/' "$tmp/rules/api.yaml"
reload=$(curl -s -X POST "http://$ADMIN/v1/reload")
check_contains "reload applied" '"applied":true' "$reload"
post /v1/check '{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u9"}]}]}' >/dev/null
check "new limit in force" 7 "$(header X-RateLimit-Limit)"
check "the limit's gauge follows the reload" 7 "$(metric "$ADMIN" 'sluice_limit{domain="api",limit="per_user"}')"
echo 'domain: api
descriptors: [' >"$tmp/rules/api.yaml"
code=$(curl -s -o "$tmp/reload" -w '%{http_code}' -X POST "http://$ADMIN/v1/reload")
check "invalid reload -> 422" 422 "$code"
check_contains "invalid reload names FILE:LINE:COL" "api.yaml:" "$(cat "$tmp/reload")"
post /v1/check '{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u10"}]}]}' >/dev/null
check "old config kept" 7 "$(header X-RateLimit-Limit)"
# (The file watcher may also have tried the broken file, before or after the POST: 1 or 2.)
failures=$(curl -s "http://$ADMIN/v1/rules" | sed -n 's/.*"reload_failures":\([0-9]*\).*/\1/p')
check "failure counted (once or twice)" yes "$([[ $failures == 1 || $failures == 2 ]] && echo yes || echo "no: '$failures'")"
check "version moved on once" 1 "$([[ $(curl -s "http://$ADMIN/v1/rules") != *"$version1"* ]] && echo 1 || echo 0)"

# --- graceful shutdown
stop
check "SIGTERM exits 0" 0 "$STATUS"

# --- admin token
echo "s3cret" >"$tmp/token"
mkdir -p "$tmp/rules2" && cp "$fixtures/api.yaml" "$tmp/rules2/"
printf 'rules: rules2\nadmin: {token_file: %s}\n' "$tmp/token" >"$tmp/auth.yaml"
start auth --config "$tmp/auth.yaml"
check "reload without token -> 401" 401 "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://$ADMIN/v1/reload")"
check "DELETE /v1/limits without token -> 401" 401 "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "http://$ADMIN/v1/limits?domain=api&descriptors=user=u1")"
check "reload with token -> 200" 200 "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer s3cret' -X POST "http://$ADMIN/v1/reload")"
check "the Bearer scheme is case-insensitive (RFC 9110 §11.1) -> 200" 200 "$(curl -s -o /dev/null -w '%{http_code}' -H 'authorization: bearer s3cret' -X POST "http://$ADMIN/v1/reload")"
check "a wrong token -> 401" 401 "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer s3cre' -X POST "http://$ADMIN/v1/reload")"
check "two Authorization fields (the right one first) -> 400" 400 "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer s3cret' -H 'Authorization: Bearer other' -X POST "http://$ADMIN/v1/reload")"
# (on this instance: its headers may take 16 KiB, room for a URL past http.max_key_bytes)
long_value=$(head -c 4097 /dev/zero | tr '\0' v)
check "inspect a value of 4097 bytes (over http.max_key_bytes) -> 400" 400 "$(curl -s -o /dev/null -w '%{http_code}' "http://$ADMIN/v1/limits?domain=api&descriptors=user%3D$long_value")"
check "DELETE a value of 4097 bytes -> 400" 400 "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer s3cret' -X DELETE "http://$ADMIN/v1/limits?domain=api&descriptors=user%3D$long_value")"
check_contains "inspect a value of 4096 bytes works" '"remaining"' "$(curl -s "http://$ADMIN/v1/limits?domain=api&descriptors=user%3D${long_value:1}")"
stop
check "SIGTERM exits 0 (auth)" 0 "$STATUS"

# --- the `headers:` setting chooses the families of rate-limit fields (Retry-After always on 429)
styles_req='{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"styles"}]}]}'
for styles in x_ratelimit ietf none; do
  cat >"$tmp/styles-$styles.yaml" <<YAML
rules: rules2
headers: [$styles]
YAML
  start "styles-$styles" --config "$tmp/styles-$styles.yaml" --threads 1  # one thread: one counter cache
  post /v1/check "$styles_req" >/dev/null
  post /v1/check "$styles_req" >/dev/null
  check "headers: [$styles]: third check denied" 429 "$(post /v1/check "$styles_req")"
  present() { if [ -n "$(header "$1")" ]; then echo yes; else echo no; fi; }
  x=no; ietf=no
  [ "$styles" = x_ratelimit ] && x=yes
  [ "$styles" = ietf ] && ietf=yes
  check "headers: [$styles]: X-RateLimit-Limit sent" "$x" "$(present X-RateLimit-Limit)"
  check "headers: [$styles]: X-RateLimit-Remaining sent" "$x" "$(present X-RateLimit-Remaining)"
  check "headers: [$styles]: RateLimit-Policy sent" "$ietf" "$(present RateLimit-Policy)"
  check "headers: [$styles]: RateLimit sent" "$ietf" "$(present RateLimit)"
  check "headers: [$styles]: Retry-After sent" 5 "$(header Retry-After)"
  metrics=$(metrics "$ADMIN")
  check_contains "headers: [$styles]: 2 allowed decisions counted" \
    'sluice_decisions_total{domain="api",limit="per_user",decision="allowed"} 2' "$metrics"
  check_contains "headers: [$styles]: 1 denied decision counted" \
    'sluice_decisions_total{domain="api",limit="per_user",decision="denied"} 1' "$metrics"
  stop
done

# --- refusing a non-loopback admin without a token
"$sluice" serve --config "$tmp/rules2" --listen 127.0.0.1:0 --admin 0.0.0.0:0 >"$tmp/refuse.out" 2>&1
check "non-loopback admin without token refused" 1 "$?"
check_contains "refusal explains itself" "without a token" "$(cat "$tmp/refuse.out")"

finish
