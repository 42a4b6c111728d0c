#!/usr/bin/env bash
# End-to-end tests of the Redis backend: four `sluice serve` processes share one real
# redis-server (and then a real 3-master Redis Cluster) and must hold each limit exactly between
# them; then the faults — Redis killed and restarted empty (NOSCRIPT), CLIENT PAUSE, DEBUG SLEEP,
# SIGSTOP — with every request answered by its domain's failure_mode (open, closed, local),
# /readyz and the metrics saying so (a hung Redis too, whose connections stay open), requests
# answered while it hung consuming nothing, and decisions back on Redis within 5 s of it
# returning. A wrong Redis
# password is a start-up error. The limits hold too with the states packed into hashes
# (redis.buckets). A Redis whose maxmemory-policy can evict live states is warned about.
# Usage: SLUICE=path/to/sluice tests/redis_e2e.sh tests/redis
set -u
fixtures=$1
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl redis-server redis-cli node

# tenths_until_decided DATA USER: polls a closed-domain check (up to 6 s) until Redis decides it
# again (200); prints after how many tenths of a second, 0 if it never did.
tenths_until_decided() {
  local i
  for i in $(seq 60); do
    [[ $(check_one "$1" closed user "$2") == 200 ]] && { echo "$i"; return; }
    sleep 0.1
  done
  echo 0
}

# ---------------------------------------------------------------- one Redis, four instances
# (Its fixed windows of an hour are counted exactly: none may roll over while they are.)
clear_of_hour_end 120
start_redis_on; rport=$RPORT
cp -r "$fixtures" "$tmp/rules"
start_four s --config "$tmp/rules" --redis "redis://127.0.0.1:$rport"
check "four instances up" 4 "$(for d in "${datas[@]}"; do [[ -n $d ]] && echo; done | wc -l)"
check_contains "start-up line names the backend" "backend redis 127.0.0.1:$rport" "$(cat "$tmp/s0.out")"

for algo in token_bucket fixed_window sliding_log sliding_window calendar_day; do
  # 4 x 30 = 120 requests for a limit of 40 per hour (calendar_day: per day in Chatham): exactly
  # 40 admitted across the instances.
  check "$algo: exactly the limit admitted across 4 instances" 40 "$(fire exact algo "$algo" 30)"
done
# The calendar quota resets at Chatham's next midnight: X-RateLimit-Reset counts down to it.
check "calendar_day: denied once spent" 429 "$(check_one "${datas[2]}" exact algo calendar_day)"
chatham_midnight=$(TZ=Pacific/Chatham date -d 'tomorrow 00:00' +%s)
reset_gap=$(( chatham_midnight - $(date +%s) - $(header X-RateLimit-Reset) ))
check "calendar_day: X-RateLimit-Reset is the time to Chatham's midnight (±2 s)" 1 \
  "$(( reset_gap >= -2 && reset_gap <= 2 ? 1 : 0 ))"

check "rate-limit headers from Redis's state" 429 "$(check_one "${datas[1]}" exact algo token_bucket)"
check "X-RateLimit-Remaining 0 on the deny" 0 "$(header X-RateLimit-Remaining)"
check "no degraded status while Redis answers" "" "$(header X-RateLimit-Status)"
keys=$(redis-cli -p "$rport" --scan --pattern 'sluice:*' | wc -l)
check "states live in Redis under the key prefix" 1 "$((keys >= 4 ? 1 : 0))"
some_key=$(redis-cli -p "$rport" --scan --pattern 'sluice:*' | grep -vx 'sluice:resets' | head -1)
ttl=$(redis-cli -p "$rport" pttl "$some_key")
check "every state has a TTL" 1 "$((ttl > 0 ? 1 : 0))"
check_contains "readyz: backend connected" "connected" "$(curl -s "http://${admins[0]}/readyz")"
check "metrics: backend up" 1 "$(metric "${admins[0]}" sluice_backend_up)"
check "metrics: backend calls counted" 1 "$(( $(metric "${admins[0]}" sluice_backend_calls_total) > 0 ? 1 : 0 ))"
check "noeviction (Redis's default): no eviction-policy warning" 0 \
  "$(cat "$tmp/s0.out" "$tmp/s0.err" | grep -c 'maxmemory-policy')"

# Admin: inspect without consuming, then reset a key on Redis ("unblock this customer").
for _ in 1 2 3 4 5; do check_one "${datas[2]}" exact user carol >/dev/null; done
check "carol's 6th denied" 429 "$(check_one "${datas[3]}" exact user carol)"
check_contains "GET /v1/limits reads Redis's state" '"remaining":0' \
  "$(curl -s "http://${admins[1]}/v1/limits?domain=exact&descriptors=user=carol")"
check "DELETE /v1/limits forgets it on Redis" '{"reset":1}' \
  "$(curl -s -X DELETE "http://${admins[1]}/v1/limits?domain=exact&descriptors=user=carol")"
check "carol allowed again on another instance" 200 "$(check_one "${datas[0]}" exact user carol)"

# /json and gRPC-shaped answers go through the same backend.
code=$(curl -s -o "$tmp/body" -w '%{http_code}' -d '{"domain":"exact","descriptors":[{"entries":[{"key":"algo","value":"fixed_window"}]}]}' "http://${datas[0]}/json")
check "/json answers from Redis's state (the fixed window is used up)" 429 "$code"

# ---------------------------------------------------------------- Redis dies
kill -9 "$RPID"; wait "$RPID" 2>/dev/null
check "open: allowed while Redis is down" 200 "$(check_one "${datas[0]}" open user dave)"
check "open: says degraded" degraded "$(header X-RateLimit-Status)"
check "closed: 503 while Redis is down" 503 "$(check_one "${datas[0]}" closed user dave)"
check "closed: with Retry-After" 1 "$(header Retry-After)"
check_contains "closed: the body says why" "backend unavailable" "$(cat "$tmp/body")"
local_allowed=0
for _ in $(seq 5); do [[ $(check_one "${datas[0]}" local user dave) == 200 ]] && local_allowed=$((local_allowed + 1)); done
check "local: the limit divided by instances (8 / 4) on this instance" 2 "$local_allowed"
check "local: says so" local "$(header X-RateLimit-Status)"
code=$(curl -s -o "$tmp/body" -w '%{http_code}' -d '{"domain":"closed","descriptors":[{"entries":[{"key":"user","value":"x"}]}]}' "http://${datas[0]}/json")
check "/json: closed domain -> 503" 503 "$code"
check "readyz: 503 while a closed domain cannot be served" 503 "$(curl -s -o "$tmp/ready" -w '%{http_code}' "http://${admins[0]}/readyz")"
check_contains "readyz names the domain" "domain closed" "$(cat "$tmp/ready")"
check "metrics: backend down" 0 "$(metric "${admins[0]}" sluice_backend_up)"
check "metrics: open fallbacks counted" 1 "$(( $(metric "${admins[0]}" 'sluice_backend_fallback_requests_total{policy="open"}') >= 1 ? 1 : 0 ))"
check "metrics: closed fallbacks counted" 1 "$(( $(metric "${admins[0]}" 'sluice_backend_fallback_requests_total{policy="closed"}') >= 1 ? 1 : 0 ))"
reason() { metric "${admins[0]}" "sluice_decision_reasons_total{domain=\"$1\",limit=\"$2\",reason=\"$3\"}" 0; }
check "metrics: decided by failure_mode open, by reason" 1 "$(($(reason open 5-per-1h failure_open) >= 1 ? 1 : 0))"
check "metrics: decided by failure_mode closed, by reason" 1 "$(($(reason closed 5-per-1h failure_closed) >= 1 ? 1 : 0))"
check "metrics: the five decided in this process, by reason" 5 "$(reason local 8-per-1h failure_local)"
check "metrics: none of them counted over_limit" 0 "$(reason local 8-per-1h over_limit)"
# Many requests while down: the breaker opens and they are answered at once.
fire open user erin 20 >/dev/null
check "metrics: the breaker opened" 1 "$(( $(metric "${admins[0]}" sluice_backend_breaker_opened_total) >= 1 ? 1 : 0 ))"

# ---------------------------------------------------------------- Redis returns, empty
start_redis "$rport"
back=0
for i in $(seq 100); do  # up to 10 s; the issue asks for 5
  if [[ $(check_one "${datas[0]}" closed user frank) == 200 && -z $(header X-RateLimit-Status) ]]; then back=$i; break; fi
  sleep 0.1
done
check "decisions back on Redis within 5 s of its return" 1 "$((back > 0 && back <= 50 ? 1 : 0))"
# The other instances too (each breaker closes on its own probe), before the counts below, which
# need all four on Redis: one still answering from its failure policy was a flaky 30 of 40.
others_back=1
for n in "${!datas[@]}"; do
  ((n == 0)) && continue
  for i in $(seq 100); do
    if [[ $(check_one "${datas[$n]}" closed user "frank$n") == 200 && -z $(header X-RateLimit-Status) ]]; then break; fi
    ((i == 100)) && others_back=0
    sleep 0.1
  done
done
check "every instance decides on Redis again within 10 s" 1 "$others_back"
for i in 1 2 3; do fire exact algo token_bucket 1 >/dev/null; done
check "NOSCRIPT answered by reloading the script" 1 "$(( $(metric "${admins[0]}" sluice_backend_noscript_reloads_total) >= 1 ? 1 : 0 ))"
check "the empty Redis holds the limit again" 40 "$(fire exact algo fixed_window 30)"
check "readyz: ready again" 200 "$(curl -s -o /dev/null -w '%{http_code}' "http://${admins[0]}/readyz")"

# CLIENT PAUSE: calls time out (500 ms) and the failure policy answers; then Redis is back.
redis-cli -p "$rport" client pause 2500 >/dev/null
check "paused: open domain allowed" 200 "$(check_one "${datas[1]}" open user gina)"
check "paused: degraded" degraded "$(header X-RateLimit-Status)"
check "paused: closed domain 503" 503 "$(check_one "${datas[1]}" closed user gina)"
sleep 1.5
back=$(tenths_until_decided "${datas[1]}" gina)
check "after the pause: decided on Redis again within 5 s" 1 "$((back > 0 && back <= 50 ? 1 : 0))"

# DEBUG SLEEP: the server stops answering for 3 s (checked once it does: a PING gets no answer).
redis-cli -p "$rport" debug sleep 3 >/dev/null &
sleeper=$!
silent() { ! timeout 0.2 redis-cli -p "$rport" ping >/dev/null 2>&1; }
until_true 3 silent
check "debug sleep: closed domain 503" 503 "$(check_one "${datas[2]}" closed user hank)"
wait "$sleeper"
back=$(tenths_until_decided "${datas[2]}" hank)
check "after debug sleep: decided on Redis again" 1 "$((back > 0 ? 1 : 0))"

# SIGSTOP: Redis hangs with its connections open (issue 18). Readiness and sluice_backend_up
# follow what decisions get, not the connection, with no traffic needed to notice either way;
# and the requests answered 503 while it hung consume nothing when it resumes.
ready_code() { curl -s -o "$tmp/ready" -w '%{http_code}' "http://$1/readyz"; }
# gRPC health (grpc.health.v1 with tests/grpc's Node.js client) on a fifth instance, given the
# traffic instance 3 gets below.
grpc_health() { timeout 10 node "$(dirname "$0")/grpc/health_status.js" "$1" 2>&1 | tail -1; }
start g --config "$tmp/rules" --redis "redis://127.0.0.1:$rport" --grpc 127.0.0.1:0 --threads 1
gdata=$DATA ggrpc=$GRPC gpid=$PID
check "gRPC health SERVING while Redis decides" SERVING "$(grpc_health "$ggrpc")"
sleep 1.2  # instance 0 has decided nothing for over a second: idle
check "before the hang: sam's first request allowed" 200 "$(check_one "${datas[3]}" closed user sam)"
kill -STOP "$RPID"
hung=$(for _ in $(seq 8); do echo "${datas[3]}"; done |
  xargs -P 8 -I{} curl -s -o /dev/null -m 5 -w '%{http_code}\n' -H 'content-type: application/json' \
    -d '{"domain":"closed","descriptors":[{"entries":[{"key":"user","value":"sam"}]}]}' \
    "http://{}/v1/check" | grep -c '^503$')
check "hung: 8 requests of a closed domain answered 503" 8 "$hung"
check "hung: readyz 503 where calls timed out" 503 "$(ready_code "${admins[3]}")"
check_contains "hung: readyz says a call failed" "fail" "$(cat "$tmp/ready")"
check "hung: sluice_backend_up 0 where calls timed out" 0 "$(metric "${admins[3]}" sluice_backend_up)"
check "hung: a closed-domain request on the gRPC instance answered 503" 503 \
  "$(check_one "$gdata" closed user sam)"
check "hung: gRPC health NOT_SERVING" NOT_SERVING "$(grpc_health "$ggrpc")"
idle=0
for i in $(seq 30); do [[ $(ready_code "${admins[0]}") == 503 ]] && { idle=$i; break; }; sleep 0.1; done
check "hung: an idle instance's readyz turns 503 by its own probe (within 3 s)" 1 "$((idle > 0 ? 1 : 0))"
kill -CONT "$RPID"
ready=0
for i in $(seq 50); do [[ $(ready_code "${admins[3]}") == 200 ]] && { ready=$i; break; }; sleep 0.1; done
check "resumed: readyz 200 again, with no request sent, within 5 s" 1 "$((ready > 0 ? 1 : 0))"
check "resumed: sluice_backend_up 1" 1 "$(metric "${admins[3]}" sluice_backend_up)"
serving=0
for i in $(seq 50); do [[ $(grpc_health "$ggrpc") == SERVING ]] && { serving=$i; break; }; sleep 0.1; done
check "resumed: gRPC health SERVING again within 5 s" 1 "$((serving > 0 ? 1 : 0))"
sleep 0.3  # whatever waited in Redis's sockets has run
check_contains "resumed: the 9 answered while it hung consumed nothing (4 of 5 left)" '"remaining":4' \
  "$(curl -s "http://${admins[1]}/v1/limits?domain=closed&descriptors=user=sam")"
PID=$gpid stop
check "the gRPC instance stops cleanly" 0 "$STATUS"
for i in 0 1 2 3; do PID=${spids[$i]} stop; check "instance $i stops cleanly" 0 "$STATUS"; done

# ---------------------------------------------------------------- passwords
start_redis_on --requirepass s3cret; aport=$RPORT
"$sluice" serve --listen 127.0.0.1:0 --admin 127.0.0.1:0 --grpc 0 --config "$tmp/rules" \
  --redis "redis://:wrong@127.0.0.1:$aport" >"$tmp/auth.out" 2>"$tmp/auth.err" &
apid=$!; pids+=("$apid")
for _ in $(seq 100); do kill -0 "$apid" 2>/dev/null || break; sleep 0.05; done
wait "$apid" 2>/dev/null
check "a wrong Redis password: exit status 1" 1 "$?"
check_contains "a wrong Redis password: the error names the login" "login to 127.0.0.1:$aport failed" "$(cat "$tmp/auth.err")"
start auth --config "$tmp/rules" --redis "redis://:s3cret@127.0.0.1:$aport"
datas=("$DATA") admins=("$ADMIN")
check "the right password: decided on Redis" 200 "$(check_one "$DATA" closed user ivy)"
check "the right password: not degraded" "" "$(header X-RateLimit-Status)"
stop

# ---------------------------------------------------------------- packed states (redis.buckets)
# (This Redis has an eviction policy, which can drop live states: sluice warns at start.)
start_redis_on --maxmemory-policy allkeys-lru; pport=$RPORT
mkdir -p "$tmp/packed-rules"
cp "$tmp/rules/"*.yaml "$tmp/packed-rules/"
cat >"$tmp/packed-rules/sluice.yaml" <<EOF
backend: redis
redis:
  url: redis://127.0.0.1:$pport
  buckets: 8
  timeout: 2s
EOF
clear_of_hour_end 60
start_four p --config "$tmp/packed-rules"
for algo in token_bucket fixed_window sliding_log sliding_window; do
  check "packed $algo: exactly the limit admitted across 4 instances" 40 "$(fire exact algo "$algo" 30)"
done
for _ in 1 2 3 4 5; do check_one "${datas[1]}" exact user carol >/dev/null; done
check "packed: carol's 6th denied" 429 "$(check_one "${datas[2]}" exact user carol)"
epoch_before=$(redis-cli -p "$pport" get sluice:resets)
check "packed: DELETE /v1/limits forgets her state" '{"reset":1}' \
  "$(curl -s -X DELETE "http://${admins[3]}/v1/limits?domain=exact&descriptors=user=carol")"
check "packed: carol allowed again" 200 "$(check_one "${datas[0]}" exact user carol)"
# (The reset epoch, moved by the DELETE above, is a counter of its own, without a TTL; it starts
# at a random value when an instance first reads it, or at 0 when a reset comes first.)
check "packed: the reset epoch counts the reset" "$((${epoch_before:-0} + 1))" \
  "$(redis-cli -p "$pport" get sluice:resets)"
redis-cli -p "$pport" --scan --pattern 'sluice:*' | grep -vx 'sluice:resets' >"$tmp/packed.keys"
hashes=0 strings=0 no_ttl=0
while read -r k; do
  case $(redis-cli -p "$pport" type "$k") in
    hash) hashes=$((hashes + 1)) ;;
    string) strings=$((strings + 1)) ;;
  esac
  (( $(redis-cli -p "$pport" pttl "$k") > 0 )) || no_ttl=$((no_ttl + 1))
done <"$tmp/packed.keys"
check "packed: the states share at most 8 hashes" 1 "$((hashes >= 1 && hashes <= 8 ? 1 : 0))"
check "packed: only sliding_log keeps a key of its own" 1 "$strings"
check "packed: every key has a TTL" 0 "$no_ttl"
check_contains "packed: allkeys-lru is warned about at start" "maxmemory-policy is allkeys-lru" \
  "$(cat "$tmp/p0.out" "$tmp/p0.err")"
for i in 0 1 2 3; do PID=${spids[$i]} stop; check "packed instance $i stops cleanly" 0 "$STATUS"; done

# ---------------------------------------------------------------- a 3-master cluster
start_redis_cluster
check_contains "cluster formed" "cluster_state:ok" "$(redis-cli -p "${cluster_ports[0]}" cluster info)"
mkdir -p "$tmp/cluster-rules"
cp "$tmp/rules/"*.yaml "$tmp/cluster-rules/"
cat >"$tmp/cluster-rules/sluice.yaml" <<EOF
backend: redis
redis:
  cluster: true
  nodes: [redis://127.0.0.1:${cluster_ports[0]}, redis://127.0.0.1:${cluster_ports[1]}]
  instances: 4
  timeout: 2s
EOF
clear_of_hour_end 60
start_four c --config "$tmp/cluster-rules"
check_contains "cluster: start-up line names it" "backend redis cluster" "$(cat "$tmp/c0.out")"
for algo in token_bucket fixed_window sliding_log calendar_day; do
  check "cluster $algo: exactly the limit admitted across 4 instances" 40 "$(fire exact algo "$algo" 30)"
done
spread=$(for p in "${cluster_ports[@]}"; do redis-cli -p "$p" dbsize; done | awk '$1 > 0' | wc -l)
check "cluster: states spread over the masters" 1 "$((spread >= 2 ? 1 : 0))"
for i in 0 1 2 3; do PID=${spids[$i]} stop; check "cluster instance $i stops cleanly" 0 "$STATUS"; done

finish
