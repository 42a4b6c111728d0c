#!/usr/bin/env bash
# End-to-end test of costs known after the work (docs/http-api.md, "Costs known later"):
# POST /v1/report, /v1/reserve and /v1/settle on the memory store (one `sluice serve`), then four
# instances sharing one real redis-server, then a real 3-master Redis Cluster, each settling on
# another instance than the one that reserved:
# - a reservation takes its estimate (the request's cost) and refuses what does not fit; a lower
#   settlement gives the difference back, a higher one records the excess past the limit (the
#   next request is refused); a descriptor with a cost of its own is not settled; a reservation
#   is settled once (then 404), and one left to expire keeps its estimate;
# - a report records its cost past the limit and answers 200;
# - 8 clients reserving and settling at once across the instances: what stays counted is exactly
#   the sum of what they settled;
# - bad bodies are 400s naming the fault.
# Fixed windows of an hour, each flow run clear of the hour's end: nothing is forgotten while it
# runs.
# Usage: SLUICE=path/to/sluice tests/costs_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl python3 redis-server redis-cli

mkdir -p "$tmp/rules"
cat >"$tmp/rules/llm.yaml" <<'YAML'
domain: llm
failure_mode: closed
descriptors:
  - key: tokens
    rate_limit: {algorithm: fixed_window, requests: 1000, window: 1h, name: tokens}
  - key: calls
    rate_limit: {algorithm: fixed_window, requests: 100, window: 1h, name: calls}
  - key: budget
    rate_limit: {algorithm: fixed_window, requests: 1000000, window: 1h, name: budget}
YAML
printf 'redis: {timeout: 2s}\n' >"$tmp/rules/sluice.yaml"

# body KEY COST [MORE]: a request's body: tokens=KEY at the request's cost, calls=KEY at a cost of
# its own (1); MORE: more top-level fields ("\"for\":\"1s\"").
body() {
  echo "{\"domain\":\"llm\",\"descriptors\":[{\"entries\":[{\"key\":\"tokens\",\"value\":\"$1\"}]},{\"entries\":[{\"key\":\"calls\",\"value\":\"$1\"}],\"hits_addend\":1}],\"cost\":$2${3:+,$3}}"
}
# post I PATH BODY: POST to instance I; prints the status, keeps the body in $tmp/out and the
# reservation (if any) in $tmp/id.
post() {
  local status
  status=$(curl -s -o "$tmp/out" -D "$tmp/headers" -w '%{http_code}' -m 5 -d "$3" \
    "http://${datas[$1]}/v1/$2")
  sed -n 's/.*"reservation":"\([^"]*\)".*/\1/p' "$tmp/out" >"$tmp/id"
  echo "$status"
}
settle() { post "$1" settle "{\"reservation\":\"$2\",\"cost\":$3}"; }
# left I KEY DESCRIPTOR: what a look (cost 0) at DESCRIPTOR=KEY on instance I says is left.
left() { remaining_of "${datas[$1]}" llm "$3" "$2"; }

# The load: 8 clients, 15 reservations each of 50 on budget=KEY, on instance k, each settled on
# the next instance at a cost from 0 to 120; prints "settled=S errors=E".
load() {
  /usr/bin/python3 - "$1" "${datas[@]}" <<'PY'
import json, random, sys, threading, urllib.request
key, instances = sys.argv[1], sys.argv[2:]
lock = threading.Lock()
state = {"settled": 0, "errors": 0}
def post(i, path, payload):
    req = urllib.request.Request(f"http://{instances[i % len(instances)]}/v1/{path}",
                                 data=json.dumps(payload).encode())
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None
def client(k):
    rng = random.Random(k)
    for n in range(15):
        status, answer = post(k + n, "reserve", {"domain": "llm", "cost": 50, "descriptors": [
            {"entries": [{"key": "budget", "value": key}]}]})
        cost = rng.randint(0, 120)
        if status == 200:
            status, _ = post(k + n + 1, "settle", {"reservation": answer["reservation"], "cost": cost})
        with lock:
            if status == 200: state["settled"] += cost
            else: state["errors"] += 1
threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(f"settled={state['settled']} errors={state['errors']}")
PY
}
field_of() { sed -n "s/.*$1=\([0-9]*\).*/\1/p" <<<"$2"; }

# costs_flow LABEL KEY: the story on the instances in `datas` (KEY: this run's customer).
costs_flow() {
  local label=$1 k=$2 n=${#datas[@]} id out
  clear_of_hour_end 20
  check "$label: a reservation of 800" 200 "$(post 0 reserve "$(body "$k" 800)")"
  id=$(cat "$tmp/id")
  check "$label: ... has an id" yes "$([[ $id =~ ^[0-9a-f]{32}$ ]] && echo yes)"
  check_contains "$label: ... and its life (the default 5 min)" '"expires_in_ms":300000' "$(cat "$tmp/out")"
  check "$label: ... takes its estimate" 200 "$(left $((1 % n)) "$k" tokens)"
  check "$label: 300 more do not fit" 429 "$(post $((1 % n)) reserve "$(body "$k" 300)")"
  check "$label: settled at 150 (on another instance)" '{"reserved":800,"cost":150,"limits":1}' \
    "$([[ $(settle $((1 % n)) "$id" 150) == 200 ]] && cat "$tmp/out")"
  check "$label: ... gives 650 back" 850 "$(left $((2 % n)) "$k" tokens)"
  check "$label: ... but not the call's own count" 99 "$(left $((2 % n)) "$k" calls)"
  check "$label: settled again: 404" 404 "$(settle $((3 % n)) "$id" 10)"
  check_contains "$label: ... saying why" "settled already" "$(cat "$tmp/out")"
  check "$label: a reservation of 100" 200 "$(post $((2 % n)) reserve "$(body "$k" 100)")"
  id=$(cat "$tmp/id")
  check "$label: settled at 1000" 200 "$(settle $((3 % n)) "$id" 1000)"
  check "$label: ... the excess is recorded past the limit" 429 "$(post 0 reserve "$(body "$k" 1)")"
  check "$label: ... nothing left" 0 "$(left 0 "$k" tokens)"

  check "$label: a report of 1200 is never refused" 200 "$(post $((1 % n)) report "$(body "$k-r" 1200)")"
  check_contains "$label: ... it was recorded, past the limit" '"allowed":false' "$(cat "$tmp/out")"
  check_contains "$label: ... (recorded)" '"recorded":true' "$(cat "$tmp/out")"
  check "$label: ... the next request is refused" 429 "$(post $((2 % n)) reserve "$(body "$k-r" 1)")"

  check "$label: a reservation of 500 for 1 s" 200 "$(post 0 reserve "$(body "$k-e" 500 '"for":"1s"')")"
  id=$(cat "$tmp/id")
  check_contains "$label: ... says so" '"expires_in_ms":1000' "$(cat "$tmp/out")"
  sleep 1.3  # its life
  check "$label: ... once expired it is not settled" 404 "$(settle $((1 % n)) "$id" 0)"
  check "$label: ... and keeps its estimate" 500 "$(left $((2 % n)) "$k-e" tokens)"

  out=$(load "$k-load")
  echo "     ($label load: $out)"
  check "$label: 8 clients at once: no errors" 0 "$(field_of errors "$out")"
  check "$label: ... exactly what they settled stays counted" "$((1000000 - $(field_of settled "$out")))" \
    "$(left 0 "$k-load" budget)"
}

# ---------------------------------------------------------------- memory
start m --config "$tmp/rules"
datas=("$DATA")
costs_flow memory acme
check "bad: a settlement without its cost" 400 "$(post 0 settle '{"reservation":"ab"}')"
check_contains "bad: ... saying what to give" "an integer from 0 to 4294967295" "$(cat "$tmp/out")"
check "bad: an unknown field" 400 "$(post 0 settle '{"reservation":"ab","cost":1,"tokens":2}')"
check_contains "bad: ... named" "unknown field 'tokens'" "$(cat "$tmp/out")"
check "bad: for: soon" 400 "$(post 0 reserve "$(body x 1 '"for":"soon"')")"
check_contains "bad: ... named" '"error":"for:' "$(cat "$tmp/out")"
check "bad: for: 2d (longer than a reservation may live)" 400 "$(post 0 reserve "$(body x 1 '"for":"2d"')")"
check "bad: an unknown domain" 400 "$(post 0 report '{"domain":"nope","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}')"
check "bad: a GET" 405 "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://$DATA/v1/settle")"
check "memory: a reservation of no limit" 200 \
  "$(post 0 reserve '{"domain":"llm","descriptors":[{"entries":[{"key":"none","value":"v"}]}]}')"
check_contains "memory: ... keeps nothing to settle" '"reservation":"","expires_in_ms":0' "$(cat "$tmp/out")"
check "memory: ... and settling it changes nothing" '{"reserved":0,"cost":0,"limits":0}' \
  "$([[ $(settle 0 "" 5) == 200 ]] && cat "$tmp/out")"
check "bad: a reservation of cost 0 (a look)" 400 "$(post 0 reserve "$(body x 0)")"
check "bad: for: 10ms (shorter than a reservation may live)" 400 \
  "$(post 0 reserve "$(body x 1 '"for":"10ms"')")"
check "bad: a settlement past 2^32 - 1" 400 "$(post 0 settle '{"reservation":"ab","cost":4294967296}')"
stop
check "memory: stops cleanly" 0 "$STATUS"

# ---------------------------------------------------------------- one Redis, four instances
start_redis_on; rport=$RPORT
start_four r --config "$tmp/rules" --redis "redis://127.0.0.1:$rport"
costs_flow redis globex
post 0 reserve "$(body initech 10)" >/dev/null
check "redis: a reservation is a key with its life" yes \
  "$(ttl=$(redis-cli -p "$rport" pttl "sluice:r:{$(cat "$tmp/id")}"); [[ $ttl -gt 290000 && $ttl -le 300000 ]] && echo yes || echo "no ($ttl)")"
for i in 0 1 2 3; do PID=${spids[$i]} stop; check "redis instance $i stops cleanly" 0 "$STATUS"; done

# ---------------------------------------------------------------- a 3-master cluster
start_redis_cluster
mkdir -p "$tmp/cluster-rules"
cp "$tmp/rules/llm.yaml" "$tmp/cluster-rules/"
cluster_settings "$tmp/cluster-rules"
start_four c --config "$tmp/cluster-rules"
check_contains "cluster: the instances decide on it" "backend redis cluster" "$(cat "$tmp/c0.out")"
costs_flow cluster umbrella
for i in 0 1 2 3; do PID=${spids[$i]} stop; check "cluster instance $i stops cleanly" 0 "$STATUS"; done
finish
