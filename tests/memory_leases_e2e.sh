#!/usr/bin/env bash
# End-to-end test of the memory store's per-thread leases and denials (backend/memory/local_leases.h,
# backend/memory/local_over_limit_cache.h) in a real `sluice serve --threads 2`: a domain with `consistency: leased`
# takes one key far over its limit from 16 connections at once (openloop, 20 000 requests a second
# for half a second), a fixed window's (1000 a day) and a token bucket's (300 a day, which refills
# too slowly to be leased: a lease's unspent units would be lost for hours). Neither admits more
# than its limit; the window admits exactly its limit and the bucket within 1 % of it. An exact
# domain, the same. The load's client reuses its most recently idle connection first, so near the
# end one thread may get no more requests and still hold a window lease's units (the bounded
# under-admission LocalLeases documents): after the load, one keep-alive connection to each
# thread (connections are handed to the threads in turn) asks 70 more times, and a thread's next
# requests spend what it holds. Load and drain together admit the window's limit exactly.
# Usage: SLUICE=path/to/sluice OPENLOOP=path/to/openloop tests/memory_leases_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}
openloop=${OPENLOOP:?set OPENLOOP to the openloop binary}

source "$(dirname "$0")/lib.sh"
need_tools python3

mkdir -p "$tmp/rules"
for domain in leased exact; do
  cat >"$tmp/rules/$domain.yaml" <<EOF
domain: $domain
consistency: $domain
http:
  routes:
    - match: {path: /$domain/window}
      rate_limits:
        - actions:
            - generic_key: {descriptor_value: window}
    - match: {path: /$domain/bucket}
      rate_limits:
        - actions:
            - generic_key: {descriptor_value: bucket}
descriptors:
  - key: generic_key
    value: window
    rate_limit: {algorithm: fixed_window, requests: 1000, window: 1d}
  - key: generic_key
    value: bucket
    rate_limit: {algorithm: token_bucket, requests: 300, window: 1d}
EOF
done
printf 'rules: %s\n' "$tmp/rules" >"$tmp/sluice.yaml"
start s --config "$tmp/sluice.yaml" --threads 2
check "serving on 2 threads" yes "$([[ -n $DATA ]] && echo yes)"

# load PATH: up to 10 000 requests at 20 000 a second on 16 connections (openloop sends fewer on
# a busy machine); prints "SENT COMPLETED ADMITTED DENIED OTHER".
load() {
  "$openloop" --url "http://$DATA/v1/auth$1" --rate 20000 --duration 0.5 --connections 16 \
    --grace-ms 3000 >"$tmp/load.json" 2>"$tmp/load.err"
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
s = d["status"]
ok, no = s.get("200", 0), s.get("429", 0)
print(d["sent"], d["completed"], ok, no, sum(s.values()) - ok - no)' "$tmp/load.json"
}

# drain PATH: 70 requests on each of two new keep-alive connections (one per thread), in turn;
# prints how many were admitted.
drain() {
  python3 - "$DATA" "$1" <<'PY'
import http.client, sys
conns = [http.client.HTTPConnection(sys.argv[1], timeout=5) for _ in range(2)]
for c in conns:
    c.connect()
admitted = 0
for _ in range(70):
    for c in conns:
        c.request("GET", "/v1/auth" + sys.argv[2])
        r = c.getresponse()
        r.read()
        admitted += r.status == 200
print(admitted)
PY
}

# hammer DOMAIN ALGORITHM LIMIT: one key of LIMIT a day far over it; every request answered 200 or
# 429, never more than LIMIT admitted, and (given the load to pass it) the limit: exactly for a
# window, within 1 % for a bucket (its leases' lives count as consumed).
hammer() {
  local domain=$1 algorithm=$2 limit=$3 day sent ok denied other drained
  day=$(date -u +%F)
  read -r sent _ ok denied other < <(load "/$domain/$algorithm")
  echo "     $domain $algorithm $limit/1d: $sent sent, $ok admitted, $denied denied, $other other"
  check "$domain $algorithm: every request answered 200 or 429" "$sent" "$((ok + denied))"
  if [[ $algorithm == window ]]; then
    drained=$(drain "/$domain/$algorithm")
    echo "     then 140 more on one connection per thread: $drained admitted"
    ok=$((ok + drained))
  fi
  check "$domain $algorithm: at most the limit admitted" yes \
    "$( ((ok <= limit)) && echo yes || echo "no: $ok")"
  if ((sent < limit + limit / 2)) || [[ $(date -u +%F) != "$day" ]]; then
    echo "     (too little load, or the day turned: the limit itself not checked)"
  elif [[ $algorithm == window ]]; then
    check "$domain $algorithm: exactly the limit admitted (load and drain)" "$limit" "$ok"
  else
    check "$domain $algorithm: within 1 % of the limit" yes \
      "$( ((ok * 100 >= limit * 99)) && echo yes || echo "no: $ok")"
  fi
}

for domain in leased exact; do
  hammer "$domain" window 1000
  hammer "$domain" bucket 300
done
finish
