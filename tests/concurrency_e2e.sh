#!/usr/bin/env bash
# End-to-end test of concurrency limits (`algorithm: concurrency`; docs/http-api.md, "Requests in
# flight"): POST /v1/acquire, /v1/release and /v1/renew on the memory store (one `sluice serve`),
# then four instances sharing one real redis-server, then a real 3-master Redis Cluster.
# - N holds are given, the next is refused with 429 and Retry-After naming the limit; a release
#   (on any instance) gives the slot back; a renew moves a live hold's end; a lease that is not
#   one is a 400.
# - 16 clients at once, each holding for a moment and releasing on another instance than it
#   acquired on: never more than N in flight (counted between each grant and its release), N
#   reached, and refusals.
# - The reverse proxy (memory): 8 slow requests at once, 3 forwarded and 5 refused with 429, the
#   slots back once the answers ended; three clients that leave while the upstream works end
#   their exchanges and give their slots back at once.
# - A holder killed with SIGKILL (it never releases) and an instance killed with SIGKILL: their
#   slots come back on their own within max_hold (3 s; 2 s more allowed for the test's requests).
# Usage: SLUICE=path/to/sluice tests/concurrency_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
upstream=${UPSTREAM:?set UPSTREAM to the upstream_server binary}
need_tools curl python3 redis-server redis-cli

mkdir -p "$tmp/rules"
cat >"$tmp/rules/api.yaml" <<'YAML'
domain: api
failure_mode: closed
descriptors:
  - key: report
    rate_limit: {algorithm: concurrency, requests: 3, max_hold: 3s, name: reports}
YAML
printf 'redis: {timeout: 2s}\n' >"$tmp/rules/sluice.yaml"

body() { echo "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"report\",\"value\":\"$1\"}]}]}"; }
# acquire I CUSTOMER: POST /v1/acquire on instance I; prints the status; the body in $tmp/acq,
# the lease in $tmp/lease.
acquire() {
  local status
  status=$(curl -s -o "$tmp/acq" -D "$tmp/headers" -w '%{http_code}' -m 5 -d "$(body "$2")" \
    "http://${datas[$1]}/v1/acquire")
  sed -n 's/.*"lease":"\([^"]*\)".*/\1/p' "$tmp/acq" >"$tmp/lease"
  echo "$status"
}
# post I PATH LEASE: /v1/release or /v1/renew of LEASE on instance I; prints status and body.
post() {
  curl -s -w ' %{http_code}' -m 5 -d "{\"lease\":\"$3\"}" "http://${datas[$1]}/v1/$2"
}
# until_free I CUSTOMER: waits (at most 7.5 s) until instance I grants CUSTOMER a hold, which it
# then releases; prints how many ms that took, or "never".
until_free() {
  local start _
  start=$(date +%s%3N)
  for _ in $(seq 150); do
    if [[ $(acquire "$1" "$2") == 200 ]]; then
      post "$1" release "$(cat "$tmp/lease")" >/dev/null
      echo $(($(date +%s%3N) - start))
      return
    fi
    sleep 0.05
  done
  echo never
}
# within_max_hold MS: "yes" when MS is within max_hold (3 s) and 2 s for the test's own requests
# on a loaded machine.
within_max_hold() { [[ $1 != never && $1 -le 5000 ]] && echo yes || echo "no ($1 ms)"; }

# The load: 16 clients for 2 s, each acquiring on one instance, holding 20 ms, releasing on the
# next; prints "max=M granted=G refused=R errors=E".
load() {
  /usr/bin/python3 - "$1" "$(body "$2")" "${datas[@]}" <<'PY'
import json, sys, threading, time, urllib.request
n_limit, payload, instances = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3:]
lock = threading.Lock()
state = {"in": 0, "max": 0, "granted": 0, "refused": 0, "errors": 0}
def post(i, path, data):
    req = urllib.request.Request(f"http://{instances[i % len(instances)]}{path}", data=data)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None
def client(k):
    end = time.time() + 2
    i = k
    while time.time() < end:
        status, answer = post(i, "/v1/acquire", payload)
        if status == 429:
            with lock: state["refused"] += 1
            time.sleep(0.005)
            continue
        if status != 200:
            with lock: state["errors"] += 1
            continue
        with lock:
            state["granted"] += 1; state["in"] += 1; state["max"] = max(state["max"], state["in"])
        time.sleep(0.02)
        with lock: state["in"] -= 1
        status, _ = post(i + 1, "/v1/release", json.dumps({"lease": answer["lease"]}).encode())
        if status != 200:
            with lock: state["errors"] += 1
        i += 1
threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
for t in threads: t.start()
for t in threads: t.join()
print(f"max={state['max']} granted={state['granted']} refused={state['refused']} errors={state['errors']}")
PY
}

# concurrency_flow LABEL CUSTOMER: the story on the instances in `datas`.
concurrency_flow() {
  local label=$1 c=$2 n=${#datas[@]} leases=() i out
  : >"$tmp/holder"
  for i in 0 1 2; do
    check "$label: hold $((i + 1)) of 3 given" 200 "$(acquire $((i % n)) "$c")"
    leases+=("$(cat "$tmp/lease")")
  done
  check "$label: the 4th is refused" 429 "$(acquire $((3 % n)) "$c")"
  check "$label: ... naming the limit" '"limit":"reports"' "$(grep -o '"limit":"reports"' "$tmp/acq")"
  check "$label: ... with Retry-After (1 to 3 s)" yes \
    "$([[ $(header Retry-After) =~ ^[123]$ ]] && echo yes)"
  check "$label: a renew (on another instance)" '{"renewed":1,"expires_in_ms":3000} 200' \
    "$(post $((1 % n)) renew "${leases[0]}")"
  check "$label: a release (on another instance)" '{"released":1} 200' \
    "$(post $((2 % n)) release "${leases[0]}")"
  check "$label: ... gives its slot back" 200 "$(acquire 0 "$c")"
  check "$label: a second release of it finds none live" '{"released":0} 200' \
    "$(post 0 release "${leases[0]}")"
  check "$label: a lease that is not one" 400 "$(post 0 release nope | awk '{print $NF}')"
  # The holds left (3 of 3) are never released: they end on their own.
  check "$label: slots of holds never released come back within max_hold" yes \
    "$(within_max_hold "$(until_free $((1 % n)) "$c")")"
  out=$(load 3 "$c-load")
  echo "     ($label load: $out)"
  check "$label: 16 clients: never more than 3 in flight" yes \
    "$([[ $(field_of max "$out") -le 3 ]] && echo yes)"
  check "$label: ... 3 reached" 3 "$(field_of max "$out")"
  check "$label: ... some refused" yes "$([[ $(field_of refused "$out") -gt 0 ]] && echo yes)"
  check "$label: ... no errors" 0 "$(field_of errors "$out")"
  # A holder killed with SIGKILL: its holds are never released.
  /usr/bin/python3 - "$(body "$c-killed")" "${datas[0]}" >"$tmp/holder" <<'PY' &
import sys, time, urllib.request
for _ in range(3):
    urllib.request.urlopen(urllib.request.Request(f"http://{sys.argv[2]}/v1/acquire", data=sys.argv[1].encode()), timeout=5).read()
print("held", flush=True)
time.sleep(60)
PY
  local holder=$!  # (its output: "held" once it holds all 3)
  for _ in $(seq 100); do grep -q held "$tmp/holder" 2>/dev/null && break; sleep 0.05; done
  kill -9 "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
  check "$label: a holder killed with SIGKILL held all 3" 429 "$(acquire $((1 % n)) "$c-killed")"
  check "$label: ... its slots come back within max_hold" yes \
    "$(within_max_hold "$(until_free $((2 % n)) "$c-killed")")"
}
field_of() { sed -n "s/.*$1=\([0-9]*\).*/\1/p" <<<"$2"; }

# ---------------------------------------------------------------- memory
start m --config "$tmp/rules"
datas=("$DATA") admins=("$ADMIN")
concurrency_flow memory acme
gauge='sluice_concurrency_holds{domain="api",limit="reports"}'
for _ in $(seq 100); do [[ $(metric "$ADMIN" "$gauge") == 0 ]] && break; sleep 0.05; done
check "metrics: holds in use fall to 0 once every hold ended" 0 "$(metric "$ADMIN" "$gauge")"
acquire 0 gauge >/dev/null; acquire 0 gauge >/dev/null
check "metrics: ... and count the live ones" 2 "$(metric "$ADMIN" "$gauge")"
check "metrics: grants counted" yes "$([[ $(metric "$ADMIN" 'sluice_concurrency_requests_total{domain="api",limit="reports",result="granted"}' 0) -gt 100 ]] && echo yes)"
check "metrics: refusals counted" yes "$([[ $(metric "$ADMIN" 'sluice_concurrency_requests_total{domain="api",limit="reports",result="refused"}' 0) -gt 100 ]] && echo yes)"
check_contains "explain lists the concurrency limit" "concurrency: at most 3 in flight, max_hold 3s name=reports" \
  "$("$sluice" explain --config "$tmp/rules" --domain api report=x)"
stop
check "memory: stops cleanly" 0 "$STATUS"

# ---------------------------------------------------------------- the reverse proxy
# Each proxied request holds a slot from before it is forwarded until its answer has streamed.
start_upstream
mkdir -p "$tmp/proxy-rules"
cat >"$tmp/proxy-rules/api.yaml" <<EOF
domain: api
descriptors:
  - key: report
    rate_limit: {algorithm: concurrency, requests: 3, max_hold: 10s, name: reports}
http:
  upstream: http://$UP
  routes:
    - match: {prefix: /slow}
      rate_limits:
        - actions: [{generic_key: {descriptor_key: report, descriptor_value: proxied}}]
EOF
start p --config "$tmp/proxy-rules"
# (One curl, its 8 requests on 8 connections at once: curl processes started one by one on a
# busy machine could spread past the upstream's 2 s, and a 4th would find a slot free.)
proxied=()
for _ in $(seq 8); do proxied+=(-o /dev/null "http://$DATA/slow?ms=2000"); done
codes=$(curl -s --parallel --parallel-immediate --parallel-max 8 -w '%{http_code}\n' -m 10 \
  "${proxied[@]}" | sort | uniq -c | awk '{print $2 "x" $1}' | xargs)
check "proxy: 8 requests at once, 3 forwarded and 5 refused" "200x3 429x5" "$codes"
check "proxy: the slots are back once the answers ended" "200 200 200" \
  "$(for _ in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' -m 5 "http://$DATA/slow?ms=1"; done | xargs)"
check "proxy: refusals counted" 5 "$(metric "$ADMIN" 'sluice_proxy_requests_total{outcome="held_refused"}' 0)"
# Three clients that give up after 0.5 s while the upstream works for 4 s: their exchanges end
# and their slots come back when they leave, not when the upstream would have answered.
left=()
for i in 1 2 3; do curl -s -o /dev/null -m 0.5 "http://$DATA/slow?ms=4000" & left+=($!); done
wait "${left[@]}"
for _ in $(seq 40); do
  [[ $(metric "$ADMIN" 'sluice_proxy_requests_total{outcome="client_gone"}' 0) == 3 ]] && break
  sleep 0.05
done
check "proxy: clients that left while the upstream worked ended their exchanges" 3 \
  "$(metric "$ADMIN" 'sluice_proxy_requests_total{outcome="client_gone"}' 0)"
check "proxy: ... and gave their slots back" "200 200 200" \
  "$(for _ in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' -m 5 "http://$DATA/slow?ms=1"; done | xargs)"
stop
check "proxy: stops cleanly" 0 "$STATUS"

# ---------------------------------------------------------------- one Redis, four instances
start_redis_on; rport=$RPORT
start_four r --config "$tmp/rules" --redis "redis://127.0.0.1:$rport"
concurrency_flow redis globex
# An instance killed with SIGKILL while it holds: the holds are Redis's, and end on their own.
for i in 0 1 2; do acquire 3 initech >/dev/null; done
kill -9 "${spids[3]}"; wait "${spids[3]}" 2>/dev/null
check "redis: the holds of an instance killed with SIGKILL stay in force" 429 "$(acquire 0 initech)"
check "redis: ... and come back within max_hold" yes "$(within_max_hold "$(until_free 1 initech)")"
for i in 0 1 2; do PID=${spids[$i]} stop; check "redis instance $i stops cleanly" 0 "$STATUS"; done

# ---------------------------------------------------------------- a 3-master cluster
start_redis_cluster
mkdir -p "$tmp/cluster-rules"
cp "$tmp/rules/api.yaml" "$tmp/cluster-rules/"
cluster_settings "$tmp/cluster-rules"
start_four c --config "$tmp/cluster-rules"
concurrency_flow cluster umbrella
for i in 0 1 2 3; do PID=${spids[$i]} stop; check "cluster instance $i stops cleanly" 0 "$STATUS"; done
finish
