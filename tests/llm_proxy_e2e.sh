#!/usr/bin/env bash
# End-to-end test of costs settled from the answer in reverse proxy mode (a rate_limits entry's
# `cost:`; docs/configuration.md), with a fake LLM upstream (tests/llm_upstream.py) that answers
# with the usage each request asks it for: in a JSON body, in the last event of an event stream
# (text/event-stream, chunked, 10 ms between events), or in a header.
# - Memory: a reserve read from the request's JSON (max_tokens, or its default) or header; the
#   settlement to the usage of a JSON answer, of a stream's last event (past the reserve: the
#   excess recorded), of a header; no usage keeps the estimate; a reserve that does not fit is a
#   429 and never reaches the upstream; the per-call count beside it is not settled.
# - Over a run of 4 s, a token bucket of 300 tokens a second (burst 300) admits no more tokens
#   than rate x time + burst plus one request's overshoot for each request in flight (one client;
#   four at once), and limits (429s) without starving (at least half the rate).
# - Four instances on one Redis: a request proxied by one instance is settled where every other
#   instance sees it.
# Usage: SLUICE=path/to/sluice tests/llm_proxy_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl python3 redis-server redis-cli

/usr/bin/python3 "$(dirname "$0")/llm_upstream.py" >"$tmp/llm.out" 2>"$tmp/llm.err" &
pids+=("$!")
for _ in $(seq 100); do grep -q listening "$tmp/llm.out" 2>/dev/null && break; sleep 0.05; done
LLM=$(sed -n 's/^llm: listening on //p' "$tmp/llm.out")
[[ -n $LLM ]] || fail_setup "the fake LLM upstream did not start: $(cat "$tmp/llm.err")"

mkdir -p "$tmp/rules"
cat >"$tmp/rules/llm.yaml" <<YAML
domain: llm
descriptors:
  - key: tokens
    rate_limit: {algorithm: fixed_window, requests: 1000, window: 1h, name: tokens}
  - key: calls
    rate_limit: {algorithm: fixed_window, requests: 100, window: 1h, name: calls}
  - key: rate
    rate_limit: {algorithm: token_bucket, requests: 300, window: 1s, name: rate}
http:
  upstream: http://$LLM
  routes:
    - match: {prefix: /v1/chat}
      rate_limits:
        - actions: [{request_headers: {header_name: X-Api-Key, descriptor_key: tokens}}]
          cost:
            reserve: {json: max_tokens, default: 100}
            settle: {json: usage.total_tokens}
        - actions: [{request_headers: {header_name: X-Api-Key, descriptor_key: calls}}]
    - match: {prefix: /v1/headered}
      rate_limits:
        - actions: [{request_headers: {header_name: X-Api-Key, descriptor_key: tokens}}]
          cost:
            reserve: {header: X-Max-Tokens}
            settle: {header: X-Tokens-Used}
    - match: {prefix: /v1/rated}
      rate_limits:
        - actions: [{request_headers: {header_name: X-Api-Key, descriptor_key: rate}}]
          cost:
            reserve: {json: max_tokens}
            settle: {json: usage.total_tokens}
YAML

# chat I KEY BODY [PATH]: a proxied completion on instance I; prints the status, keeps the body.
chat() {
  curl -s -o "$tmp/answer" -w '%{http_code}' -m 10 -H "X-Api-Key: $2" \
    -H 'Content-Type: application/json' -d "$3" "http://${datas[$1]}${4:-/v1/chat/completions}"
}
# left I KEY DESCRIPTOR: what a look (cost 0) at DESCRIPTOR=KEY on instance I says is left.
left() { remaining_of "${datas[$1]}" llm "$3" "$2"; }
served() { curl -s -m 5 "http://$LLM/stats" | sed -n 's/requests=//p'; }

# settle_flow LABEL KEY: the story on the instances in `datas`.
settle_flow() {
  local label=$1 k=$2 n=${#datas[@]} before
  clear_of_hour_end 20
  check "$label: a JSON answer (reserve 300, usage 120)" 200 \
    "$(chat 0 "$k" '{"max_tokens":300,"use":120}')"
  check_contains "$label: ... the upstream's answer passed on" '"total_tokens": 120' "$(cat "$tmp/answer")"
  check "$label: ... settled at 120 (seen on another instance)" 880 "$(left $((1 % n)) "$k" tokens)"
  check "$label: ... the call counted, not settled" 99 "$(left $((1 % n)) "$k" calls)"
  check "$label: a stream (reserve 100, usage 250)" 200 \
    "$(chat $((1 % n)) "$k" '{"max_tokens":100,"use":250,"stream":true}')"
  check "$label: ... streamed to its end" 5 "$(grep -c '^data: ' "$tmp/answer")"
  check "$label: ... the excess recorded past the reserve" 630 "$(left $((2 % n)) "$k" tokens)"
  before=$(served)
  check "$label: a reserve of 700 does not fit" 429 \
    "$(chat $((2 % n)) "$k" '{"max_tokens":700,"use":1}')"
  check "$label: ... and never reached the upstream" "$before" "$(served)"
  check "$label: a header's reserve (50) and usage (20)" 200 \
    "$(curl -s -o /dev/null -w '%{http_code}' -m 10 -H "X-Api-Key: $k" -H 'X-Max-Tokens: 50' \
      -d '{"use":20,"header":true}' "http://${datas[$((3 % n))]}/v1/headered")"
  check "$label: ... settled at 20" 610 "$(left 0 "$k" tokens)"
  check "$label: no usage in the answer (reserve 10)" 200 "$(chat 0 "$k" '{"max_tokens":10}')"
  check "$label: ... keeps the estimate" 600 "$(left 0 "$k" tokens)"
  check "$label: a stream with no usage and no max_tokens (default 100)" 200 \
    "$(chat 0 "$k" '{"stream":true}')"
  check "$label: ... keeps the default" 500 "$(left 0 "$k" tokens)"
}

# bound CLIENTS KEY: CLIENTS clients, each sending completions one after another for 4 s
# (max_tokens 40, usage 30 to 70: up to 30 over, 50 on average), streaming; prints "admitted=A
# denied=D errors=E seconds=T" (A: the tokens of the answered ones). Were the excess not recorded,
# about 1.25 x the bound would be admitted.
bound() {
  /usr/bin/python3 - "$1" "$2" "${datas[0]}" <<'PY'
import http.client, json, random, sys, threading, time
clients, key, host = int(sys.argv[1]), sys.argv[2], sys.argv[3]
h, p = host.rsplit(":", 1)
lock = threading.Lock()
state = {"admitted": 0, "denied": 0, "errors": 0}
start = time.monotonic()
def client(k):
    rng = random.Random(k)
    conn = http.client.HTTPConnection(h, int(p), timeout=10)
    while time.monotonic() - start < 4:
        use = rng.randint(30, 70)
        body = json.dumps({"max_tokens": 40, "use": use, "stream": True})
        try:
            conn.request("POST", "/v1/rated", body, {"X-Api-Key": key, "Content-Type": "application/json"})
            r = conn.getresponse(); r.read()
        except Exception:
            with lock: state["errors"] += 1
            conn = http.client.HTTPConnection(h, int(p), timeout=10)
            continue
        with lock:
            if r.status == 200: state["admitted"] += use
            elif r.status == 429: state["denied"] += 1; time.sleep(0.01)
            else: state["errors"] += 1
threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
print(f"admitted={state['admitted']} denied={state['denied']} errors={state['errors']} "
      f"seconds={time.monotonic() - start:.3f}")
PY
}
field_of() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
holds() { awk "BEGIN { print (($1) ? \"yes\" : \"no\") }"; }

# ---------------------------------------------------------------- memory
start m --config "$tmp/rules"
datas=("$DATA")
settle_flow memory acme
for clients in 1 4; do
  out=$(bound "$clients" "bound$clients")
  echo "     ($clients at once: $out)"
  t=$(field_of seconds "$out") a=$(field_of admitted "$out")
  check "$clients at once: no errors" 0 "$(field_of errors "$out")"
  check "$clients at once: tokens admitted ($a) within 300 x $t s + 300 + $clients x 30" yes \
    "$(holds "$a <= 300 * $t + 300 + $clients * 30")"
  check "$clients at once: limited (429s)" yes "$(holds "$(field_of denied "$out") > 0")"
  check "$clients at once: not starved (at least half the rate)" yes "$(holds "$a >= 150 * $t")"
done
check "a bad cost source is a config error naming it" yes \
  "$(printf 'domain: x\nhttp:\n  routes:\n    - rate_limits:\n        - actions: [{generic_key: {descriptor_value: v}}]\n          cost: {settle: {fixed: 3}}\n' >"$tmp/bad.yaml"
     "$sluice" check-config "$tmp/bad.yaml" 2>&1 | grep -q 'bad.yaml:6:.*settle reads the answer' && echo yes)"
stop
check "memory: stops cleanly" 0 "$STATUS"

# ---------------------------------------------------------------- one Redis, four instances
# A generous timeout: a call past redis.timeout (10 ms by default, which a busy CI machine can
# take) is answered by failure_mode open and counted nowhere, and these checks are exact.
printf 'redis: {timeout: 2s}\n' >"$tmp/rules/sluice.yaml"
start_redis_on; rport=$RPORT
start_four r --config "$tmp/rules" --redis "redis://127.0.0.1:$rport"
settle_flow redis globex
for i in 0 1 2 3; do PID=${spids[$i]} stop; check "redis instance $i stops cleanly" 0 "$STATUS"; done
finish
