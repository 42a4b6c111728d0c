# Shared by the end-to-end test scripts: a temp dir and cleanup, checks and their tally,
# starting and stopping `sluice serve`. Source it after setting `sluice` (the binary).
# Every process a script starts goes into `pids` and is killed by pid on exit.

tmp=$(mktemp -d /tmp/sluice-e2e.XXXXXX)
pids=()
cleanup_hooks=()
cleanup() {
  for h in "${cleanup_hooks[@]}"; do $h; done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

passed=0 failed=0
need_tools() {  # need_tools TOOL...: fail the whole script (one failed check) if one is missing
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null && continue
    echo "$tool is missing (scripts/bootstrap.sh installs it)"
    echo "0 passed, 1 failed"
    exit 1
  done
}
check() {  # check NAME EXPECTED ACTUAL
  if [[ $2 == "$3" ]]; then
    passed=$((passed + 1)); echo "ok   $1"
  else
    failed=$((failed + 1)); echo "FAIL $1: expected [$2], got [$3]"
  fi
}
check_contains() {  # check_contains NAME NEEDLE HAYSTACK
  if [[ $3 == *"$2"* ]]; then
    passed=$((passed + 1)); echo "ok   $1"
  else
    failed=$((failed + 1)); echo "FAIL $1: [$2] not in [$3]"; return 1
  fi
}
finish() {  # prints the tally; the script's exit status
  echo "$passed passed, $failed failed"
  ((failed == 0))
}

# start NAME [ARGS...]: starts `sluice serve` on free ports and waits until it is up (it prints
# its config line last) or has exited. Sets PID, DATA, ADMIN and GRPC (empty when not serving).
# gRPC is off unless ARGS name --grpc or KEEP_GRPC=1 (its default is a fixed port).
start() {
  local name=$1; shift
  local grpc=(--grpc 0)
  [[ " $* " == *" --grpc "* || ${KEEP_GRPC:-0} == 1 ]] && grpc=()
  "$sluice" serve --listen 127.0.0.1:0 --admin 127.0.0.1:0 "${grpc[@]}" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  PID=$!
  pids+=("$PID")
  wait_started "$name"
  DATA=$(sed -n 's/^sluice: data plane listening on //p' "$tmp/$name.out")
  ADMIN=$(sed -n 's/^sluice: admin listening on //p' "$tmp/$name.out")
  GRPC=$(sed -n 's/^sluice: grpc listening on //p' "$tmp/$name.out")
}

# wait_started NAME: waits (at most 10 s) until the `sluice serve` started as NAME (pid PID,
# output in $tmp/NAME.out) has printed its config line, the last of its start-up, or has exited.
wait_started() {
  for _ in $(seq 200); do
    grep -q '^sluice: config' "$tmp/$1.out" 2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
  done
}

# stop: SIGTERM, then STATUS = the exit status (bounded wait; killed after 5 s).
stop() {
  kill -TERM "$PID"
  for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.05; done
  kill -9 "$PID" 2>/dev/null
  wait "$PID" 2>/dev/null
  STATUS=$?
}

# free_port: a loopback TCP port nobody listens on now (random, probed), below the kernel's
# ephemeral range (net.ipv4.ip_local_port_range, 32768 up by default): a port some client
# connection holds as its local end is not seen by the probe but cannot be bound.
free_port() {
  local p low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  ((low > 21000)) || low=32768
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % (low - 20000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  echo "no free port found" >&2; return 1
}

# clear_of_hour_end SECONDS: if the next hour of the clock (an epoch-aligned window of an hour or
# a day ends there) is less than SECONDS away, sleeps past it. For a test that counts a fixed
# window of an hour or a day exactly: one that rolls over while it runs admits the limit again.
clear_of_hour_end() {
  local left=$((3600 - $(date +%s) % 3600))
  if ((left < $1)); then sleep $((left + 1)); fi
}

# The headers of the last request made with -D "$tmp/headers".
header() { grep -i "^$1:" "$tmp/headers" | head -1 | cut -d' ' -f2- | tr -d '\r'; }

# redis_script_calls PORT: the script calls (EVALSHA and EVAL) the Redis on PORT has run.
redis_script_calls() {
  redis-cli -p "$1" info commandstats |
    awk -F'[:=,]' '/^cmdstat_eval(sha)?:/ {n += $3} END {print n + 0}'
}

# start_redis PORT [ARGS...]: a throwaway redis-server on 127.0.0.1:PORT; sets RPID.
start_redis() {
  local port=$1; shift
  mkdir -p "$tmp/redis-$port"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp/redis-$port" \
    --enable-debug-command local "$@" >"$tmp/redis-$port.log" 2>&1 &
  RPID=$!
  pids+=("$RPID")
  for _ in $(seq 100); do
    redis-cli -p "$port" ping 2>&1 | grep -qE 'PONG|NOAUTH' && return 0
    kill -0 "$RPID" 2>/dev/null || break
    sleep 0.05
  done
  echo "redis-server on $port did not start:"; tail -3 "$tmp/redis-$port.log"
  return 1
}

# start_redis_cluster: a 3-master Redis Cluster (no replicas) of throwaway redis-servers on
# loopback; sets cluster_ports (the masters' ports) and returns 0 once it says cluster_state:ok.
# A node's port and its cluster bus port (+10000) are both below the ephemeral range (32768+), so
# no outgoing connection can be holding either; a node that still fails to bind gets another.
start_redis_cluster() {
  local p _
  cluster_ports=()
  for _ in 1 2 3; do
    for _ in $(seq 5); do
      p=$((10000 + RANDOM % 12000))
      (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
      (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null && continue
      start_redis "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
        --cluster-node-timeout 2000 && { cluster_ports+=("$p"); break; }
    done
  done
  ((${#cluster_ports[@]} == 3)) || { echo "cluster: only ${#cluster_ports[@]} nodes started"; return 1; }
  yes yes | redis-cli --cluster create "${cluster_ports[@]/#/127.0.0.1:}" \
    --cluster-replicas 0 --cluster-yes >"$tmp/cluster.log" 2>&1
  for _ in $(seq 100); do
    redis-cli -p "${cluster_ports[0]}" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && return 0
    sleep 0.1
  done
  cat "$tmp/cluster.log"; for p in "${cluster_ports[@]}"; do tail -5 "$tmp/redis-$p.log"; done
  return 1
}
