#!/usr/bin/env bash
# End-to-end tests of the gRPC port of `sluice serve` (Envoy RLS v3 and grpc.health.v1) on
# loopback ports, with an independent client: Node.js, @grpc/grpc-js, sluice's .proto files
# (tests/grpc/client_test.js). Also: the --grpc flag and the settings key, a port in use, and
# SIGTERM with the gRPC port open.
# Usage: SLUICE=path/to/sluice tests/grpc_e2e.sh tests/grpc
set -u
fixtures=$(cd "$1" && pwd)
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools node
need_grpc_client "$fixtures"

mkdir -p "$tmp/rules"
cp "$fixtures/rules/edge.yaml" "$tmp/rules/"

# --- the Node.js client against --grpc 127.0.0.1:0
start main --config "$tmp/rules" --grpc 127.0.0.1:0
check "grpc listening line with the bound port" 1 "$([[ $GRPC =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] && echo 1)"
if [[ -n $GRPC ]]; then
  timeout 60 node "$fixtures/client_test.js" "$GRPC" >"$tmp/client.out" 2>&1
  client_status=$?
  sed 's/^/  client: /' "$tmp/client.out"
  check "node client: every check passed" 0 "$client_status"
  check "node client: ran its checks" 1 "$(grep -Eq '^[1-9][0-9]* passed, 0 failed$' "$tmp/client.out" && echo 1)"
else
  echo "sluice did not start:"; cat "$tmp/main.err"
fi
check "server alive after the client (garbage did not crash it)" 1 "$(kill -0 "$PID" 2>/dev/null && echo 1)"

# --- a second server on the same gRPC port fails to start instead of sharing it
main_pid=$PID
"$sluice" serve --config "$tmp/rules" --listen 127.0.0.1:0 --admin 127.0.0.1:0 --grpc "${GRPC:-127.0.0.1:1}" \
  >"$tmp/dup.out" 2>"$tmp/dup.err" &
dup=$!
pids+=("$dup")
for _ in $(seq 100); do kill -0 "$dup" 2>/dev/null || break; sleep 0.05; done
kill -9 "$dup" 2>/dev/null
wait "$dup" 2>/dev/null
check "gRPC port in use: exit 1" 1 "$?"
check "gRPC port in use: says why" 1 "$(grep -q 'grpc: cannot listen on' "$tmp/dup.err" && echo 1)"

# --- SIGTERM stops both servers; exit 0 and the ports are closed
PID=$main_pid
stop
check "SIGTERM with the gRPC port open: exit 0" 0 "$STATUS"
check "gRPC port closed after exit" 1 \
  "$(timeout 2 bash -c "exec 3<>/dev/tcp/${GRPC%:*}/${GRPC##*:}" 2>/dev/null || echo 1)"

# --- --grpc 0 disables the port
start off --config "$tmp/rules" --grpc 0
check "--grpc 0: no grpc line" "" "$GRPC"
check "--grpc 0: still serving HTTP" 1 "$(grep -q '^sluice: data plane listening' "$tmp/off.out" && echo 1)"
stop

# --- the settings file's grpc.listen is used when there is no flag
cat >"$tmp/sluice.yaml" <<YAML
rules: rules
grpc: {listen: 127.0.0.1:0}
YAML
KEEP_GRPC=1 start settings --config "$tmp/sluice.yaml"
check "settings grpc.listen: grpc line" 1 "$([[ $GRPC =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] && echo 1)"
stop
check "settings grpc.listen: clean exit" 0 "$STATUS"

finish
