#!/usr/bin/env bash
# Many slow and idle connections against `sluice serve` (one thread; two for the silent ones):
# slowloris cannot hold the server, the connection cap closes extra connections at once (or,
# when some are idle, the one idle the longest), silent connections go at the header timeout, the
# server's own 400/413/431 are counted, and everything recovers.
# Usage: SLUICE=path/to/sluice tests/robustness_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl
trap "" PIPE  # writes to connections the server closed must not kill the script

cat >"$tmp/sluice.yaml" <<YAML
http: {header_timeout: 1s, idle_timeout: 2s, max_connections: 150}
YAML
start main --config "$tmp/sluice.yaml" --threads 1
host=${DATA%:*} port=${DATA##*:}
healthy() { curl -s -m 2 -o /dev/null -w '%{http_code}' "http://$DATA/healthcheck"; }

# open_slow N: N connections that each send an unfinished request header block.
slow_fds=()
open_slow() {
  local fd
  for _ in $(seq "$1"); do
    exec {fd}<>"/dev/tcp/$host/$port" || continue
    printf 'GET /healthcheck HTTP/1.1\r\nHost: x\r\nX-Slow: ' 1>&"$fd" 2>/dev/null
    slow_fds+=("$fd")
  done
}
# closed_count: how many of slow_fds the server has closed (reads EOF at once).
closed_count() {
  local n=0 fd
  for fd in "${slow_fds[@]}"; do
    # EOF at once: closed (status 1, or 0 if an error response came first); a timeout (>128):
    # still open.
    read -r -t 0.05 -u "$fd" _ 2>/dev/null
    (($? <= 1)) && n=$((n + 1))
  done
  echo "$n"
}
close_all() {
  local fd
  for fd in "${slow_fds[@]}"; do exec {fd}<&-; done
  slow_fds=()
}

# --- slowloris: 100 unfinished requests; the server still answers, then cuts them all off
open_slow 100
check "100 slow connections opened" 100 "${#slow_fds[@]}"
check "the server answers while they hang" 200 "$(healthy)"
# Trickle one more byte on each: a request must arrive whole within the header timeout anyway.
for fd in "${slow_fds[@]}"; do printf 'a' 1>&"$fd" 2>/dev/null; done
# The header timeout is 1 s; on a loaded machine closing 100 connections may take a little longer,
# so poll (at most ~5 s) rather than count once.
sleep 1.2
for _ in $(seq 20); do closed=$(closed_count); ((closed == 100)) && break; sleep 0.2; done
check "every slow connection is closed after the header timeout" 100 "$closed"
close_all
check "still healthy afterwards" 200 "$(healthy)"

# --- the connection cap: 200 idle connections against max_connections 150, on a server whose
# header timeout is long enough that nothing times out while we count
stop
printf 'http: {header_timeout: 30s, idle_timeout: 30s, max_connections: 150}\n' >"$tmp/cap.yaml"
start cap --config "$tmp/cap.yaml" --threads 1
host=${DATA%:*} port=${DATA##*:}
# (the first 150 have their bytes read before the rest come: a connection not yet read from is
# idle, and an idle one would be closed to make room rather than the new one refused)
open_slow 150
sleep 0.3
open_slow 50
sleep 0.3
check "the admin port still answers while the data plane is full" 200 "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://$ADMIN/healthz")"
check "a new data-plane connection is refused while full" 000 "$(healthy)"
closed=$(closed_count)
check "connections over the cap are closed at once (50 of 200, and the refused one)" 50 "$closed"
check "rejections are counted" "sluice_http_connections_rejected_total 51" "$(metrics "$ADMIN" | grep '^sluice_http_connections_rejected_total')"
close_all
sleep 0.3
check "after they close, new connections are served" 200 "$(healthy)"
stop

# --- silent connections (never a byte) cannot hold the server: at the cap, a new connection
# takes the place of the one idle the longest, and each is closed at the header timeout counted
# from the accept, not at the idle timeout
printf 'http: {header_timeout: 2s, idle_timeout: 30s, max_connections: 50}\n' >"$tmp/silent.yaml"
start silent --config "$tmp/silent.yaml" --threads 2
host=${DATA%:*} port=${DATA##*:}
slow_fds=()
for _ in $(seq 50); do exec {fd}<>"/dev/tcp/$host/$port" && slow_fds+=("$fd"); done
check "50 silent connections opened (the cap)" 50 "${#slow_fds[@]}"
sleep 0.3
check "a client still gets its answer while they hold the cap" 200 "$(healthy)"
read -r -t 0.5 -u "${slow_fds[0]}" _
check "the oldest silent connection was closed to make room (EOF at once)" 1 "$(( $? <= 1 ))"
check "and another client too" 200 "$(healthy)"
check "nothing was refused" "sluice_http_connections_rejected_total 0" "$(metrics "$ADMIN" | grep '^sluice_http_connections_rejected_total')"
close_all
exec {fd}<>"/dev/tcp/$host/$port"
start_s=$(date +%s%N)
timeout 5 cat <&"$fd" >/dev/null
elapsed_ms=$(( ($(date +%s%N) - start_s) / 1000000 ))
exec {fd}<&-
check "a silent connection is closed at the header timeout (2 s), not the idle one (30 s)" 1 "$(( elapsed_ms >= 1600 && elapsed_ms < 3500 ))"

# --- requests the server answers itself (it cannot read them, or HTTP/1.1 without Host) are
# counted with the others
raw() {  # raw REQUEST: the status line of the answer to REQUEST sent as is
  exec {fd}<>"/dev/tcp/$host/$port"
  printf '%b' "$1" >&"$fd"
  timeout 3 head -n 1 <&"$fd" | tr -d '\r'
  exec {fd}<&-
}
check "HTTP/1.1 without Host -> 400 (RFC 9112 §3.2)" "HTTP/1.1 400 Bad Request" "$(raw 'GET /healthcheck HTTP/1.1\r\n\r\n')"
check "two Host fields -> 400" "HTTP/1.1 400 Bad Request" "$(raw 'GET /healthcheck HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n')"
check "HTTP/1.0 without Host is fine" "HTTP/1.0 200 OK" "$(raw 'GET /healthcheck HTTP/1.0\r\n\r\n')"
check "a bad request line -> 400" "HTTP/1.1 400 Bad Request" "$(raw 'NOT A REQUEST LINE\r\n\r\n')"
check "a body over max_body_bytes -> 413" "HTTP/1.1 413 Payload Too Large" "$(raw 'POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 300000000\r\n\r\n')"
big=$(head -c 20000 /dev/zero | tr '\0' a)
check "a header block over max_header_bytes -> 431" "HTTP/1.1 431 Request Header Fields Too Large" "$(raw "GET /healthcheck HTTP/1.1\r\nHost: x\r\nX-Big: $big\r\n\r\n")"
metrics=$(metrics "$ADMIN")
check "400s counted" 'sluice_http_requests_total{code="400"} 3' "$(grep '^sluice_http_requests_total{code="400"}' <<<"$metrics")"
check "413 counted" 'sluice_http_requests_total{code="413"} 1' "$(grep '^sluice_http_requests_total{code="413"}' <<<"$metrics")"
check "431 counted" 'sluice_http_requests_total{code="431"} 1' "$(grep '^sluice_http_requests_total{code="431"}' <<<"$metrics")"

# --- a request of too many descriptors is refused at once, saying why
body='{"domain":"d","descriptors":['
for _ in $(seq 10000); do body+='{"entries":[{"key":"k","value":"v"}]},'; done
body="${body%,}]}"
start_s=$(date +%s%N)
answer=$(curl -s -m 5 -w ' %{http_code}' -H 'Content-Type: application/json' --data-binary @- "http://$DATA/v1/check" <<<"$body")
elapsed_ms=$(( ($(date +%s%N) - start_s) / 1000000 ))
check "10000 descriptors -> 400 naming the bound" '{"error":"descriptors: 10000 descriptors, more than the maximum of 64"} 400' "$answer"
check "answered within 1 s (${elapsed_ms} ms)" 1 "$(( elapsed_ms < 1000 ))"
stop

printf 'http: {header_timeout: 1s, idle_timeout: 2s}\n' >"$tmp/idle.yaml"
start idle --config "$tmp/idle.yaml" --threads 1
host=${DATA%:*} port=${DATA##*:}

# --- idle keep-alive connections go away after the idle timeout
exec {idle}<>"/dev/tcp/$host/$port"
printf 'GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n' >&"$idle"
first=$(timeout 1 head -c 12 <&"$idle")
check "keep-alive answer" "HTTP/1.1 200" "$first"
start_s=$(date +%s%N)
timeout 5 cat <&"$idle" >/dev/null
elapsed_ms=$(( ($(date +%s%N) - start_s) / 1000000 ))
check "idle keep-alive connection closed by the server within ~2 s" 1 "$(( elapsed_ms >= 1500 && elapsed_ms < 4000 ))"
exec {idle}<&-

stop
check "SIGTERM exits 0" 0 "$STATUS"
finish
