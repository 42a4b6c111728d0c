#!/usr/bin/env bash
# End-to-end test of Redis Sentinel: one master, two replicas and three redis-sentinels (quorum
# 2, a master down after 1 s) on loopback; four `sluice serve` find the master through the
# sentinels (redis.sentinel) and hold an exact limit between them. Under a bounded load on a
# domain that fails open and one that fails closed, the master is SIGKILLed: every request is
# answered by its domain's policy meanwhile (open: 200, closed: 200 or 503, none unanswered),
# /readyz says not ready (naming why) and then ready, each instance decides on the promoted
# replica within 2 s of the sentinels' switch, and an exact limit holds there afterwards (and a
# leased one admits no more than it).
# `serve --envoy-env` with REDIS_TYPE=sentinel decides on the new master too.
# Usage: SLUICE=path/to/sluice tests/sentinel_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl redis-server redis-sentinel redis-cli


# start_sentinel MASTER_PORT: a redis-sentinel on a free port watching 127.0.0.1:MASTER_PORT as
# mymaster (quorum 2, down after 1 s); its config and log in $tmp. Sets SPORT.
start_sentinel() {
  local _ conf pid
  for _ in $(seq 5); do
    free_port || continue
    SPORT=$FREE_PORT
    conf=$tmp/sentinel-$SPORT.conf
    cat >"$conf" <<EOF
port $SPORT
bind 127.0.0.1
dir $tmp
sentinel resolve-hostnames no
sentinel monitor mymaster 127.0.0.1 $1 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 4000
sentinel parallel-syncs mymaster 2
EOF
    redis-sentinel "$conf" >"$tmp/sentinel-$SPORT.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_listening "$SPORT" "$pid" 5 && return 0
  done
  return 1
}

# master_port: the master's port as the first sentinel that answers names it.
master_port() {
  local p
  for p in "${sports[@]}"; do
    redis-cli -p "$p" sentinel get-master-addr-by-name mymaster 2>/dev/null | sed -n 2p | grep . && return
  done
}

# ---------------------------------------------------------------- the Redis set-up
start_redis_on || exit 1
mport=$RPORT mpid=$RPID
start_redis_on --replicaof 127.0.0.1 "$mport" || exit 1
r1port=$RPORT
start_redis_on --replicaof 127.0.0.1 "$mport" || exit 1
r2port=$RPORT
replicas_linked() { redis-cli -p "$mport" info replication | grep -q '^connected_slaves:2'; }
until_true 10 replicas_linked
check "two replicas linked to the master" 0 "$?"
sports=()
for _ in 1 2 3; do
  start_sentinel "$mport" || { echo "a sentinel did not start"; exit 1; }
  sports+=("$SPORT")
done
# Every sentinel knows both replicas and the two other sentinels (hello messages, every 2 s).
sentinels_agree() {
  local p info
  for p in "${sports[@]}"; do
    info=$(redis-cli -p "$p" sentinel master mymaster 2>/dev/null | paste -sd' ')
    [[ $info == *"num-slaves 2 "* && $info == *"num-other-sentinels 2 "* ]] || return 1
  done
}
until_true 20 sentinels_agree
check "three sentinels see the master, two replicas and each other" 0 "$?"

# ---------------------------------------------------------------- four instances through them
mkdir -p "$tmp/rules"
addresses=$(printf '127.0.0.1:%s, ' "${sports[@]}")
# A deadline a loaded machine does not reach (a call that timed out would be answered by the
# failure policy and spoil the exact counts); the failover's faults are refused connections.
cat >"$tmp/rules/sluice.yaml" <<EOF
backend: redis
redis:
  timeout: 1s
  sentinel:
    master: mymaster
    addresses: [${addresses%, }]
EOF
for policy in open closed; do
  cat >"$tmp/rules/$policy.yaml" <<EOF
domain: $policy
failure_mode: $policy
descriptors:
  - key: user
    rate_limit: {requests: 5, window: 1h}
EOF
done
cat >"$tmp/rules/exact.yaml" <<'EOF'
domain: exact
failure_mode: closed
descriptors:
  - key: user
    rate_limit: {requests: 40, window: 1h}
EOF
cat >"$tmp/rules/leased.yaml" <<'EOF'
domain: leased
consistency: leased
failure_mode: closed
descriptors:
  - key: user
    rate_limit: {algorithm: fixed_window, requests: 40, window: 1h}
EOF
clear_of_hour_end 120
start_four s --config "$tmp/rules"
check "four instances up" 4 "$(for d in "${datas[@]}"; do [[ -n $d ]] && echo; done | wc -l)"
check_contains "start-up line names the sentinels" \
  "backend redis sentinel master 'mymaster' via 127.0.0.1:${sports[0]}" "$(cat "$tmp/s0.out")"
check "exact before the failover: 40 of 4 x 15 admitted" 40 "$(fire exact user before 15)"
check_contains "readyz: ready on the master" "ready" "$(curl -s "http://${admins[0]}/readyz")"
check "the states are on the master" 1 \
  "$(($(redis-cli -p "$mport" --scan --pattern 'sluice:*' | wc -l) > 0))"

# ---------------------------------------------------------------- SIGKILL the master under load
# load I: requests to instance I, alternately to domains open and closed, each for a new user,
# until $tmp/stop exists (at most 3000 pairs); a line per answer: time (ms) domain code status.
load() {
  local i=$1 n=0 d
  while [[ ! -e $tmp/stop ]] && ((n < 3000)); do
    for d in open closed; do
      echo "$(now_ms) $d $(curl -s -o /dev/null -m 3 -w '%{http_code} %header{x-ratelimit-status}' \
        -H 'content-type: application/json' \
        -d "{\"domain\":\"$d\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"load-$i-$n\"}]}]}" \
        "http://${datas[$i]}/v1/check")"
    done
    n=$((n + 1))
  done >"$tmp/load.$i"
}
loaders=()
for i in 0 1 2 3; do
  load "$i" &
  loaders+=($!)
done
sleep 0.5  # (some load on the healthy master first)
t_kill=$(now_ms)
{ kill -9 "$mpid" && wait "$mpid"; } 2>/dev/null

readyz_code() { curl -s -o "$tmp/ready" -w '%{http_code}' -m 2 "http://${admins[$1]}/readyz"; }
until_true 5 test "$(readyz_code 1)" = 503
check "readyz: not ready without a master (a domain fails closed)" 0 "$?"
check_contains "readyz: says so and why" "not ready" "$(cat "$tmp/ready")"
check_contains "readyz: names the domain" "domain closed" "$(cat "$tmp/ready")"

# The sentinels' switch: the first moment one of them names another master.
switched() {
  local p new
  for p in "${sports[@]}"; do
    new=$(redis-cli -p "$p" sentinel get-master-addr-by-name mymaster 2>/dev/null | sed -n 2p)
    [[ -n $new && $new != "$mport" ]] && { echo "$new" >"$tmp/new_master"; return 0; }
  done
  return 1
}
until_true 30 switched
check "the sentinels promoted a replica" 0 "$?"
t_switch=$(now_ms)
nport=$(cat "$tmp/new_master" 2>/dev/null)
check "the new master is one of the replicas" 1 "$([[ $nport == "$r1port" || $nport == "$r2port" ]] && echo 1)"
echo "  (the sentinels switched $((t_switch - t_kill)) ms after the kill)"

# Each instance decides on the new master (a closed-domain check allowed) within 2 s.
follow() {  # follow I: ms from the switch until instance I decides, or "never" (8 s)
  local i=$1 n=0 code
  while :; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 -H 'content-type: application/json' \
      -d "{\"domain\":\"closed\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"follow-$i-$n\"}]}]}" \
      "http://${datas[$i]}/v1/check")
    [[ $code == 200 ]] && break
    echo "$code" >>"$tmp/follow.$i.codes"
    n=$((n + 1))
    (($(now_ms) - t_switch < 8000)) || { echo never; return; }
    sleep 0.02
  done
  echo $(($(now_ms) - t_switch))
}
followers=()
for i in 0 1 2 3; do
  follow "$i" >"$tmp/follow.$i" &
  followers+=($!)
done
wait "${followers[@]}"
for i in 0 1 2 3; do
  ms=$(cat "$tmp/follow.$i")
  check "instance $i decides on the new master within 2 s of the switch ($ms ms)" 1 \
    "$([[ $ms != never ]] && ((ms <= 2000)) && echo 1)" ||
    sort "$tmp/follow.$i.codes" 2>/dev/null | uniq -c
done
until_true 5 test "$(readyz_code 1)" = 200
check "readyz: ready again" 0 "$?"
check_contains "readyz: ready on the new master" "ready" "$(cat "$tmp/ready")"
sleep 0.5  # (some load on the new master)
touch "$tmp/stop"
wait "${loaders[@]}"

# Every request was answered by its domain's policy.
answers=$(cat "$tmp"/load.*)
total=$(wc -l <<<"$answers")
echo "  ($total answers under load)"
check "load: many answers" 1 "$((total > 100))"
check "load: none unanswered" 0 "$(awk '$3 == "000"' <<<"$answers" | wc -l)"
check "open: every answer 200" 0 "$(awk '$2 == "open" && $3 != 200' <<<"$answers" | wc -l)"
check "open: some allowed degraded, by the policy, while there was no master" 1 \
  "$(($(awk '$2 == "open" && $4 == "degraded"' <<<"$answers" | wc -l) > 0))"
check "closed: every answer 200 or 503" 0 \
  "$(awk '$2 == "closed" && $3 != 200 && $3 != 503' <<<"$answers" | wc -l)"
check "closed: 503 while there was no master" 1 \
  "$(($(awk '$2 == "closed" && $3 == 503' <<<"$answers" | wc -l) > 0))"
last_503=$(awk '$2 == "closed" && $3 == 503 {t = $1} END {printf "%d\n", t}' <<<"$answers")
check "closed: no 503 later than 2 s after the switch" 1 "$((last_503 <= t_switch + 2000))"
check "closed: decided (200) after the failover" 1 \
  "$(($(awk -v t="$t_switch" '$2 == "closed" && $3 == 200 && $1 > t' <<<"$answers" | wc -l) > 0))"

# ---------------------------------------------------------------- exact on the new master
# The sentinels agree on one master (a failover that timed out may have been followed by
# another, to the other replica: the instances follow that too).
agreed() {
  local p a first=
  for p in "${sports[@]}"; do
    a=$(redis-cli -p "$p" sentinel get-master-addr-by-name mymaster 2>/dev/null | sed -n 2p)
    [[ -n $a && $a != "$mport" && (-z $first || $a == "$first") ]] || return 1
    first=$a
  done
  echo "$first" >"$tmp/agreed"
}
until_true 15 agreed
check "the sentinels agree on the new master" 0 "$?" ||
  for p in "${sports[@]}"; do redis-cli -p "$p" sentinel get-master-addr-by-name mymaster | paste -sd:; done
nport=$(cat "$tmp/agreed" 2>/dev/null)
# ... and the other replica follows it: until then it may still be a writable master of a failover
# that timed out, and an instance still on it would count there (58 of 40 once admitted so).
other=$r1port; [[ $nport == "$r1port" ]] && other=$r2port
follows_new() {
  redis-cli -p "$other" info replication 2>/dev/null | tr -d '\r' |
    grep -qx "master_port:$nport" && redis-cli -p "$nport" role 2>/dev/null | head -1 | grep -qx master
}
until_true 15 follows_new
check "the other replica follows the new master" 0 "$?"
# The instances send to a demoted master only until its READONLY tells them to look again.
fire exact user warm-up 1 >/dev/null
keys_before=$(redis-cli -p "$nport" dbsize)
check "exact after the failover: 40 of 4 x 15 admitted for a new key" 40 "$(fire exact user after 15)"
check "its state is on the new master" 1 "$(($(redis-cli -p "$nport" dbsize) > keys_before))"
# Leases on the new master never admit beyond the limit (they may hold some units back).
leased=$(fire leased user after 15)
check "leased after the failover: no more than 40 of 4 x 15, at least 20" yes \
  "$([[ $leased -le 40 && $leased -ge 20 ]] && echo yes || echo "no: $leased")"
check_contains "the instances said where the master went" "moved from 127.0.0.1:$mport to 127.0.0.1:" \
  "$(cat "$tmp"/s*.out "$tmp"/s*.err)"
for i in 0 1 2 3; do stop "${spids[$i]}"; done

# ---------------------------------------------------------------- serve --envoy-env
envoy_runtime
start_env envoy RUNTIME_ROOT="$runtime/current" RUNTIME_SUBDIRECTORY=ratelimit \
  HOST=127.0.0.1 PORT="$port" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc_port" \
  DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug_port" USE_STATSD=false LOG_LEVEL=info \
  REDIS_SOCKET_TYPE=tcp REDIS_TYPE=sentinel CACHE_KEY_PREFIX=envoy_sentinel_ REDIS_TIMEOUT=2s \
  REDIS_URL="mymaster,127.0.0.1:${sports[0]},127.0.0.1:${sports[1]},127.0.0.1:${sports[2]}"
json() {  # json USER: one /json request for domain api; prints the status code
  curl -s -o "$tmp/body" -w '%{http_code}' -m 5 -H 'content-type: application/json' \
    -d "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"$1\"}]}]}" \
    "http://127.0.0.1:$port/json"
}
check_contains "envoy-env: through the sentinels" "backend redis sentinel master 'mymaster'" \
  "$(cat "$tmp/envoy.out")"
check "envoy-env: 1st of 2 allowed" 200 "$(json alice)"
check "envoy-env: 2nd of 2 allowed" 200 "$(json alice)"
check "envoy-env: 3rd over the limit" 429 "$(json alice)"
# On the master the sentinels name now: a failover that timed out may still be followed by another
# after they agreed above (as the instances follow it, so does envoy-env).
mport_now=$(redis-cli -p "${sports[0]}" sentinel get-master-addr-by-name mymaster | sed -n 2p)
check "envoy-env: the states are on the master the sentinels name" 1 \
  "$(($(redis-cli -p "$mport_now" --scan --pattern 'envoy_sentinel_*' | wc -l) > 0))"
stop
check "envoy-env: stops cleanly" 0 "$STATUS"

finish
