#!/usr/bin/env bash
# The soak (issue 18): a bounded run of `sluice serve` under mixed load and faults, on loopback
# only, that proves nothing is lost — or says what was.
#
#   bench/soak.sh               SOAK_MINUTES (default 30) of load and faults, then a report
#   SOAK_SECONDS=120 bench/soak.sh                       the 2-minute run that `make test` does
#
# Each phase starts a Redis (with AOF, appendfsync always, so that a kill -9 loses nothing it
# acknowledged) or a 3-master Redis Cluster with a replica each, the test upstream
# (tests/upstream_server.cc), two `sluice serve` on that Redis (domains with exact limits
# shared by both) and one on the memory store with a small store.max_entries, and
# bench/soak/driver.js, which sends an open-loop, rate-limited mix over POST /v1/check, POST
# /json, gRPC ShouldRateLimit, forward-auth /v1/auth and the reverse proxy (upstream answers
# sometimes 500, sometimes stalls past upstream_timeout), on hot keys with exact limits
# (fixed_window, sliding_log) and many cooler keys, while it reloads the rules (a tenth invalid,
# some written in place in two pieces), resets keys through the admin API, floods the memory
# instance with unique keys and samples RSS and /readyz every second. This script meanwhile
# kills Redis (-9, restarted from its AOF), stops it (SIGSTOP/SIGCONT), and in the cluster phase
# fails a master over to its replica (CLUSTER FAILOVER), on a schedule scaled to the duration.
# The sentinel phase runs on a master and two replicas that speak mutual TLS alone, found
# through three redis-sentinels over TLS (redis.sentinel, rediss://): its faults are two
# failovers, the master SIGKILLed (the sentinels promote a replica; the old master comes back as
# a replica) and SENTINEL FAILOVER.
# Then bench/soak/analyze.js reads every request's record and writes the report
# (SOAK_OUT/report.md, PNG plots by gnuplot): requests by frontend and answer, unanswered ones,
# admissions beyond an exact limit in any window (certain ones only: a request counts in a
# window only when its whole [send, receive] interval lies in it; windows of failure_mode
# open/local domains that overlap a Redis outage are counted apart), denials under the limit,
# crashes, RSS, p99, readiness during outages, reloads.
#
# Phases: SOAK_CLUSTER=0 one Redis only, 1 the cluster only, auto (default) all three when the
# run is 10 minutes or longer (one Redis half of it, the cluster and Sentinel a quarter each),
# else one Redis only; SOAK_SENTINEL=1: the Sentinel phase only.
# Exit status: 0 when every check passed, 1 otherwise (the report says which), 2 on a setup
# failure. Every process started here is stopped by its pid on exit.
#
# Env: SOAK_MINUTES (30, fractional allowed) or SOAK_SECONDS (wins), SOAK_CLUSTER (auto), SOAK_SENTINEL,
#   SOAK_OUT (build/soak-<UTC timestamp>), SOAK_RPS (120 requests/s of mixed load),
#   SOAK_FLOOD_RPS (150 unique keys/s during floods), SLUICE (build/release/sluice),
#   UPSTREAM (build/release/upstream_server).
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
sluice=${SLUICE:-$root/build/release/sluice}
upstream=${UPSTREAM:-$root/build/release/upstream_server}
grpc_modules=$root/tests/grpc/node_modules

if [[ -n ${SOAK_SECONDS:-} ]]; then
  total=$SOAK_SECONDS
else
  total=$(awk -v m="${SOAK_MINUTES:-30}" 'BEGIN { printf "%d", m * 60 }')
fi
((total >= 30)) || { echo "soak: at least 30 seconds (SOAK_SECONDS=$total)" >&2; exit 2; }
out=${SOAK_OUT:-$root/build/soak-$(date -u +%Y%m%dT%H%M%SZ)}
rps=${SOAK_RPS:-120}
flood_rps=${SOAK_FLOOD_RPS:-150}
cluster_mode=${SOAK_CLUSTER:-auto}

for tool in node redis-server redis-cli curl gnuplot redis-sentinel openssl; do
  command -v $tool >/dev/null || { echo "soak: $tool is missing (scripts/bootstrap.sh installs it)" >&2; exit 2; }
done
for f in "$sluice" "$upstream"; do [[ -x $f ]] || { echo "soak: $f is not built" >&2; exit 2; }; done
[[ -d $grpc_modules/@grpc/grpc-js ]] || { echo "soak: npm ci in tests/grpc first (scripts/bootstrap.sh)" >&2; exit 2; }

mkdir -p "$out"
# Starting and stopping by pid (every process started goes into `pids`, killed on exit, Redis
# restarts included), ports, the work dir $tmp.
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
trap 'exit 1' INT TERM
work=$tmp

now_ms() { date +%s%3N; }
log() { echo "soak: $(date -u +%H:%M:%S) $*" >&2; }

# soak_redis PORT [ARGS...]: tests/lib.sh's start_redis (on 127.0.0.1:PORT, waiting until it is
# ready, loading the AOF included; sets RPID) with its AOF (appendfsync always) in
# $work/PHASE/redis-PORT, kept across restarts.
soak_redis() {
  local port=$1; shift
  redis_dir=$work/$phase start_redis "$port" --appendonly yes --appendfsync always "$@" >&2
}

# start_instance NAME ARGS...: `sluice serve` (tests/lib.sh's start) on free ports with gRPC, its
# output in the phase's directory. Sets PID DATA ADMIN GRPC.
start_instance() {
  local name=$1; shift
  start "$phase_dir/$name" --grpc 127.0.0.1:0 --threads 1 "$@" && [[ -n $DATA && -n $ADMIN && -n $GRPC ]] ||
    { log "$name did not start: $(tail -3 "$phase_dir/$name.err")"; return 1; }
}

fault() {  # fault START_MS WHAT DETAIL: one line of faults.tsv, ending now
  printf '%s\t%s\t%s\t%s\n' "$1" "$(now_ms)" "$2" "$3" >>"$phase_dir/faults.tsv"
}

# The rules, the same for every phase. The limits' figures are also written to limits.json for
# the analysis, from the same variables.
write_rules() {
  local dir=$1 up=$2
  mkdir -p "$dir/rules"
  cat >"$dir/rules/exact.yaml" <<EOF
# Exact limits on Redis, shared by both instances and every frontend (forward-auth and the
# proxy through the http routes: one header, one descriptor). A backend failure is a 503.
domain: exact
failure_mode: closed
http:
  upstream: http://$up
  refund_on: [5xx, timeout]
  routes:
    - match: {prefix: /}
      rate_limits:
        - actions: [{request_headers: {header_name: X-Hot, descriptor_key: hot}}]
        - actions: [{request_headers: {header_name: X-Slog, descriptor_key: slog}}]
        - actions: [{request_headers: {header_name: X-User, descriptor_key: user}}]
descriptors:
  - key: hot
    rate_limit: {algorithm: fixed_window, requests: 6, window: 1s}
  - key: slog
    rate_limit: {algorithm: sliding_log, requests: 5, window: 1s}
  - key: user
    rate_limit: {algorithm: fixed_window, requests: 3, window: 5s}
EOF
  cat >"$dir/rules/openx.yaml" <<'EOF'
# The same hot-key limit, failing open: admissions while Redis is away are counted apart.
domain: openx
failure_mode: open
descriptors:
  - key: hot
    rate_limit: {algorithm: fixed_window, requests: 3, window: 1s}
EOF
  cat >"$dir/rules/localx.yaml" <<'EOF'
domain: localx
failure_mode: local
descriptors:
  - key: hot
    rate_limit: {algorithm: fixed_window, requests: 2, window: 1s}
EOF
  cat >"$dir/rules/mem.yaml" <<'EOF'
# Exact limits on the memory-store instance (its own store, so per instance), and the flood's
# domain: unique keys with an hour's window, live for as long as the run.
domain: mem
descriptors:
  - key: hot
    rate_limit: {algorithm: fixed_window, requests: 6, window: 1s}
  - key: slog
    rate_limit: {algorithm: sliding_log, requests: 5, window: 1s}
EOF
  cat >"$dir/rules/flood.yaml" <<'EOF'
domain: flood
descriptors:
  - key: f
    rate_limit: {algorithm: fixed_window, requests: 5, window: 1h}
EOF
  cat >"$dir/rules/churn.yaml" <<'EOF'
domain: churn
descriptors:
  - key: c
    rate_limit: {requests: 1000, window: 1s}
EOF
  cat >"$dir/limits.json" <<'EOF'
[
 {"domain": "exact", "key": "hot", "algorithm": "fixed_window", "limit": 6, "window_ms": 1000, "failure_mode": "closed", "scope": "shared"},
 {"domain": "exact", "key": "slog", "algorithm": "sliding_log", "limit": 5, "window_ms": 1000, "failure_mode": "closed", "scope": "shared"},
 {"domain": "exact", "key": "user", "algorithm": "fixed_window", "limit": 3, "window_ms": 5000, "failure_mode": "closed", "scope": "shared", "resets": true},
 {"domain": "openx", "key": "hot", "algorithm": "fixed_window", "limit": 3, "window_ms": 1000, "failure_mode": "open", "scope": "shared"},
 {"domain": "localx", "key": "hot", "algorithm": "fixed_window", "limit": 2, "window_ms": 1000, "failure_mode": "local", "scope": "shared"},
 {"domain": "mem", "key": "hot", "algorithm": "fixed_window", "limit": 6, "window_ms": 1000, "failure_mode": "none", "scope": "instance"},
 {"domain": "mem", "key": "slog", "algorithm": "sliding_log", "limit": 5, "window_ms": 1000, "failure_mode": "none", "scope": "instance"}
]
EOF
}

# ---------------------------------------------------------------- Redis: one server or a cluster
redis_ports=() redis_pids=()
start_single() {
  local p
  for _ in 1 2 3; do
    free_node_port || continue
    p=$FREE_PORT
    soak_redis "$p" && { redis_ports=("$p"); redis_pids=("$RPID"); return 0; }
  done
  return 1
}
start_cluster() {
  local i p
  redis_ports=() redis_pids=()
  for i in 0 1 2 3 4 5; do
    for _ in 1 2 3; do
      free_node_port || continue
      p=$FREE_PORT
      soak_redis "$p" --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-node-timeout 8000 && { redis_ports+=("$p"); redis_pids+=("$RPID"); break; }
    done
  done
  ((${#redis_ports[@]} == 6)) || return 1
  local addrs=()
  for p in "${redis_ports[@]}"; do addrs+=("127.0.0.1:$p"); done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$phase_dir/cluster-create.log" 2>&1
  for _ in $(seq 200); do
    local ok=1
    for p in "${redis_ports[@]}"; do
      redis-cli -p "$p" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || ok=0
    done
    ((ok)) && return 0
    sleep 0.1
  done
  log "the cluster did not form: $(tail -3 "$phase_dir/cluster-create.log")"
  return 1
}
# port_pid[PORT]: the redis-server pid now serving PORT (a restart changes it).
declare -A port_pid
masters() {  # the ports of the masters that are up, from any node's CLUSTER NODES
  local p out
  for p in "${redis_ports[@]}"; do
    out=$(redis-cli -p "$p" cluster nodes 2>/dev/null | awk '$3 ~ /master/ && $3 !~ /fail/ {split($2, a, "[:@]"); print a[2]}')
    [[ -n $out ]] && { echo "$out"; return; }
  done
}
replica_of() {  # replica_of MASTER_PORT: the port of one of its replicas
  local id
  id=$(redis-cli -p "$1" cluster myid)
  redis-cli -p "$1" cluster nodes | awk -v id="$id" '$4 == id {split($2, a, "[:@]"); print a[2]; exit}'
}

# ---------------------------------------------------------------- Redis Sentinel over mutual TLS
# A master and two replicas that speak mutual TLS alone (replication too), and three
# redis-sentinels over TLS (quorum 2, a master down after 1 s). Setting redis_tls makes
# tests/lib.sh's start_redis and redis_cli speak TLS, until the phase ends.
sentinel_ports=() sentinel_pids=()
start_sentinel_set() {
  local i p conf info
  redis_tls=$work/$phase/certs
  make_tls_certs "$redis_tls" >"$phase_dir/certs.log" 2>&1 ||
    { log "openssl failed: $(tail -3 "$phase_dir/certs.log")"; return 1; }
  redis_ports=() redis_pids=()
  for i in 0 1 2; do
    for _ in 1 2 3; do
      free_port || continue
      p=$FREE_PORT
      soak_redis "$p" --tls-replication yes ${redis_ports[0]:+--replicaof 127.0.0.1 "${redis_ports[0]}"} &&
        { redis_ports+=("$p"); redis_pids+=("$RPID"); break; }
    done
  done
  ((${#redis_ports[@]} == 3)) || return 1
  for _ in $(seq 100); do
    redis_cli "${redis_ports[0]}" info replication 2>/dev/null | grep '^connected_slaves:2' >/dev/null && break
    sleep 0.1
  done
  sentinel_ports=() sentinel_pids=()
  for i in 0 1 2; do
    for _ in 1 2 3; do
      free_port || continue
      p=$FREE_PORT
      conf=$work/$phase/sentinel-$p.conf
      cat >"$conf" <<EOF
port 0
tls-port $p
tls-cert-file $redis_tls/server.pem
tls-key-file $redis_tls/server.key
tls-ca-cert-file $redis_tls/ca.pem
tls-auth-clients yes
tls-replication yes
bind 127.0.0.1
dir $work/$phase
sentinel resolve-hostnames no
sentinel monitor mymaster 127.0.0.1 ${redis_ports[0]} 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 4000
EOF
      redis-sentinel "$conf" >"$phase_dir/sentinel-$p.log" 2>&1 &
      local spid=$! up=0
      pids+=("$spid")
      for _ in $(seq 100); do
        redis_cli "$p" ping 2>/dev/null | grep PONG >/dev/null && { up=1; break; }
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.05
      done
      ((up)) && { sentinel_ports+=("$p"); sentinel_pids+=("$spid"); break; }
      kill "$spid" 2>/dev/null
    done
  done
  ((${#sentinel_ports[@]} == 3)) || { log "the sentinels did not start"; return 1; }
  # Every sentinel knows both replicas and the other two (hello messages, every 2 s).
  for _ in $(seq 200); do
    local agree=1
    for p in "${sentinel_ports[@]}"; do
      info=$(redis_cli "$p" sentinel master mymaster 2>/dev/null | paste -sd' ')
      [[ $info == *"num-slaves 2 "* && $info == *"num-other-sentinels 2 "* ]] || agree=0
    done
    ((agree)) && return 0
    sleep 0.1
  done
  log "the sentinels did not agree on the set-up"
  return 1
}
# sentinel_master: the master's port as every sentinel names it (empty while they disagree).
sentinel_master() {
  local p names=()
  for p in "${sentinel_ports[@]}"; do
    names+=("$(redis_cli "$p" sentinel get-master-addr-by-name mymaster 2>/dev/null | sed -n 2p)")
  done
  [[ -n ${names[0]} && ${names[0]} == "${names[1]}" && ${names[0]} == "${names[2]}" ]] && echo "${names[0]}"
}
# sentinel_fault kill|failover: SIGKILL of the master (restarted from its AOF 3 s later: the
# sentinels make it a replica), or SENTINEL FAILOVER. The fault ends once every sentinel names
# the new master (20 s at most).
sentinel_fault() {
  local old new start pid
  old=$(sentinel_master)
  [[ -n $old ]] || { log "the sentinels disagree on the master: no $1"; return; }
  start=$(now_ms)
  if [[ $1 == kill ]]; then
    pid=${port_pid[$old]}
    kill -9 "$pid"; wait "$pid" 2>/dev/null
  else
    redis_cli "${sentinel_ports[0]}" sentinel failover mymaster >/dev/null
  fi
  for _ in $(seq 200); do
    new=$(sentinel_master)
    [[ -n $new && $new != "$old" ]] && break
    sleep 0.1
  done
  local how="SENTINEL FAILOVER from master $old"
  [[ $1 == kill ]] && how="kill -9 of master $old"
  fault "$start" "sentinel_$1" "$how: the sentinels named ${new:-no new master}"
  if [[ $1 == kill ]]; then
    while (($(now_ms) - start < 3000)); do sleep 0.1; done
    if soak_redis "$old" --tls-replication yes; then port_pid[$old]=$RPID; else log "restart of $old FAILED"; fi
  fi
}

kill_restart() {  # kill_restart PORT DOWN_S: kill -9, wait, restart from the AOF
  local port=$1 down=$2 start pid
  pid=${port_pid[$port]}
  start=$(now_ms)
  kill -9 "$pid"; wait "$pid" 2>/dev/null
  sleep "$down"
  local extra=()
  [[ $phase == cluster ]] && extra=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 8000)
  if soak_redis "$port" "${extra[@]}"; then
    port_pid[$port]=$RPID
    fault "$start" redis_kill "kill -9 of redis $port, restarted after ${down}s"
  else
    fault "$start" redis_kill "kill -9 of redis $port, restart FAILED"
  fi
}
stop_cont() {  # stop_cont PORT STOPPED_S
  local start pid=${port_pid[$1]}
  start=$(now_ms)
  kill -STOP "$pid"
  sleep "$2"
  kill -CONT "$pid"
  fault "$start" redis_stop "SIGSTOP of redis $1 for ${2}s"
}
failover() {
  local master replica start
  master=$(masters | head -1)
  replica=$(replica_of "$master")
  [[ -n $replica ]] || { log "no replica of $master"; return; }
  start=$(now_ms)
  redis-cli -p "$replica" cluster failover >/dev/null
  for _ in $(seq 100); do
    redis-cli -p "$replica" role 2>/dev/null | head -1 | grep -q master && break
    sleep 0.1
  done
  fault "$start" failover "CLUSTER FAILOVER: replica $replica took over from master $master ($(redis-cli -p "$replica" role | head -1))"
}

# ---------------------------------------------------------------- one phase
# run_phase NAME SECONDS: single or cluster; results in $out/NAME.
run_phase() {
  phase=$1
  local seconds=$2 i
  phase_dir=$out/$phase
  mkdir -p "$phase_dir" "$work/$phase"
  : >"$phase_dir/faults.tsv"
  log "phase $phase: $seconds s"
  case $phase in
    cluster) start_cluster || return 2 ;;
    sentinel) start_sentinel_set || return 2 ;;
    *) start_single || return 2 ;;
  esac
  for i in "${!redis_ports[@]}"; do port_pid[${redis_ports[$i]}]=${redis_pids[$i]}; done

  start_upstream "$phase_dir/upstream" >&2 || return 2
  local upid=$UPID up=$UP

  local conf=$work/$phase/conf
  write_rules "$conf" "$up"
  cp "$conf/limits.json" "$phase_dir/"
  local redis_yaml
  if [[ $phase == cluster ]]; then
    redis_yaml="redis: {cluster: true, nodes: [redis://127.0.0.1:${redis_ports[0]}, redis://127.0.0.1:${redis_ports[1]}], timeout: 250ms, instances: 2}"
  elif [[ $phase == sentinel ]]; then
    local addresses
    addresses=$(printf '127.0.0.1:%s, ' "${sentinel_ports[@]}")
    redis_yaml="redis:
  url: rediss://mymaster
  timeout: 250ms
  instances: 2
  tls: {ca_file: $redis_tls/ca.pem, cert_file: $redis_tls/client.pem, key_file: $redis_tls/client.key}
  sentinel: {master: mymaster, addresses: [${addresses%, }]}"
  else
    redis_yaml="redis: {url: redis://127.0.0.1:${redis_ports[0]}, timeout: 250ms, instances: 2}"
  fi
  cat >"$conf/redis.yaml" <<EOF
rules: ./rules
backend: redis
$redis_yaml
http: {upstream_timeout: 1s}
EOF
  cat >"$conf/memory.yaml" <<EOF
rules: ./rules
backend: memory
store: {max_entries: 1000}
http: {upstream_timeout: 1s}
EOF
  local names=(a b m) configs=("$conf/redis.yaml" "$conf/redis.yaml" "$conf/memory.yaml")
  local backends=(redis redis memory) spids=() instances_json=""
  for i in 0 1 2; do
    start_instance "${names[$i]}" --config "${configs[$i]}" || return 2
    spids+=("$PID")
    instances_json+="${instances_json:+,}{\"name\":\"${names[$i]}\",\"backend\":\"${backends[$i]}\",\"pid\":$PID,\"data\":\"$DATA\",\"admin\":\"$ADMIN\",\"grpc\":\"$GRPC\"}"
  done
  printf 'instance\tpid\n' >"$phase_dir/instances.tsv"
  for i in 0 1 2; do printf '%s\t%s\n' "${names[$i]}" "${spids[$i]}" >>"$phase_dir/instances.tsv"; done

  # The schedule, scaled to the phase: about 1000 reloads in 30 minutes (at least 3 a second
  # in short runs), a key reset every 2 s, floods of unique keys, Redis faults every 5 minutes.
  local reload_ms floods
  reload_ms=$(( seconds >= 600 ? seconds * 1800 / 1000 : 300 ))
  floods=$(awk -v d="$seconds" 'BEGIN { s = "";
    for (t = 0.15 * d; t < d - 20; t += 300) { e = t + (d < 600 ? 0.3 * d : 40); if (e > d - 10) e = d - 10;
      s = s (s == "" ? "" : ",") sprintf("[%.1f,%.1f]", t, e) } print s }')
  cat >"$phase_dir/driver-config.json" <<EOF
{"out": "$phase_dir", "seconds": $seconds, "rps": $rps, "floodRps": $flood_rps, "floods": [$floods],
 "maxInFlight": 400, "hotKeys": 4, "slogKeys": 2, "userKeys": 200, "stallMs": 1500,
 "reloadEveryMs": $reload_ms, "resetEveryMs": 2000, "rulesDir": "$conf/rules",
 "protoDir": "$root/src/rls/proto", "grpcModules": "$grpc_modules", "instances": [$instances_json]}
EOF
  node "$here/soak/driver.js" "$phase_dir/driver-config.json" >"$phase_dir/driver.out" 2>&1 &
  local dpid=$!
  pids+=("$dpid")
  local t0
  t0=$(date +%s)

  # Redis faults: at 30 % of the phase and every 5 minutes after a kill -9 (down 3 s); at 60 %
  # and every 5 minutes a SIGSTOP of 4 s; in the cluster at 20 % (and every 5 minutes) a manual
  # failover. In the cluster the kill and the stop hit a master, for less than the node timeout
  # (8 s), so that they are not failovers themselves.
  # In the Sentinel phase, instead: a failover by SIGKILL of the master at 25 % and SENTINEL
  # FAILOVER at 60 % (and every 5 minutes after each).
  local schedule
  if [[ $phase == sentinel ]]; then
    schedule=$(awk -v d="$seconds" 'BEGIN {
      for (t = 0.25 * d; t < d - 10; t += 300) printf "%d sentinel_kill\n", t;
      for (t = 0.6 * d; t < d - 10; t += 300) printf "%d sentinel_failover\n", t; }' | sort -n)
  else
    schedule=$(awk -v d="$seconds" -v c="$([[ $phase == cluster ]] && echo 1 || echo 0)" 'BEGIN {
      for (t = 0.3 * d; t < d - 10; t += 300) printf "%d kill\n", t;
      for (t = 0.6 * d; t < d - 10; t += 300) printf "%d stop\n", t;
      if (c) for (t = 0.2 * d; t < d - 10; t += 300) printf "%d failover\n", t; }' | sort -n)
  fi
  log "schedule: $(echo $schedule)"
  local at what target
  while read -r at what; do
    [[ -n $at ]] || continue
    while (( $(date +%s) - t0 < at )); do
      kill -0 "$dpid" 2>/dev/null || break 2
      sleep 0.2
    done
    case $phase in
      cluster) target=$(masters | head -1) ;;
      sentinel) target=$(sentinel_master) ;;
      *) target=${redis_ports[0]} ;;
    esac
    log "$what on redis $target"
    case $what in
      kill) kill_restart "$target" 3 ;;
      stop) stop_cont "$target" 4 ;;
      failover) failover ;;
      sentinel_kill) sentinel_fault kill ;;
      sentinel_failover) sentinel_fault failover ;;
    esac
  done <<<"$schedule"
  # The driver ends by itself (its load stops at SECONDS, its last requests time out 10 s later).
  for _ in $(seq $(( (seconds + 40) * 5 ))); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$dpid" 2>/dev/null
  wait "$dpid" 2>/dev/null
  # The driver's last rules file is a valid one: every instance on Redis must pick it up (the
  # file watcher) within 5 s and end on the same version. An instance that does not is then
  # asked to reload by POST /v1/reload, which tells a missed file change from a refused one.
  local admin_of=() v
  for i in 0 1 2; do admin_of+=("$(sed -n 's/^sluice: admin listening on //p' "$phase_dir/${names[$i]}.out")"); done
  rules_of() {  # rules_of ADMIN: version, reload successes, failures (tab-separated)
    curl -s -m 5 "http://$1/v1/rules" |
      sed -n 's/.*"version":"\([^"]*\)".*"reload_successes":\([0-9]*\),"reload_failures":\([0-9]*\).*/\1\t\2\t\3\n/p'
  }
  for _ in $(seq 25); do
    sleep 0.2
    [[ $(rules_of "${admin_of[0]}" | cut -f1) == "$(rules_of "${admin_of[1]}" | cut -f1)" ]] && break
  done
  printf 'instance\tversion\treload_successes\treload_failures\tafter_post_reload\n' >"$phase_dir/rules-final.tsv"
  for i in 0 1 2; do
    v=$(rules_of "${admin_of[$i]}" | head -1)
    local post
    post=$(curl -s -m 5 -X POST "http://${admin_of[$i]}/v1/reload" | sed -n 's/.*"version":"\([^"]*\)".*/\1/p')
    printf '%s\t%s\t%s\n' "${names[$i]}" "$v" "$post" >>"$phase_dir/rules-final.tsv"
  done
  for i in 0 1 2; do curl -s -m 5 "http://${admin_of[$i]}/metrics" >"$phase_dir/metrics-${names[$i]}.txt"; done
  printf 'instance\texit_status\n' >"$phase_dir/exits.tsv"
  for i in 0 1 2; do
    local status=gone
    if kill -0 "${spids[$i]}" 2>/dev/null; then stop "${spids[$i]}" 10; status=$STATUS; fi
    printf '%s\t%s\n' "${names[$i]}" "$status" >>"$phase_dir/exits.tsv"
  done
  stop "$upid" 10
  for i in "${!redis_ports[@]}"; do stop "${port_pid[${redis_ports[$i]}]}" 10; done
  for i in "${!sentinel_pids[@]}"; do stop "${sentinel_pids[$i]}" 10; done
  sentinel_ports=() sentinel_pids=()
  unset redis_tls
  log "phase $phase done"
  return 0
}

# ---------------------------------------------------------------- phases, then the report
phases=()
case $cluster_mode in
  0) phases=("single $total") ;;
  1) phases=("cluster $total") ;;
  *) if ((total >= 600)); then
       phases=("single $((total / 2))" "cluster $((total / 4))" "sentinel $((total - total / 2 - total / 4))")
     else phases=("single $total"); fi ;;
esac
[[ ${SOAK_SENTINEL:-0} == 1 ]] && phases=("sentinel $total")
log "$total s in all, phases: ${phases[*]}, report in $out"
dirs=()
for ph in "${phases[@]}"; do
  read -r name secs <<<"$ph"
  run_phase "$name" "$secs" || { log "phase $name: setup failed"; exit 2; }
  dirs+=("$out/$name")
done
node "$here/soak/analyze.js" "$out" "${dirs[@]}"
verdict=$?
for d in "${dirs[@]}"; do
  name=$(basename "$d")
  gnuplot -e "dir='$d'; png='$out/$name'" "$here/soak/plots.gp" 2>"$d/gnuplot.err" ||
    log "gnuplot failed for $name: $(head -3 "$d/gnuplot.err")"
done
log "report: $out/report.md ($( ((verdict == 0)) && echo PASS || echo FAIL))"
if ((verdict != 0)); then
  # What failed, with its windows and times, where a run's log is all that is kept (ctest, CI).
  grep -E '^- (over the limit|denied under the limit|crash|unanswered)' "$out/report.md" | head -20 || true
  sed -n '/^Faults/,/^$/p' "$out/report.md" | head -20
fi
exit "$verdict"
