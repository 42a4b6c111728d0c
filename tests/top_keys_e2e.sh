#!/usr/bin/env bash
# End-to-end test of GET /v1/top (docs/operations.md, "Who is being limited"): `sluice serve`,
# requests through /v1/check and forward-auth for a flooding key and a quiet one, then the admin
# API's answer: the flooding key first by denials, both by decisions, with their limit's name;
# each row carries its limit's current state; the admin API's own looks are not counted; bad
# parameters are a 400 naming them, an unknown domain an empty list, a POST a 405, and
# `--top-keys 0` turns the endpoint off (404).
# Usage: SLUICE=path/to/sluice tests/top_keys_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl python3

mkdir -p "$tmp/rules"
cat >"$tmp/rules/api.yaml" <<'YAML'
domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: hour, requests_per_unit: 3}
http:
  routes:
    - match: {prefix: /}
      rate_limits:
        - actions:
            - request_headers: {header_name: X-User, descriptor_key: user}
YAML

# check USER: one /v1/check of the user's key.
check_user() {
  curl -s -o /dev/null -m 5 -H 'content-type: application/json' \
    -d "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"$1\"}]}]}" \
    "http://$DATA/v1/check"
}

# rows JSON: the answer's keys as "limit key count error" lines, in order.
rows() {
  python3 -c 'import json, sys
for r in json.load(sys.stdin)["keys"]: print(r["limit"], r["key"], r["count"], r["error"])' <<<"$1"
}

# Every decision recorded (--top-keys-sample 1), so that the counts are exact.
if ! start top --config "$tmp/rules" --top-keys-sample 1; then
  fail_setup "sluice serve did not start: $(cat "$tmp/top.err")"
fi
# The limit's window is an epoch-aligned hour: the requests below must not straddle its end.
clear_of_hour_end 20
for _ in $(seq 10); do check_user mallory; done
# Forward-auth decides through the same engine: two more for mallory, one for alice.
curl -s -o /dev/null -m 5 -H 'X-User: mallory' "http://$DATA/v1/auth/x"
curl -s -o /dev/null -m 5 -H 'X-User: mallory' "http://$DATA/v1/auth/x"
check_user alice

# (Windows of 5 minutes and more: the requests above may straddle a minute's end.)
out=$(curl -s -m 5 "http://$ADMIN/v1/top?domain=api&window=5m")
check "by denials (the default): the flooding key alone, 9 of its 12 denied" \
  "per-user user=mallory 9 0" "$(rows "$out")"
check_contains "the answer names its domain, order and window" \
  '{"domain":"api","by":"denied","window":"5m","keys":[' "$out"
out=$(curl -s -m 5 "http://$ADMIN/v1/top?domain=api&by=requests&window=15m&limit=5")
check "by decisions: both keys, the busiest first" \
  "$(printf 'per-user user=mallory 12 0\nper-user user=alice 1 0')" "$(rows "$out")"
# Each row comes with its limit's current state (read as GET /v1/limits reads it): mallory's 3
# an hour are spent, alice has 2 left.
states=$(python3 -c 'import json, sys
for r in json.load(sys.stdin)["keys"]:
    s = r["state"]
    print(r["key"], s["limit"], s["remaining"], 0 < s["reset_after_ms"] <= 3600000)' <<<"$out")
check "each row's state: limit, remaining, time to reset" \
  "$(printf 'user=mallory 3 0 True\nuser=alice 3 2 True')" "$states"
# Neither those looks nor GET /v1/limits' count as decisions.
curl -s -o /dev/null -m 5 "http://$ADMIN/v1/limits?domain=api&descriptors=user=alice"
out=$(curl -s -m 5 "http://$ADMIN/v1/top?domain=api&by=requests&window=5m&limit=1")
check "limit=1: one row; the admin API's looks were not counted" "per-user user=mallory 12 0" \
  "$(rows "$out")"
out=$(curl -s -m 5 "http://$ADMIN/v1/top?domain=api&by=requests&window=5m")
check "the admin API's looks were not counted (alice)" \
  "$(printf 'per-user user=mallory 12 0\nper-user user=alice 1 0')" "$(rows "$out")"
out=$(curl -s -m 5 "http://$ADMIN/v1/top?domain=nowhere")
check "an unknown domain: no keys" "" "$(rows "$out")"

for query in "" "domain=api&by=cost" "domain=api&window=2m" "domain=api&limit=0" \
  "domain=api&limit=x"; do
  code=$(curl -s -o "$tmp/bad" -w '%{http_code}' -m 5 "http://$ADMIN/v1/top?$query")
  check "?$query: 400" 400 "$code"
  check_contains "?$query: the reason names the parameters" "window=1m|5m|15m" "$(cat "$tmp/bad")"
done
check "POST: 405" 405 "$(curl -s -o /dev/null -w '%{http_code}' -m 5 -X POST \
  "http://$ADMIN/v1/top?domain=api")"
check "not on the data plane" 404 "$(curl -s -o /dev/null -w '%{http_code}' -m 5 \
  "http://$DATA/v1/top?domain=api")"
stop

if ! start off --config "$tmp/rules" --top-keys 0; then
  fail_setup "sluice serve --top-keys 0 did not start: $(cat "$tmp/off.err")"
fi
check_user mallory
code=$(curl -s -o "$tmp/off" -w '%{http_code}' -m 5 "http://$ADMIN/v1/top?domain=api")
check "--top-keys 0: 404" 404 "$code"
check_contains "--top-keys 0: saying it is off" "top keys are off" "$(cat "$tmp/off")"
stop

finish
