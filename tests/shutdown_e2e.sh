#!/usr/bin/env bash
# End-to-end test of a bounded shutdown in reverse proxy mode: sluice in front of the test
# upstream (tests/upstream_server.cc), http.shutdown_timeout 2s, and at SIGTERM requests pending
# in each phase of an upstream exchange: waiting for the answer's header (the upstream answers
# after 20 s), streaming the answer's body (the upstream holds the rest back) and sending a
# request body (the client keeps sending, the upstream keeps reading); and held for a shaping
# delay of 20 s (its client pipelined another request meanwhile, so only the deadline can end
# the wait, not the client's close). sluice must exit 0 within
# shutdown_timeout + 1 s, whatever the upstream does, each client having got an answer (503 when
# nothing of the upstream's answer was sent yet) or its connection closed (a cut body), none
# left hanging.
# Usage: SLUICE=path/to/sluice UPSTREAM=path/to/upstream_server tests/shutdown_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}
upstream=${UPSTREAM:?set UPSTREAM to the upstream_server binary}

source "$(dirname "$0")/lib.sh"
need_tools curl

start_upstream || { echo "FAIL the test upstream did not start"; cat "$tmp/upstream.err"; echo "0 passed, 1 failed"; exit 1; }
stat() { curl -s "http://$UP/stats" | sed -n "s/.*$1=\([0-9]*\).*/\1/p"; }

mkdir -p "$tmp/s"
cat >"$tmp/s/sluice.yaml" <<EOF
http: {shutdown_timeout: 2s, upstream_timeout: 60s, max_body_bytes: 100000000}
EOF
cat >"$tmp/s/proxy.yaml" <<EOF
domain: proxy
http:
  upstream: http://$UP
  routes:
    - match: {prefix: /shaped}
      rate_limits:
        - actions: [{generic_key: {descriptor_key: route, descriptor_value: shaped}}]
descriptors:
  - key: route
    value: shaped
    limits: [{name: shaped, algorithm: leaky_bucket, requests: 1, window: 20s, burst: 3}]
EOF
start s --config "$tmp/s" --grpc 127.0.0.1:0
[[ -n $DATA ]] || { echo "FAIL sluice did not start"; cat "$tmp/s.err"; echo "0 passed, 1 failed"; exit 1; }
url="http://$DATA"
check "forwarding works before the shutdown" 200 \
  "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url/status/200")"
check "the first shaped request goes at once" 200 \
  "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url/shaped/1")"

# The clients, each bounded by --max-time 10 (a hang shows as 000 and a curl exit of 28).
clients=()
for i in 1 2 3; do  # the upstream answers after 20 s
  curl -s -o "$tmp/slow.$i.body" -w '%{http_code}' --max-time 10 "$url/slow?ms=20000" \
    >"$tmp/slow.$i.code" 2>/dev/null &
  clients+=($!)
done
# The upstream sends "first part" at once and the rest only after a /release (or 5 s).
curl -s -N --max-time 10 "$url/hold" >"$tmp/hold.body" 2>/dev/null &
hold_pid=$!
clients+=("$hold_pid")
# A chunked upload that goes on for 20 s: sluice is still sending it upstream at the deadline.
(for _ in $(seq 200); do printf 'sluice streams bodies piece by piece\n'; sleep 0.1; done) |
  curl -s -o "$tmp/upload.body" -w '%{http_code}' --max-time 10 -X POST -T - "$url/upload" \
    >"$tmp/upload.code" 2>/dev/null &
upload_pid=$!
clients+=("$upload_pid")
# The next shaped request waits 20 s; a second one pipelined once the first is held ends the
# watch for the client's close (bytes came), and waits unread until the first is answered.
exec 3<>"/dev/tcp/${DATA%:*}/${DATA##*:}"
printf 'GET /shaped/2 HTTP/1.1\r\nHost: t\r\n\r\n' >&3
sleep 0.3
printf 'GET /shaped/3 HTTP/1.1\r\nHost: t\r\n\r\n' >&3
timeout 10 cat <&3 >"$tmp/shaped.out" &
clients+=($!)
exec 3<&-

# Every exchange is under way: the three slow ones and the hold at the upstream, the first
# part of the held answer at its client, the upload's first bytes at the upstream.
for _ in $(seq 200); do
  [[ $(stat requests) -ge 7 && $(stat holding) -ge 1 && $(stat received) -gt 0 ]] &&
    grep -q 'first part' "$tmp/hold.body" 2>/dev/null && break
  sleep 0.05
done
check "all exchanges in flight before SIGTERM (and the shaped one not forwarded)" \
  "7 1 first part" "$(stat requests) $(stat holding) $(grep -o 'first part' "$tmp/hold.body")"

begin=$(now_ms)
kill -TERM "$PID"
while kill -0 "$PID" 2>/dev/null && (($(now_ms) - begin < 10000)); do sleep 0.02; done
took_ms=$(($(now_ms) - begin))
kill -9 "$PID" 2>/dev/null
wait "$PID" 2>/dev/null
check "sluice exits 0 on SIGTERM with upstream exchanges pending" 0 "$?"
check "... within shutdown_timeout + 1 s (took ${took_ms} ms)" 1 "$((took_ms < 3000))"
check "... not before shutdown_timeout (took ${took_ms} ms)" 1 "$((took_ms >= 1900))"

wait "${clients[@]}" 2>/dev/null
codes=""
for i in 1 2 3; do codes+="$(cat "$tmp/slow.$i.code") "; done
check "requests still waiting for the upstream's header answered 503" "503 503 503 " "$codes"
check_contains "... saying why" "shut down" "$(cat "$tmp/slow.1.body" 2>/dev/null)"
check "an answer still streaming is cut: the first part, not the rest" "first part|" \
  "$(grep -o 'first part' "$tmp/hold.body")|$(grep -o 'second part' "$tmp/hold.body")"
check "a request whose body was still being sent answered 503" 503 "$(cat "$tmp/upload.code")"
check "a request held for its shaping delay answered 503, and the one pipelined behind it too" \
  "HTTP/1.1 503|HTTP/1.1 503|" "$(grep -a -o 'HTTP/1.1 [0-9]*' "$tmp/shaped.out" | tr '\n' '|')"
check_contains "... saying why" "sluice is shutting down" "$(cat "$tmp/shaped.out")"

finish
