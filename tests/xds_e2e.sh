#!/usr/bin/env bash
# The rules over xDS, end to end, as Envoy Gateway runs its rate limit deployment: a test
# management server (tests/xds_server.cc) over mutual TLS serving Envoy Gateway's own rule sets
# (tests/xds/gateway/) as RateLimitConfig resources, and `sluice serve --envoy-env` with exactly
# the variables Envoy Gateway sets on that container (its TLS on both sides: the gRPC listener
# and the xDS client, one certificate for both as Envoy Gateway mounts it), on a Redis. Only the
# ports and the files' places differ (loopback, the temp dir). Checks:
#   - FORCE_START_WITHOUT_INITIAL_CONFIG=true with no server yet: up (/healthcheck) but not ready
#     (/readyz) until the first version, then decisions on it (/json and gRPC over mutual TLS);
#   - each new version decides within 1 s of its publication, and is ACKed;
#   - an invalid version is NACKed with a message and the old rules still decide;
#   - the server restarts: sluice reconnects (upstream's default backoff, 10 s), resumes from the
#     last version it ACKed, and follows the next one;
#   - the metrics (connected, versions applied and rejected, the version, streams);
#   - without FORCE_START_WITHOUT_INITIAL_CONFIG, serve listens only once the rules came, and a
#     SIGTERM while it waits stops it cleanly;
#   - sluice's own settings file with config_source.xds (check-config and serve).
#
# Usage: SLUICE=path/to/sluice XDS_SERVER=path/to/xds_server tests/xds_e2e.sh tests/grpc
set -u
fixtures=$(cd "$1" && pwd)
sluice=${SLUICE:?set SLUICE to the sluice binary}
xds_server=${XDS_SERVER:?set XDS_SERVER to the test management server}
gateway=$(cd "$(dirname "$0")/xds/gateway" && pwd)

source "$(dirname "$0")/lib.sh"
need_tools node openssl curl python3 redis-server
need_grpc_client "$fixtures"

certs=$tmp/certs
make_tls_certs "$certs" || fail_setup "no certificates"
start_redis_on || fail_setup "no redis-server"

# snapshot VERSION FILE [SED]: the state of the world the server serves (a DiscoveryResponse in
# protobuf's JSON form), one RateLimitConfig made of Envoy Gateway's YAML FILE, edited by the sed
# expression SED if given; the server reads it at start and on SIGHUP.
snapshot() {
  local version=$1 file=$2 edit=${3:-}
  python3 - "$version" "$gateway/$file" "$edit" >"$tmp/snapshot.json.new" <<'EOF' || return 1
import json, re, subprocess, sys, yaml
version, path, edit = sys.argv[1:4]
text = open(path).read()
if edit:
    text = subprocess.run(["sed", "-e", edit], input=text, capture_output=True, text=True, check=True).stdout
def clean(d):  # fields of the YAML form without a RateLimitConfig field; nulls as absent
    out = {k: v for k, v in d.items() if k not in ("value_to_metric", "share_threshold") and v is not None}
    if "descriptors" in out:
        out["descriptors"] = [clean(c) for c in out["descriptors"]]
    return out
config = clean(yaml.safe_load(text))
config["@type"] = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
print(json.dumps({"versionInfo": version, "resources": [config]}))
EOF
  mv "$tmp/snapshot.json.new" "$tmp/snapshot.json"
}

# start_xds PORT: the management server on 127.0.0.1:PORT (mutual TLS: clients need a certificate
# of the CA); sets XPID.
start_xds() {
  : >"$tmp/xds.out"
  "$xds_server" --port "$1" --snapshot "$tmp/snapshot.json" --cert "$certs/server.pem" \
    --key "$certs/server.key" --client-ca "$certs/ca.pem" >>"$tmp/xds.all" 2>&1 &
  XPID=$!
  pids+=("$XPID")
  local _
  for _ in $(seq 100); do
    grep -q "listening on 127.0.0.1:$1" "$tmp/xds.all" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "xds_server did not start:"; tail -3 "$tmp/xds.all"
  return 1
}
# wait_xds PATTERN [SECONDS]: waits (5 s) for a line of the server's output matching PATTERN.
wait_xds() {
  local _
  for _ in $(seq $((${2:-5} * 20))); do
    grep -qE "$1" "$tmp/xds.all" && return 0
    sleep 0.05
  done
  return 1
}

# month_json [PORT]: one /json request on Envoy Gateway's first route, its monthly rule; prints
# the status code, keeps the body.
month_json() {
  curl -s -o "$tmp/body" -w '%{http_code}' -m 5 -H 'content-type: application/json' \
    -d '{"domain":"first-listener","descriptors":[{"entries":[{"key":"first-route","value":"first-route"},{"key":"rule-0-match-0","value":"rule-0-match-0"}]}]}' \
    "http://127.0.0.1:${1:-$port}/json"
}
limit_of() { sed -n 's/.*"currentLimit":{"requestsPerUnit":\([0-9]*\),"unit":"\([A-Z]*\)"}.*/\1\/\2/p' "$tmp/body"; }
ms() { date +%s%3N; }

# ---------------------------------------------------------------- Envoy Gateway's deployment
free_port; xport=$FREE_PORT
free_port; port=$FREE_PORT
free_port; grpc_port=$FREE_PORT
free_port; debug_port=$FREE_PORT
free_port; prometheus_port=$FREE_PORT
eg_env=(RUNTIME_ROOT=/data RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_IGNOREDOTFILES=true
  RUNTIME_WATCH_ROOT=false LOG_LEVEL=info USE_STATSD=false CONFIG_TYPE=GRPC_XDS_SOTW
  CONFIG_GRPC_XDS_SERVER_URL="localhost:$xport" CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit
  GRPC_SERVER_USE_TLS=true GRPC_SERVER_TLS_CERT="$certs/server.pem"
  GRPC_SERVER_TLS_KEY="$certs/server.key" GRPC_SERVER_TLS_CA_CERT="$certs/ca.pem"
  CONFIG_GRPC_XDS_SERVER_USE_TLS=true CONFIG_GRPC_XDS_CLIENT_TLS_CERT="$certs/server.pem"
  CONFIG_GRPC_XDS_CLIENT_TLS_KEY="$certs/server.key" CONFIG_GRPC_XDS_SERVER_TLS_CACERT="$certs/ca.pem"
  FORCE_START_WITHOUT_INITIAL_CONFIG=true REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$RPORT"
  REDIS_TIMEOUT=2s
  USE_PROMETHEUS=true PROMETHEUS_ADDR="127.0.0.1:$prometheus_port"
  PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml)
ports_env=(HOST=127.0.0.1 PORT="$port" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc_port"
  DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug_port")

start_env eg "${eg_env[@]}" "${ports_env[@]}"
eg=$PID
check "FORCE_START: serving before the management server is up" 1 \
  "$(grep -q '^sluice: config' "$tmp/eg.out" && echo 1)"
check_contains "the start-up line names the xDS server" "config xDS localhost:$xport" "$(cat "$tmp/eg.out")"
check "/healthcheck answers before the first rule set" 200 \
  "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$port/healthcheck")"
check "/readyz: not ready before the first rule set" 503 \
  "$(curl -s -o "$tmp/readyz" -w '%{http_code}' -m 5 "http://127.0.0.1:$debug_port/readyz")"
check_contains "/readyz says why" "waiting for the first rule set over xDS" "$(cat "$tmp/readyz")"

snapshot v1 month-year-rule.yaml || fail_setup "no snapshot"
start_xds "$xport" || fail_setup "no management server"
wait_xds "request node=envoy-ratelimit version=v1 nonce=1-v1$" 10
check "v1 is ACKed (after the subscription)" 1 \
  "$(grep -c "request node=envoy-ratelimit version=v1 nonce=1-v1$" "$tmp/xds.all")"
check "the subscription came first, with no version" 1 \
  "$(grep -m1 '^request' "$tmp/xds.all" | grep -c 'version= nonce=$')"
ready=0
for _ in $(seq 40); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$debug_port/readyz") == 200 ]] && { ready=1; break; }
  sleep 0.05
done
check "/readyz: ready once v1 is in force" 1 "$ready"
codes=""
for _ in 1 2 3 4 5 6; do codes+="$(month_json) "; done
check "v1: five a month on the first route, then 429" "200 200 200 200 200 429 " "$codes"
check "v1: the limit answered" 5/MONTH "$(limit_of)"
as_client=(TLS_CA="$certs/ca.pem" TLS_CERT="$certs/client.pem" TLS_KEY="$certs/client.key")
check "gRPC over mutual TLS on Envoy Gateway's rule set" "OVER_LIMIT 5/MONTH" \
  "$(env "${as_client[@]}" timeout 15 node "$fixtures/should_rate_limit.js" "127.0.0.1:$grpc_port" \
    first-listener first-route first-route rule-0-match-0 rule-0-match-0 2>&1 | tail -1)"
# Envoy Gateway sets GRPC_SERVER_TLS_CA_CERT, which upstream never reads, and not
# GRPC_CLIENT_TLS_CACERT: TLS, but no client certificate asked for, as upstream serves it.
check "gRPC over TLS without a client certificate: served, as upstream does" "OK -" \
  "$(TLS_CA="$certs/ca.pem" timeout 15 node "$fixtures/should_rate_limit.js" "127.0.0.1:$grpc_port" \
    first-listener first-route first-route 2>&1 | tail -1)"
check "gRPC in plaintext: refused" UNAVAILABLE \
  "$(timeout 15 node "$fixtures/should_rate_limit.js" "127.0.0.1:$grpc_port" \
    first-listener first-route first-route 2>&1 | tail -1)"

year_json() {  # the second route's yearly rule (one a year)
  curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'content-type: application/json' \
    -d '{"domain":"first-listener","descriptors":[{"entries":[{"key":"second-route","value":"second-route"},{"key":"rule-0-match-0","value":"rule-0-match-0"}]}]}' \
    "http://127.0.0.1:$port/json"
}
check "v1: one a year on the second route" "200 429" "$(year_json) $(year_json)"

# A new version: 8 a month. A limit that did not change keeps its count (as for files).
snapshot v2 month-year-rule.yaml '0,/requests_per_unit: 5/s//requests_per_unit: 8/' || fail_setup "no snapshot"
sent=$(ms)
kill -HUP "$XPID"
followed=""
for _ in $(seq 200); do
  [[ $(month_json) == 200 && $(limit_of) == 8/MONTH ]] && { followed=$(($(ms) - sent)); break; }
  sleep 0.005
done
check "v2 decides within 1 s of its publication" 1 "$([[ -n $followed && $followed -lt 1000 ]] && echo 1)"
echo "     (v2 followed after ${followed:-never} ms)"
wait_xds "version=v2 nonce=2-v2$"
check "v2: the unchanged yearly limit kept its count" 429 "$(year_json)"
check "v2 is ACKed" 1 "$(grep -c "request node=envoy-ratelimit version=v2 nonce=2-v2$" "$tmp/xds.all")"

# An invalid version: a limit without a unit (UNKNOWN). NACKed; v2 still decides.
snapshot v3 month-year-rule.yaml '/unit: YEAR/d' || fail_setup "no snapshot"
kill -HUP "$XPID"
wait_xds "nonce=3-v3 error="
nack=$(grep "nonce=3-v3 error=" "$tmp/xds.all")
check_contains "v3 is NACKed with the last version ACKed" "version=v2 nonce=3-v3 error=3:" "$nack"
check_contains "the NACK names the fault" "xds:first-listener" "$nack"
check_contains "the NACK says what is wrong" "UNKNOWN" "$nack"
month_json >/dev/null
check "v2 still decides after the NACK" 8/MONTH "$(limit_of)"

# The server restarts with v4 (the client CIDR rule set): sluice comes back after upstream's
# default backoff (10 s), resuming from v2, and takes v4.
stop "$XPID"
snapshot v4 masked-remote-address-match.yaml || fail_setup "no snapshot"
: >"$tmp/xds.all"
start_xds "$xport" || fail_setup "no management server after the restart"
wait_xds "version=v4 nonce=1-v4$" 20
check "after the restart: resumed from the last version ACKed" 1 \
  "$(grep -m1 '^request' "$tmp/xds.all" | grep -c 'version=v2 nonce=2-v2$')"
check "after the restart: v4 is ACKed" 1 "$(grep -c 'version=v4 nonce=1-v4$' "$tmp/xds.all")"
# Five a second is an epoch-aligned window of one second: the six requests count as one only
# when they fall within one second of the clock. One curl sends all six over one connection
# (milliseconds, even on a loaded machine); sent again, in a later second, when the clock's
# second changed while they went out (a second's end fell among them).
cidr_body='{"domain":"first-listener","descriptors":[{"entries":[{"key":"first-route","value":"first-route"},{"key":"masked_remote_address","value":"192.168.0.0/16"}]}]}'
for _ in 1 2 3 4 5; do
  second=$(date +%s)
  cidr=$(curl -s -m 5 -H 'content-type: application/json' -d "$cidr_body" -w '%{stderr}%{http_code} ' \
    "http://127.0.0.1:$port/json" "http://127.0.0.1:$port/json" "http://127.0.0.1:$port/json" \
    "http://127.0.0.1:$port/json" "http://127.0.0.1:$port/json" "http://127.0.0.1:$port/json" \
    2>&1 >/dev/null)
  [[ $(date +%s) == "$second" ]] && break
  sleep 1
done
check "v4: five a second for 192.168.0.0/16" "200 200 200 200 200 429 " "$cidr"
check "v4: the monthly rule is gone" 200 "$(month_json)"

m=127.0.0.1:$prometheus_port  # where Envoy Gateway's Prometheus scrapes (PROMETHEUS_ADDR)
check "metric: connected" 1 "$(metric "$m" sluice_xds_connected)"
check "metric: versions applied" 3 "$(metric "$m" 'sluice_xds_updates_total{result="applied"}')"
check "metric: versions rejected" 1 "$(metric "$m" 'sluice_xds_updates_total{result="rejected"}')"
check "metric: the version in force" 1 "$(metric "$m" 'sluice_xds_config_version_info{version="v4"}')"
check "metric: streams opened" 2 "$(metric "$m" sluice_xds_streams_total)"

# Shadow mode down a chain of header matches (global-shadow-mode): counted, never denied.
snapshot v5 global-shadow-mode.yaml || fail_setup "no snapshot"
kill -HUP "$XPID"
wait_xds "version=v5 nonce=2-v5$"
shadow=""
body='{"domain":"first-listener","descriptors":[{"entries":[{"key":"first-route","value":"first-route"},{"key":"rule-0-match-0","value":"rule-0-match-0"},{"key":"rule-0-match-1","value":"rule-0-match-1"},{"key":"rule-0-match-2","value":"rule-0-match-2"},{"key":"masked_remote_address","value":"0.0.0.0/0"}]}]}'
for _ in 1 2 3 4 5 6 7; do
  shadow+="$(curl -s -o "$tmp/body" -w '%{http_code}' -m 5 -H 'content-type: application/json' \
    -d "$body" "http://127.0.0.1:$port/json") "
done
check "v5: shadow mode never denies" "200 200 200 200 200 200 200 " "$shadow"
check "v5: the shadowed limit is reported" 5/SECOND "$(limit_of)"
# Twelve more on one connection (well within two seconds): at least two over 5 a second, each
# counted as shadow's; the limit's gauge follows the rules over xDS.
urls=()
for _ in $(seq 12); do urls+=("http://127.0.0.1:$port/json"); done
curl -s -m 10 -H 'content-type: application/json' -d "$body" "${urls[@]}" >/dev/null
check "metric: the shadowed denials counted by reason (at least 2)" yes "$(
  n=$(metric "$m" 'sluice_decision_reasons_total{domain="first-listener",limit="5-per-1s",reason="shadow"}' 0)
  ((n >= 2)) && echo yes || echo "no: $n")"
check "metric: the limit's gauge from xDS" 5 "$(metric "$m" 'sluice_limit{domain="first-listener",limit="5-per-1s"}')"
stop "$eg"
check "stops cleanly on SIGTERM" 0 "$STATUS"

# ---------------------------------------------------------------- without FORCE_START
no_force=()
for v in "${eg_env[@]}"; do [[ $v == FORCE_START_WITHOUT_INITIAL_CONFIG=* ]] || no_force+=("$v"); done
free_port; port=$FREE_PORT
free_port; grpc_port=$FREE_PORT
free_port; debug_port=$FREE_PORT
ports_env=(HOST=127.0.0.1 PORT="$port" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc_port"
  DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug_port")
start_env waits "${no_force[@]}" "${ports_env[@]}"
check "without FORCE_START: listening once the rules came" 200 "$(month_json "$port")"
check_contains "without FORCE_START: the start-up line has the xDS version's config" \
  "sluice: config xDS" "$(cat "$tmp/waits.out")"
stop
stop "$XPID"
free_port; gone=$FREE_PORT
start_env waits2 "${no_force[@]/CONFIG_GRPC_XDS_SERVER_URL=*/CONFIG_GRPC_XDS_SERVER_URL=localhost:$gone}" \
  "${ports_env[@]}"
check "without FORCE_START and no server: not listening" 0 \
  "$(grep -c '^sluice: config' "$tmp/waits2.out")"
stop "$PID" 5
check "a SIGTERM while it waits for the rules stops it cleanly" 0 "$STATUS"

# ---------------------------------------------------------------- sluice's own settings
start_xds "$xport" || fail_setup "no management server"
cat >"$tmp/sluice.yaml" <<EOF
backend: memory
config_source:
  xds:
    server_url: localhost:$xport
    node_id: settings-node
    node_metadata: {cluster: edge}
    tls: {ca_file: $certs/ca.pem, cert_file: $certs/client.pem, key_file: $certs/client.key}
EOF
check "check-config takes config_source.xds" 0 "$("$sluice" check-config "$tmp/sluice.yaml" >/dev/null 2>&1; echo $?)"
start settings --config "$tmp/sluice.yaml"
wait_xds "request node=settings-node version=v5" 10
check "settings file: the rules over xDS" 1 "$(grep -c 'request node=settings-node version=v5 nonce=1-v5$' "$tmp/xds.all")"
check "settings file: decisions on them" 200 \
  "$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'content-type: application/json' -d "$body" "http://$DATA/v1/check")"
stop
finish
