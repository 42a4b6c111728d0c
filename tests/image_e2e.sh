#!/usr/bin/env bash
# End-to-end test of sluice's OCI image (deploy/image, docs/image.md): built from the binary under
# test (deploy/image/build.sh, a tag of its own), then run with podman exactly as Envoy Gateway
# runs envoyproxy/ratelimit's image (its resource.go): the command /bin/ratelimit and no
# arguments, user 65534:65534, a read-only root file system, RUNTIME_ROOT=/data with no volume,
# the rules over xDS (CONFIG_TYPE=GRPC_XDS_SOTW, FORCE_START_WITHOUT_INITIAL_CONFIG) from a test
# management server (tests/xds_server.cc) over mutual TLS, TLS on the gRPC listener, both with
# the certificates under /certs (made by openssl at test time), USE_PROMETHEUS=true. Only the
# ports differ: moved to free loopback ports through the same variables (PORT, GRPC_PORT,
# DEBUG_PORT, PROMETHEUS_ADDR) on the host's network; Redis is a throwaway redis-server there.
# Checks the image's configuration; the process's uid and gid and its read-only root;
# /healthcheck; a 200 (/json), gRPC over TLS, then a 429; the metrics at PROMETHEUS_ADDR moving;
# a prompt exit 0 on SIGTERM (podman stop). Then with the rules from files: a runtime directory
# mounted at /data, and none at all (no rules, every request OK).
#
# podman runs with --runtime runc and lowered --ulimit values: crun, podman's usual runtime,
# cannot start containers on these machines, and runc cannot raise the limits to podman's.
# The containers and the image's tag are removed on exit (KEEP=1 keeps them, to look at).
# Usage: SLUICE=path/to/sluice XDS_SERVER=path/to/xds_server tests/image_e2e.sh tests/grpc
set -u
fixtures=$(cd "$1" && pwd)
sluice=${SLUICE:?set SLUICE to the sluice binary}
xds_server=${XDS_SERVER:?set XDS_SERVER to the test management server}
repo=$(cd "$(dirname "$0")/.." && pwd)

source "$(dirname "$0")/lib.sh"
need_tools podman curl openssl redis-server redis-cli node
need_grpc_client "$fixtures"

run_id=$$-$RANDOM
tag=localhost/sluice-e2e:$run_id
containers=()
remove_all() {
  local c
  for c in "${containers[@]}"; do timeout 30 podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  timeout 30 podman rmi -f "$tag" >/dev/null 2>&1
  return 0
}
[[ -n ${KEEP:-} ]] || cleanup_hooks+=(remove_all)
podman_run=(podman run --runtime runc --ulimit nofile=4096:4096 --ulimit nproc=4096:4096
  --network host)

# --- The image.
built=0
timeout 120 "$repo/deploy/image/build.sh" --binary "$sluice" --tag "$tag" >"$tmp/build.log" 2>&1 && built=1
check "the image builds" 1 "$built"
((built)) || { tail -20 "$tmp/build.log"; finish; exit 1; }
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "     $(tail -1 "$tmp/build.log")"
check "the image runs as 65534:65534" 65534:65534 "$(podman image inspect --format '{{.Config.User}}' "$tag")"
check "its entry point is /bin/ratelimit" "[/bin/ratelimit]" "$(podman image inspect --format '{{.Config.Entrypoint}}' "$tag")"
check "it exposes upstream's ports" "6070/tcp 8080/tcp 8081/tcp" \
  "$(podman image inspect --format '{{range $p, $_ := .Config.ExposedPorts}}{{$p}} {{end}}' "$tag" | xargs -n1 | sort | xargs)"
# The binary and its libraries, and little else (29 MiB when this was written).
check "it is under 40 MiB" 1 "$((size < 40 * 1024 * 1024))"

# --- Redis, the certificates, the management server, the ports.
start_redis_on || fail_setup "no Redis"
rport=$RPORT
make_tls_certs "$tmp/tls" || fail_setup "no certificates"
# As Envoy Gateway mounts its secret: tls.crt, tls.key, ca.crt, readable by 65534. One
# certificate serves the gRPC port and is the xDS client's, as there.
mkdir -p "$tmp/certs"
cp "$tmp/tls/server.pem" "$tmp/certs/tls.crt"
cp "$tmp/tls/server.key" "$tmp/certs/tls.key"
cp "$tmp/tls/ca.pem" "$tmp/certs/ca.crt"
chmod 755 "$tmp/certs"
chmod 644 "$tmp/certs"/*

free_port; xport=$FREE_PORT
free_port; port=$FREE_PORT
free_port; grpc_port=$FREE_PORT
free_port; debug_port=$FREE_PORT
free_port; prom_port=$FREE_PORT
# The state of the world Envoy Gateway's controller would serve: one RateLimitConfig, domain
# api, 2 a day per user.
printf '%s\n' '{"versionInfo": "v1", "resources": [{' \
  '"@type": "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig",' \
  '"name": "api", "domain": "api",' \
  '"descriptors": [{"key": "user", "rateLimit": {"unit": "DAY", "requestsPerUnit": 2}}]}]}' \
  >"$tmp/snapshot.json"
"$xds_server" --port "$xport" --snapshot "$tmp/snapshot.json" --cert "$tmp/tls/server.pem" \
  --key "$tmp/tls/server.key" --client-ca "$tmp/tls/ca.pem" >"$tmp/xds.out" 2>&1 &
pids+=("$!")
for _ in $(seq 100); do
  grep -q "listening on 127.0.0.1:$xport" "$tmp/xds.out" && break
  sleep 0.05
done
grep -q "listening on 127.0.0.1:$xport" "$tmp/xds.out" ||
  fail_setup "xds_server did not start: $(tail -3 "$tmp/xds.out")"

# Envoy Gateway's variables (internal/infrastructure/kubernetes/ratelimit/resource.go), the hosts
# loopback for the test. REDIS_TIMEOUT is the test's own: sluice's default (10 ms) is short for a
# loaded test machine, where every answer here must come from Redis.
runtime_env=(-e RUNTIME_ROOT=/data -e RUNTIME_SUBDIRECTORY=ratelimit -e RUNTIME_IGNOREDOTFILES=true
  -e RUNTIME_WATCH_ROOT=false -e LOG_LEVEL=info -e USE_STATSD=false
  -e REDIS_SOCKET_TYPE=tcp -e "REDIS_URL=127.0.0.1:$rport" -e REDIS_TIMEOUT=2s
  -e HOST=127.0.0.1 -e "PORT=$port" -e GRPC_HOST=127.0.0.1 -e "GRPC_PORT=$grpc_port"
  -e DEBUG_HOST=127.0.0.1 -e "DEBUG_PORT=$debug_port")
gateway_env=("${runtime_env[@]}"
  -e CONFIG_TYPE=GRPC_XDS_SOTW -e "CONFIG_GRPC_XDS_SERVER_URL=localhost:$xport"
  -e CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit
  -e GRPC_SERVER_USE_TLS=true -e GRPC_SERVER_TLS_CERT=/certs/tls.crt
  -e GRPC_SERVER_TLS_KEY=/certs/tls.key -e GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt
  -e CONFIG_GRPC_XDS_SERVER_USE_TLS=true -e CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/certs/tls.crt
  -e CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/certs/tls.key -e CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/certs/ca.crt
  -e FORCE_START_WITHOUT_INITIAL_CONFIG=true
  -e USE_PROMETHEUS=true -e "PROMETHEUS_ADDR=127.0.0.1:$prom_port"
  -e PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml)

# run_gateway NAME ARGS...: the image as Envoy Gateway runs it (command /bin/ratelimit, 65534,
# read-only root) with ARGS before the image; waits (20 s) until /healthcheck answers 200 or the
# container stopped. Sets CID; returns 1 unless it answers.
run_gateway() {
  local name=sluice-e2e-$1-$run_id _; shift
  containers+=("$name")
  CID=$(timeout 60 "${podman_run[@]}" -d --name "$name" --user 65534:65534 --read-only \
    --entrypoint /bin/ratelimit "$@" "$tag" 2>"$tmp/$name.run") || { cat "$tmp/$name.run"; return 1; }
  for _ in $(seq 200); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' -m 1 "http://127.0.0.1:$port/healthcheck") == 200 ]] && return 0
    [[ $(podman inspect --format '{{.State.Running}}' "$CID" 2>/dev/null) == true ]] || break
    sleep 0.1
  done
  podman logs "$CID" 2>&1 | tail -20
  return 1
}
# stop_gateway: podman stop (SIGTERM, killed after 10 s); sets EXIT (its status) and STOP_MS.
stop_gateway() {
  local t0
  t0=$(date +%s%N)
  timeout 30 podman stop -t 10 "$CID" >/dev/null 2>&1
  STOP_MS=$((($(date +%s%N) - t0) / 1000000))
  EXIT=$(podman inspect --format '{{.State.ExitCode}}' "$CID")
}
json() {  # json USER: one /json request for domain api; prints the status, keeps the body
  curl -s -o "$tmp/body" -w '%{http_code}' -m 5 -H 'content-type: application/json' \
    -d "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"$1\"}]}]}" \
    "http://127.0.0.1:$port/json"
}
# decisions: the sum of sluice_decisions_total at PROMETHEUS_ADDR (empty if unreachable).
decisions() {
  local text
  text=$(curl -sf -m 5 "http://127.0.0.1:$prom_port/metrics") || return 0
  awk '/^sluice_decisions_total[{ ]/ {n += $NF} END {print n + 0}' <<<"$text"
}

# --- Envoy Gateway's deployment: the rules over xDS, no volume at /data.
up=0
run_gateway main -v "$tmp/certs:/certs:ro" "${gateway_env[@]}" && up=1
check "the image serves as Envoy Gateway runs it" 1 "$up"
((up)) || { finish; exit 1; }
ready=0
for _ in $(seq 100); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' -m 1 "http://127.0.0.1:$debug_port/readyz") == 200 ]] && { ready=1; break; }
  sleep 0.1
done
check "ready once the rules came over xDS (mutual TLS)" 1 "$ready"
# (The ACK follows the rules' swap, which readiness already saw: waited for, 5 s at most.)
for _ in $(seq 100); do
  grep -q 'request node=envoy-ratelimit version=v1 nonce=1-v1$' "$tmp/xds.out" && break
  sleep 0.05
done
check "the management server has its ACK" 1 \
  "$(grep -c 'request node=envoy-ratelimit version=v1 nonce=1-v1$' "$tmp/xds.out")"
podman logs "$CID" >"$tmp/main.out" 2>"$tmp/main.err"
check_contains "the data plane on PORT" "data plane listening on 127.0.0.1:$port" "$(cat "$tmp/main.out")"
check_contains "gRPC on GRPC_PORT" "grpc listening on 127.0.0.1:$grpc_port" "$(cat "$tmp/main.out")"
check_contains "Prometheus on PROMETHEUS_ADDR" "prometheus listening on 127.0.0.1:$prom_port" "$(cat "$tmp/main.out")"
check_contains "the rules from the xDS server" "config xDS localhost:$xport" "$(cat "$tmp/main.out")"

pid=$(podman inspect --format '{{.State.Pid}}' "$CID")
check "the process runs as uid 65534" "65534 65534 65534 65534" "$(awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")"
check "and gid 65534" "65534 65534 65534 65534" "$(awk '/^Gid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")"
check "the container's root is read-only" true "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$CID")"
check "its / is mounted ro" ro "$(awk '$5 == "/" {split($6, o, ","); print o[1]}' "/proc/$pid/mountinfo")"

check "/healthcheck on PORT" 200 "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$port/healthcheck")"
check "/metrics at PROMETHEUS_ADDR before any request" 0 "$(decisions)"
check "/json: first request" 200 "$(json alice)"
check_contains "/json: the limit from xDS" '"requestsPerUnit":2' "$(cat "$tmp/body")"
grpc_answer=$(TLS_CA="$tmp/tls/ca.pem" timeout 10 node "$fixtures/should_rate_limit.js" \
  "127.0.0.1:$grpc_port" api user alice 2>&1 | tail -1)
check "gRPC over TLS on GRPC_PORT (2nd of 2)" "OK 2/DAY" "$grpc_answer"
plain=$(timeout 10 node "$fixtures/should_rate_limit.js" "127.0.0.1:$grpc_port" api user alice 2>&1 | tail -1)
check "gRPC without TLS is refused" UNAVAILABLE "$plain"
check "/json: third request is over the limit" 429 "$(json alice)"
check "the metrics at PROMETHEUS_ADDR counted the decisions" 3 "$(decisions)"
check "PROMETHEUS_ADDR serves only PROMETHEUS_PATH" 404 \
  "$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$prom_port/readyz")"
check_contains "the admin port's /metrics has them too" "sluice_backend_up 1" \
  "$(curl -s -m 5 "http://127.0.0.1:$debug_port/metrics")"

# --- SIGTERM: podman stop (10 s before it kills) ends it with 0, promptly.
stop_gateway
check "stops on SIGTERM with status 0" 0 "$EXIT"
check "within 5 s of SIGTERM" 1 "$((STOP_MS < 5000))"
echo "     (stopped in $STOP_MS ms)"
check_contains "it logged the signal" "signal 15, shutting down" "$(podman logs "$CID" 2>&1)"

# --- The rules from files (CONFIG_TYPE's default): a runtime directory as a read-only volume.
mkdir -p "$tmp/data/ratelimit/config"
printf '%s\n' 'domain: api' 'descriptors:' '  - key: user' '    rate_limit:' '      unit: day' \
  '      requests_per_unit: 3' >"$tmp/data/ratelimit/config/api.yaml"
chmod 755 "$tmp/data" "$tmp/data/ratelimit" "$tmp/data/ratelimit/config"
chmod 644 "$tmp/data/ratelimit/config/api.yaml"
up=0
run_gateway files -v "$tmp/data:/data:ro" "${runtime_env[@]}" && up=1
check "with the rules from /data it serves" 1 "$up"
check "/json: a limit from /data" 200 "$(json bob)"
check_contains "/json: 3 a day" '"requestsPerUnit":3' "$(cat "$tmp/body")"
stop_gateway
check "stops on SIGTERM with status 0 (files)" 0 "$EXIT"

# --- No volume at /data: it starts, without rules (every request OK), and says why.
up=0
run_gateway empty "${runtime_env[@]}" && up=1
check "with no runtime directory it still serves" 1 "$up"
check "/json without rules is OK" 200 "$(json carol)"
check_contains "and it says the directory is missing" "/data/ratelimit/config does not exist" \
  "$(podman logs "$CID" 2>&1)"
stop_gateway
check "stops on SIGTERM with status 0 (no rules)" 0 "$EXIT"

finish
