#!/usr/bin/env bash
# End-to-end test of Redis over TLS (issue 35): certificates made by openssl at test time, a
# redis-server that serves TLS alone with mutual TLS (--tls-port, --tls-auth-clients yes), on
# loopback. Four `sluice serve` processes decide on it over mutual TLS (redis.tls, its files
# beside the settings file) and hold each limit exactly between them. Then the refusals, each
# named in the log and /readyz by its cause while the failure policy answers (open: allowed,
# closed: 503): a wrong CA, an expired server certificate, a server certificate for another host
# name, and no client certificate; a TLS file that cannot be read is refused at start by
# check-config and serve alike. Last, `serve --envoy-env` with REDIS_TLS=true and
# REDIS_TLS_CACERT / REDIS_TLS_CLIENT_CERT / REDIS_TLS_CLIENT_KEY decides on the TLS Redis, and
# REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true reaches one whose certificate names another host.
# Every process is started on loopback and stopped by its pid.
# Usage: SLUICE=path/to/sluice tests/redis_tls_e2e.sh tests/redis
set -u
fixtures=$1
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl redis-server redis-cli openssl

# settings DIR URL TLS_BLOCK: the rules of tests/redis in DIR, with a sluice.yaml on URL whose
# redis.tls is TLS_BLOCK (YAML lines indented by four), and the certificates beside it.
settings() {
  mkdir -p "$1"
  cp "$fixtures/"*.yaml "$1/"
  cp "$certs/"*.pem "$certs/"*.key "$1/"
  cat >"$1/sluice.yaml" <<EOF
backend: redis
redis:
  url: $2
  instances: 4
  timeout: 2s
  tls:
$3
EOF
}

# ---------------------------------------------------------------- certificates, a mutual-TLS Redis
certs=$tmp/certs
make_tls_certs "$certs" || { echo "0 passed, 1 failed"; exit 1; }
redis_tls=$certs
start_redis_on || { echo "0 passed, 1 failed"; exit 1; }
rport=$RPORT
check "redis-server serves TLS alone" "" "$(timeout 5 redis-cli -p "$rport" ping 2>/dev/null | grep PONG)"
check "redis-server answers over mutual TLS" PONG "$(redis_cli "$rport" ping)"

mutual='    ca_file: ca.pem
    cert_file: client.pem
    key_file: client.key'
settings "$tmp/rules" "rediss://127.0.0.1:$rport" "$mutual"

# ---------------------------------------------------------------- four instances, exact limits
check "check-config accepts the TLS files" 0 "$("$sluice" check-config "$tmp/rules" >"$tmp/cc.out" 2>&1; echo $?)"
start_four s --config "$tmp/rules"
check "four instances up" 4 "$(for d in "${datas[@]}"; do [[ -n $d ]] && echo; done | wc -l)"
check_contains "start-up line names the backend over TLS" "backend redis 127.0.0.1:$rport (TLS)" "$(cat "$tmp/s0.out")"
clear_of_hour_end 60  # (fixed_window's hour must not roll over while it is counted)
for algo in token_bucket fixed_window sliding_log sliding_window; do
  # 4 x 30 = 120 requests for a limit of 40 per hour: exactly 40 admitted across the instances.
  check "$algo over mutual TLS: exactly the limit admitted across 4 instances" 40 "$(fire exact algo "$algo" 30)"
done
check "not degraded: decided on Redis" "" "$(check_one "${datas[1]}" exact user carol >/dev/null; header X-RateLimit-Status)"
keys=$(redis_cli "$rport" --scan --pattern 'sluice:*' | wc -l)
check "the states live in the TLS Redis" 1 "$((keys >= 4 ? 1 : 0))"
check "metrics: backend up" 1 "$(metric "${admins[0]}" sluice_backend_up)"
for i in 0 1 2 3; do PID=${spids[$i]} stop; check "instance $i stops cleanly" 0 "$STATUS"; done

# ---------------------------------------------------------------- refusals, each named
# refused NAME CAUSE: the instance NAME (PID, DATA, ADMIN) logs CAUSE, its /readyz names it, and
# its failure policy answers: the open domain allowed (degraded), the closed one 503.
refused() {
  local name=$1 cause=$2 i
  for i in $(seq 50); do grep -q "$cause" "$tmp/$name.out" "$tmp/$name.err" && break; sleep 0.1; done
  check_contains "$name: the log names the cause" "$cause" "$(cat "$tmp/$name.out" "$tmp/$name.err")"
  check "$name: open domain allowed" 200 "$(check_one "$DATA" open user "u-$name")"
  check "$name: degraded" degraded "$(header X-RateLimit-Status)"
  check "$name: closed domain 503" 503 "$(check_one "$DATA" closed user "u-$name")"
  check "$name: readyz 503" 503 "$(curl -s -o "$tmp/ready" -w '%{http_code}' -m 5 "http://$ADMIN/readyz")"
  check_contains "$name: readyz names the cause" "$cause" "$(cat "$tmp/ready")"
  check "$name: backend down" 0 "$(metric "$ADMIN" sluice_backend_up)"
  stop
  check "$name: stops cleanly" 0 "$STATUS"
}

settings "$tmp/wrong-ca" "rediss://127.0.0.1:$rport" '    ca_file: other-ca.pem
    cert_file: client.pem
    key_file: client.key'
start wrong-ca --config "$tmp/wrong-ca"
check "a wrong CA: serve starts (the failure policy answers)" 1 "$([[ -n $DATA ]] && echo 1)"
refused wrong-ca "certificate verify failed: self-signed certificate in certificate chain"

redis_tls_cert=expired start_redis_on || { echo "0 passed, 1 failed"; exit 1; }
settings "$tmp/expired" "rediss://127.0.0.1:$RPORT" "$mutual"
start expired --config "$tmp/expired"
refused expired "certificate verify failed: certificate has expired"

redis_tls_cert=elsewhere start_redis_on || { echo "0 passed, 1 failed"; exit 1; }
eport=$RPORT
settings "$tmp/elsewhere" "rediss://127.0.0.1:$eport" "$mutual"
start elsewhere --config "$tmp/elsewhere"
refused elsewhere "certificate verify failed: IP address mismatch"
settings "$tmp/other-name" "rediss://127.0.0.1:$rport" "$mutual
    server_name: redis.other.test"
start other-name --config "$tmp/other-name"
refused other-name "certificate verify failed: hostname mismatch"

settings "$tmp/no-cert" "rediss://127.0.0.1:$rport" '    ca_file: ca.pem'
start no-cert --config "$tmp/no-cert"
refused no-cert "the server refused the client's certificate (mutual TLS)"

# skip_hostname_verification: the other name's certificate is accepted, its chain verified.
settings "$tmp/skip" "rediss://127.0.0.1:$eport" "$mutual
    skip_hostname_verification: true"
start skip --config "$tmp/skip"
check "skip_hostname_verification: decided on Redis" 200 "$(check_one "$DATA" closed user skip)"
check "skip_hostname_verification: not degraded" "" "$(header X-RateLimit-Status)"
stop

# A TLS file that cannot be read: check-config and serve refuse it, at its place.
settings "$tmp/missing" "rediss://127.0.0.1:$rport" '    ca_file: missing.pem'
"$sluice" check-config "$tmp/missing" >"$tmp/missing.cc" 2>&1
check "a missing CA file: check-config exits 1" 1 "$?"
check_contains "check-config names the file at its place" \
  "sluice.yaml:7:14: redis.tls: TLS CA file $tmp/missing/missing.pem: cannot read it" "$(cat "$tmp/missing.cc")"
"$sluice" serve --listen 127.0.0.1:0 --admin 127.0.0.1:0 --grpc 0 --config "$tmp/missing" \
  >"$tmp/missing.out" 2>"$tmp/missing.err" &
mpid=$!; pids+=("$mpid")
for _ in $(seq 100); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.05; done
wait "$mpid" 2>/dev/null
check "a missing CA file: serve exits 1" 1 "$?"
check_contains "serve says the same" "sluice.yaml:7:14: redis.tls: TLS CA file" "$(cat "$tmp/missing.err")"

# ---------------------------------------------------------------- serve --envoy-env over TLS
envoy_runtime
deployment=(
  RUNTIME_ROOT="$runtime/current" RUNTIME_SUBDIRECTORY=ratelimit
  HOST=127.0.0.1 PORT="$port" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc_port"
  DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug_port" USE_STATSD=false LOG_LEVEL=info
  REDIS_SOCKET_TYPE=tcp REDIS_TYPE=SINGLE REDIS_TIMEOUT=2s CACHE_KEY_PREFIX=envoy_tls_
  REDIS_TLS=true REDIS_TLS_CACERT="$certs/ca.pem"
  REDIS_TLS_CLIENT_CERT="$certs/client.pem" REDIS_TLS_CLIENT_KEY="$certs/client.key"
)
json() {  # json USER: one /json request for domain api; prints the status code
  curl -s -o "$tmp/body" -w '%{http_code}' -m 5 -H 'content-type: application/json' \
    -d "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"$1\"}]}]}" \
    "http://127.0.0.1:$port/json"
}

start_env envoy "${deployment[@]}" REDIS_URL="127.0.0.1:$rport"
check_contains "envoy-env: serves on the TLS Redis" "backend redis 127.0.0.1:$rport (TLS)" "$(cat "$tmp/envoy.out")"
check "envoy-env: 1st of 2 allowed" 200 "$(json alice)"
check "envoy-env: 2nd of 2 allowed" 200 "$(json alice)"
check "envoy-env: 3rd over the limit" 429 "$(json alice)"
check "envoy-env: the states are in the TLS Redis under CACHE_KEY_PREFIX" 1 \
  "$(( $(redis_cli "$rport" --scan --pattern 'envoy_tls_*' | wc -l) > 0 ))"
stop
check "envoy-env: stops cleanly" 0 "$STATUS"

# A certificate for another name: refused, unless REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true.
start_env envoy-name "${deployment[@]}" REDIS_URL="127.0.0.1:$eport"
for _ in $(seq 50); do grep -q "IP address mismatch" "$tmp/envoy-name.err" && break; sleep 0.1; done
check_contains "envoy-env: another name's certificate is refused" "IP address mismatch" "$(cat "$tmp/envoy-name.err")"
stop
start_env envoy-skip "${deployment[@]}" REDIS_URL="127.0.0.1:$eport" REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true
check "envoy-env: REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true decides on it" 200 "$(json bob)"
check "envoy-env: and counts there" 1 \
  "$(( $(redis_cli "$eport" --insecure --scan --pattern 'envoy_tls_*' | wc -l) > 0 ))"
stop
check "envoy-env (skip): stops cleanly" 0 "$STATUS"

finish
