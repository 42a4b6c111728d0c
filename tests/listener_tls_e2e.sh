#!/usr/bin/env bash
# End-to-end test of TLS and mutual TLS on sluice's own listeners (issue 35): certificates made
# by openssl at test time, one `sluice serve` on loopback with http.tls, admin.tls and grpc.tls,
# each requiring client certificates signed by the test CA (the files beside the settings file,
# behind the symlinks a Kubernetes secret volume has: tls.crt -> ..data/tls.crt, ..data -> a
# version directory).
#   - gRPC ShouldRateLimit, the data plane's /v1/check and the admin port's /metrics answer a
#     client with a certificate; a client without one, with one from another CA, or in
#     plaintext is refused; a client that never starts the handshake is closed after the header
#     timeout.
#   - Rotation: ..data swapped to a new pair (another subject): new connections to each listener
#     get it within 2 s, while a keep-alive HTTPS connection and a gRPC channel opened before the
#     swap keep working.
#   - A bad new pair (a key that is not the certificate's) keeps the certificate in use, logged
#     and counted (sluice_tls_reloads_total{result="failure"}); SIGHUP reloads without a change.
#   - check-config and serve refuse a key that is not the certificate's, naming the file.
#   - `serve --envoy-env` with GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY and
#     GRPC_CLIENT_TLS_CACERT serves gRPC over mutual TLS (on a Redis, as upstream).
# Every process is started on loopback and stopped by its pid.
# Usage: SLUICE=path/to/sluice tests/listener_tls_e2e.sh tests/grpc
set -u
fixtures=$(cd "$1" && pwd)
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools node openssl curl python3 redis-server
need_grpc_client "$fixtures"

# ---------------------------------------------------------------- certificates
certs=$tmp/certs
make_tls_certs "$certs" || fail_setup "no certificates"
# leaf NAME CN CA: another certificate for localhost and 127.0.0.1, signed by CA (ca, other-ca).
leaf() {
  (
    cd "$certs" &&
      echo "subjectAltName=DNS:localhost,IP:127.0.0.1" >"$1.ext" &&
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" \
        -out "$1.csr" -subj "/CN=$2" &&
      openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 30 \
        -extfile "$1.ext" -out "$1.pem"
  ) >>"$certs/make.log" 2>&1
}
leaf rotated sluice-rotated ca || fail_setup "openssl: no rotated certificate"
leaf stranger sluice-test-stranger other-ca || fail_setup "openssl: no stranger certificate"

# The settings and rules; the server's pair in live/, as a secret volume holds it.
etc=$tmp/etc
mkdir -p "$etc/live/v1"
cp "$certs/server.pem" "$etc/live/v1/tls.crt"
cp "$certs/server.key" "$etc/live/v1/tls.key"
ln -s v1 "$etc/live/..data"
ln -s ..data/tls.crt "$etc/live/tls.crt"
ln -s ..data/tls.key "$etc/live/tls.key"
cp "$certs/ca.pem" "$etc/clients-ca.pem"
# swap_to VERSION CERT KEY: a new version directory with that pair, and ..data renamed over to
# it (one atomic rename, as the kubelet does).
swap_to() {
  mkdir -p "$etc/live/$1"
  cp "$2" "$etc/live/$1/tls.crt"
  cp "$3" "$etc/live/$1/tls.key"
  ln -s "$1" "$etc/live/..data_tmp"
  mv -T "$etc/live/..data_tmp" "$etc/live/..data"
}
cat >"$etc/api.yaml" <<'EOF'
domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1000}
EOF
tls_block='{cert_file: live/tls.crt, key_file: live/tls.key, client_ca_file: clients-ca.pem}'
cat >"$etc/sluice.yaml" <<EOF
http:
  header_timeout: 1s
  tls: $tls_block
admin:
  tls: $tls_block
grpc:
  tls: $tls_block
EOF

# Clients: curl and the Node.js gRPC client with the test client's certificate, or another.
mtls=(--cacert "$certs/ca.pem" --cert "$certs/client.pem" --key "$certs/client.key")
check_post() {  # check_post HOST:PORT CURL_ARGS...: POST /v1/check over https; the status (000: none)
  local at=$1; shift
  curl -s -o "$tmp/body" -w '%{http_code}' -m 5 "$@" -H 'content-type: application/json' \
    -d '{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}' \
    "https://$at/v1/check" 2>/dev/null
}
rls() {  # rls HOST:PORT [VAR=VALUE...]: one ShouldRateLimit through the Node.js client
  local at=$1; shift
  env "$@" timeout 15 node "$fixtures/should_rate_limit.js" "$at" api user alice 2>&1 | tail -1
}
as_client=(TLS_CA="$certs/ca.pem" TLS_CERT="$certs/client.pem" TLS_KEY="$certs/client.key")
served_cn() {  # served_cn PORT: the CN of the certificate a new connection to 127.0.0.1:PORT gets
  timeout 5 openssl s_client -connect "127.0.0.1:$1" -servername localhost -alpn h2 \
    -CAfile "$certs/ca.pem" -cert "$certs/client.pem" -key "$certs/client.key" </dev/null 2>/dev/null |
    openssl x509 -noout -subject 2>/dev/null | sed -n 's/.*CN *= *//p'
}

# ---------------------------------------------------------------- start
check "check-config accepts the listeners' TLS" 0 "$("$sluice" check-config "$etc" >"$tmp/cc.out" 2>&1; echo $?)"
start main --config "$etc" --grpc 127.0.0.1:0
[[ -n $DATA && -n $ADMIN && -n $GRPC ]] || { sed 's/^/  | /' "$tmp/main.err"; fail_setup "sluice did not start"; }
data_port=${DATA##*:} admin_port=${ADMIN##*:} grpc_port=${GRPC##*:}

# ---------------------------------------------------------------- who gets in
check "gRPC over mutual TLS answers ShouldRateLimit" "OK 1000/DAY" "$(rls "$GRPC" "${as_client[@]}")"
check "gRPC: no client certificate: refused" UNAVAILABLE "$(rls "$GRPC" TLS_CA="$certs/ca.pem")"
check "gRPC: a certificate from another CA: refused" UNAVAILABLE \
  "$(rls "$GRPC" TLS_CA="$certs/ca.pem" TLS_CERT="$certs/stranger.pem" TLS_KEY="$certs/stranger.key")"
check "gRPC: plaintext: refused" UNAVAILABLE "$(rls "$GRPC")"

check "data plane over mutual TLS answers /v1/check" 200 "$(check_post "$DATA" "${mtls[@]}")"
check_contains "data plane: the decision" '"allowed":true' "$(cat "$tmp/body")"
check "data plane: no client certificate: refused" 000 "$(check_post "$DATA" --cacert "$certs/ca.pem")"
check "data plane: a certificate from another CA: refused" 000 \
  "$(check_post "$DATA" --cacert "$certs/ca.pem" --cert "$certs/stranger.pem" --key "$certs/stranger.key")"
check "data plane: plaintext: no answer" 000 \
  "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://$DATA/healthcheck" 2>/dev/null)"
check "data plane: a server not verified against the CA is refused by the client" 000 \
  "$(check_post "$DATA" --cacert "$certs/other-ca.pem" --cert "$certs/client.pem" --key "$certs/client.key")"

curl -s -m 5 "${mtls[@]}" "https://$ADMIN/metrics" >"$tmp/metrics" 2>/dev/null
check_contains "admin over mutual TLS answers /metrics" "sluice_tls_reloads_total" "$(cat "$tmp/metrics")"
not_after=$(date -d "$(openssl x509 -in "$certs/server.pem" -noout -enddate | cut -d= -f2)" +%s)
check "admin: the served certificate's expiry in /metrics" "$not_after" \
  "$(sed -n 's/^sluice_tls_certificate_expiry_timestamp_seconds{listener="data"} //p' "$tmp/metrics")"
check "admin: no client certificate: refused" 000 \
  "$(curl -s -o /dev/null -w '%{http_code}' -m 5 --cacert "$certs/ca.pem" "https://$ADMIN/metrics" 2>/dev/null)"

# A client that connects and never starts the handshake: closed after the header timeout (1 s).
started_at=$(date +%s%N)
timeout 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$data_port; cat <&3 >/dev/null" 2>/dev/null
silent_status=$?
silent_ms=$((($(date +%s%N) - started_at) / 1000000))
check "a client silent before the handshake is closed by the header timeout" 1 \
  "$((silent_status == 0 && silent_ms >= 900 && silent_ms < 5000 ? 1 : 0))"

# ---------------------------------------------------------------- rotation
for port in "$data_port" "$admin_port" "$grpc_port"; do
  check "port $port serves the first certificate" localhost "$(served_cn "$port")"
done
# Connections opened before the swap: a keep-alive HTTPS connection (asks once now, once after
# the swap; prints the status and local port of each) and a gRPC channel (the same).
cat >"$tmp/keepalive.py" <<'EOF'
import http.client, os, ssl, sys, time
host, port, ca, cert, key, go = sys.argv[1:7]
context = ssl.create_default_context(cafile=ca)
context.load_cert_chain(cert, key)
conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=5)
body = '{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"bob"}]}]}'
def ask():
    conn.request("POST", "/v1/check", body, {"content-type": "application/json"})
    answer = conn.getresponse()
    answer.read()
    return "%d %d" % (answer.status, conn.sock.getsockname()[1])
print(ask(), flush=True)
deadline = time.time() + 20
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.05)
try:
    print(ask(), flush=True)
except Exception as e:
    print("error", e, flush=True)
EOF
python3 "$tmp/keepalive.py" 127.0.0.1 "$data_port" "$certs/ca.pem" "$certs/client.pem" "$certs/client.key" \
  "$tmp/go" >"$tmp/keepalive.out" 2>&1 &
keepalive_pid=$!
pids+=("$keepalive_pid")
env "${as_client[@]}" AGAIN_WHEN="$tmp/go" timeout 30 node "$fixtures/should_rate_limit.js" "$GRPC" api user carol \
  >"$tmp/channel.out" 2>"$tmp/channel.err" &
channel_pid=$!
pids+=("$channel_pid")
for _ in $(seq 100); do
  [[ $(wc -l <"$tmp/keepalive.out") -ge 1 && $(wc -l <"$tmp/channel.out") -ge 1 ]] && break
  sleep 0.05
done

swap_to v2 "$certs/rotated.pem" "$certs/rotated.key"
swapped_at=$(date +%s%N)
# new_cn_within PORT: polls (at most 2 s from the swap) until PORT serves the new certificate;
# prints the milliseconds it took, or "late".
new_cn_within() {
  while true; do
    local ms=$((($(date +%s%N) - swapped_at) / 1000000))
    if [[ $(served_cn "$1") == sluice-rotated ]]; then echo "$ms"; return; fi
    ((ms > 2000)) && { echo late; return; }
    sleep 0.1
  done
}
for listener in data:$data_port admin:$admin_port grpc:$grpc_port; do
  took=$(new_cn_within "${listener#*:}")
  echo "  ${listener%%:*}: the new certificate after $took ms"
  check "${listener%%:*}: new connections get the new certificate within 2 s" 1 "$([[ $took != late ]] && echo 1)"
done
check "data plane: a new connection over mutual TLS still answers" 200 "$(check_post "$DATA" "${mtls[@]}")"
check "gRPC: a new channel still answers" "OK 1000/DAY" "$(rls "$GRPC" "${as_client[@]}")"

touch "$tmp/go"
wait "$keepalive_pid" 2>/dev/null
wait "$channel_pid" 2>/dev/null
mapfile -t kept <"$tmp/keepalive.out"
check "keep-alive HTTPS connection: first answer" 200 "${kept[0]%% *}"
check "keep-alive HTTPS connection: answers after the swap" 200 "${kept[1]%% *}"
check "keep-alive HTTPS connection: on the same connection" "${kept[0]#* }" "${kept[1]#* }"
mapfile -t channel <"$tmp/channel.out"
check "gRPC channel opened before the swap: first call" "OK 1000/DAY" "${channel[0]:-none}"
check "gRPC channel opened before the swap: answers after it" "OK 1000/DAY" "${channel[1]:-none}"

# ---------------------------------------------------------------- a bad new pair, and SIGHUP
# metric_tls NAME: a sample of /metrics over mutual TLS (lib.sh's metric speaks plain HTTP).
metric_tls() {
  curl -s -m 5 "${mtls[@]}" "https://$ADMIN/metrics" 2>/dev/null | grep -F "$1 " | head -1 | awk '{print $2}'
}
successes=$(metric_tls 'sluice_tls_reloads_total{listener="data",result="success"}')
check "the rotation was counted" 1 "$((${successes:-0} >= 1 ? 1 : 0))"
swap_to v3 "$certs/elsewhere.pem" "$certs/rotated.key"  # a certificate with another's key
# (Checked once every listener has tried the new pair and counted its failure: at most 10 s.)
bad_line="$etc/live/tls.key is not the key of the certificate"
failures() {
  local listener
  for listener in data admin grpc; do
    echo "$listener $(metric_tls "sluice_tls_reloads_total{listener=\"$listener\",result=\"failure\"}")"
  done
}
each_failed_once() { [[ $(failures) == $'data 1\nadmin 1\ngrpc 1' ]]; }
until_true 10 each_failed_once
for port in "$data_port" "$admin_port" "$grpc_port"; do
  check "port $port: a bad new pair keeps the certificate in use" sluice-rotated "$(served_cn "$port")"
done
check_contains "the bad pair is logged, naming the key" "$bad_line" "$(cat "$tmp/main.out" "$tmp/main.err")"
check "each listener counted the failure once" $'data 1\nadmin 1\ngrpc 1' "$(failures)"
check "data plane still answers over mutual TLS" 200 "$(check_post "$DATA" "${mtls[@]}")"
check "gRPC still answers over mutual TLS" "OK 1000/DAY" "$(rls "$GRPC" "${as_client[@]}")"

swap_to v4 "$certs/server.pem" "$certs/server.key"
for port in "$data_port" "$grpc_port"; do
  taken=
  for _ in $(seq 30); do
    [[ $(served_cn "$port") == localhost ]] && { taken=1; break; }
    sleep 0.1
  done
  check "port $port: a good pair after the bad one is taken" 1 "$taken"
done
before=$(metric_tls 'sluice_tls_reloads_total{listener="data",result="success"}')
kill -HUP "$PID"
after=$before
for _ in $(seq 40); do
  after=$(metric_tls 'sluice_tls_reloads_total{listener="data",result="success"}')
  [[ $after != "$before" ]] && break
  sleep 0.05
done
check "SIGHUP reloads the certificates (unchanged files)" $((before + 1)) "$after"
check "SIGHUP: still serving" 200 "$(check_post "$DATA" "${mtls[@]}")"
stop
check "serve stops cleanly" 0 "$STATUS"

# ---------------------------------------------------------------- refused at start
cat >"$tmp/bad.yaml" <<EOF
grpc:
  tls: {cert_file: $certs/server.pem, key_file: $certs/client.key}
EOF
mkdir -p "$tmp/bad"
cp "$etc/api.yaml" "$tmp/bad/"
cp "$tmp/bad.yaml" "$tmp/bad/sluice.yaml"
"$sluice" check-config "$tmp/bad" >"$tmp/bad-cc.out" 2>&1
check "check-config refuses a key that is not the certificate's" 1 "$?"
check_contains "check-config names the key file" "grpc.tls: TLS key $certs/client.key is not the key of the certificate $certs/server.pem" "$(cat "$tmp/bad-cc.out")"
start bad --config "$tmp/bad" --grpc 127.0.0.1:0
check "serve refuses it too" "" "$DATA"
check_contains "serve names the key file" "grpc.tls: TLS key $certs/client.key is not the key" "$(cat "$tmp/bad.err")"

# ---------------------------------------------------------------- --envoy-env
start_redis_on || fail_setup "no redis-server"
runtime=$tmp/runtime
mkdir -p "$runtime/ratelimit/config"
cp "$etc/api.yaml" "$runtime/ratelimit/config/"
free_port; port=$FREE_PORT
free_port; grpc_env_port=$FREE_PORT
free_port; debug_port=$FREE_PORT
start_env envoy RUNTIME_ROOT="$runtime" RUNTIME_SUBDIRECTORY=ratelimit USE_STATSD=false \
  REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$RPORT" REDIS_TIMEOUT=2s \
  HOST=127.0.0.1 PORT="$port" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc_env_port" \
  DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug_port" \
  GRPC_SERVER_USE_TLS=true GRPC_SERVER_TLS_CERT="$certs/server.pem" \
  GRPC_SERVER_TLS_KEY="$certs/server.key" GRPC_CLIENT_TLS_CACERT="$certs/ca.pem"
check "--envoy-env with GRPC_SERVER_USE_TLS starts" 1 "$(grep -q '^sluice: config' "$tmp/envoy.out" && echo 1)"
check "--envoy-env: gRPC over mutual TLS answers" "OK 1000/DAY" "$(rls "127.0.0.1:$grpc_env_port" "${as_client[@]}")"
check "--envoy-env: no client certificate: refused" UNAVAILABLE \
  "$(rls "127.0.0.1:$grpc_env_port" TLS_CA="$certs/ca.pem")"
check "--envoy-env: plaintext: refused" UNAVAILABLE "$(rls "127.0.0.1:$grpc_env_port")"
stop
check "--envoy-env: stops cleanly" 0 "$STATUS"

finish
