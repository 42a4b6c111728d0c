#!/usr/bin/env bash
# End-to-end test of runtime overrides (PUT/GET/DELETE /v1/overrides; docs/http-api.md,
# "Overrides"): on the memory store (one `sluice serve` keeping them in its state directory),
# then four instances sharing one real redis-server, then a real 3-master Redis Cluster.
# - An override raises one customer's limit (api_key=acme) above the rule's, with a fresh count;
#   other customers keep the rule; GET lists it with who set it; explain shows it; the change is
#   logged with the admin token's name; no token, or a bad body, is refused with a reason.
# - It survives a reload and (memory: from the state directory; Redis: from Redis) a restart.
# - On Redis every instance has it in force within 1 s of the PUT, admits exactly its limit
#   between them, and drops it within 1 s of a DELETE made on another instance.
# - One set `for: 2s` ends on its own (waited for, bounded), everywhere.
# Usage: SLUICE=path/to/sluice tests/overrides_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl python3 redis-server redis-cli

mkdir -p "$tmp/rules"
cat >"$tmp/rules/api.yaml" <<'YAML'
domain: api
failure_mode: closed
descriptors:
  - key: api_key
    rate_limit: {requests: 2, unit: hour}
YAML
printf '# the support team\nalice token-of-alice\nbob token-of-bob\n' >"$tmp/rules/tokens"
printf 'admin: {token_file: tokens}\nstate_dir: state\nredis: {timeout: 2s}\n' >"$tmp/rules/sluice.yaml"

acme='{"domain":"api","entries":[{"key":"api_key","value":"acme"}],"limits":[{"requests":5,"unit":"hour"}],"reason":"ticket 42"}'
check_contains "docs/http-api.md's example is the body sent here" "-d '$acme'" \
  "$(cat "$(dirname "$0")/../docs/http-api.md")"

# ending_in_2s BODY: the override BODY with "for": "2s".
ending_in_2s() { printf '%s,"for":"2s"}' "${1%\}}"; }
# put ADMIN TOKEN BODY: PUT /v1/overrides; prints the status, the body in $tmp/put.
put() {
  curl -s -o "$tmp/put" -w '%{http_code}' -m 10 -X PUT ${2:+-H "Authorization: Bearer $2"} \
    -H 'content-type: application/json' -d "$3" "http://$1/v1/overrides"
}
# remove ADMIN TOKEN ENTRIES: DELETE /v1/overrides; prints the status.
remove() {
  curl -s -o "$tmp/removed" -w '%{http_code}' -m 10 -X DELETE -H "Authorization: Bearer $2" \
    "http://$1/v1/overrides?domain=api&entries=$3"
}
# limit_of ADMIN KEY: the size of the limit in force for api_key=KEY (GET /v1/limits, a look).
limit_of() {
  field limit "$(curl -s -m 5 "http://$1/v1/limits?domain=api&descriptors=api_key=$2")"
}
# on I KEY: one check of api_key=KEY on instance I; prints the status.
on() { check_one "${datas[$1]}" api api_key "$2"; }

ms() { date +%s%3N; }

# in_force ADMIN CUSTOMER: "yes" when ADMIN's overrides in force (GET /v1/overrides: the set its
# decisions use, read without a backend call) hold one for api_key=CUSTOMER, else "no".
in_force() {
  curl -s -m 5 "http://$1/v1/overrides?domain=api" |
    grep -q "{\"key\":\"api_key\",\"value\":\"$2\"}" && echo yes || echo no
}

# until_everywhere yes|no CUSTOMER: waits (at most 3 s) until every admin in `admins` says
# in_force yes (no) for CUSTOMER, watching all of them at once (so that one slow answer does not
# delay the others' readings); prints the milliseconds the slowest took, or "never".
until_everywhere() {
  local start i t worst=0 watchers=()
  start=$(ms)
  for i in "${!admins[@]}"; do
    (
      for _ in $(seq 150); do
        if [[ $(in_force "${admins[$i]}" "$2") == "$1" ]]; then
          echo $(($(ms) - start)) >"$tmp/seen.$i"
          exit 0
        fi
        sleep 0.02
      done
      echo never >"$tmp/seen.$i"
    ) &
    watchers+=($!)
  done
  wait "${watchers[@]}"
  for i in "${!admins[@]}"; do
    t=$(cat "$tmp/seen.$i")
    [[ $t == never ]] && { echo never; return; }
    ((t > worst)) && worst=$t
  done
  echo "$worst"
}
within_a_second() { [[ $1 != never && $1 -lt 1000 ]] && echo yes || echo "no ($1 ms)"; }

# ---------------------------------------------------------------- memory
clear_of_hour_end 30
start m --config "$tmp/rules"
datas=("$DATA") admins=("$ADMIN")
check "memory: the rule admits 2" "200 200 429" "$(on 0 acme) $(on 0 acme) $(on 0 acme)"
check "PUT without a token is refused" 401 "$(put "$ADMIN" "" "$acme")"
check "PUT with a wrong token is refused" 401 "$(put "$ADMIN" nope "$acme")"
check "PUT of an unknown domain" 400 "$(put "$ADMIN" token-of-alice '{"domain":"nope","entries":[{"key":"k","value":"v"}],"limits":[{"requests":1,"unit":"second"}]}')"
check_contains "... says why" "unknown domain 'nope'" "$(cat "$tmp/put")"
check "PUT of a limit without a unit" 400 "$(put "$ADMIN" token-of-alice '{"domain":"api","entries":[{"key":"api_key","value":"acme"}],"limits":[{"requests":1}]}')"
check_contains "... says why" "needs a unit" "$(cat "$tmp/put")"
check "PUT that has passed" 400 "$(put "$ADMIN" token-of-alice "${acme%\}}"',"until":"2020-01-01T00:00:00Z"}')"
check_contains "... says why" "has passed" "$(cat "$tmp/put")"
check "GET: none yet" '{"overrides":[]}' "$(curl -s -m 5 "http://$ADMIN/v1/overrides")"
check "PUT by alice" 200 "$(put "$ADMIN" token-of-alice "$acme")"
check_contains "... answers the override, with who set it" '"set_by":"alice"' "$(cat "$tmp/put")"
check "acme now has 5, counted afresh" "200 200 200 200 200 429" \
  "$(for _ in 1 2 3 4 5 6; do on 0 acme; echo -n ' '; done | sed 's/ $//')"
check "... X-RateLimit-Limit: 5" 5 "$(header X-RateLimit-Limit)"
check "another customer keeps the rule's 2" "200 200 429" "$(on 0 beta) $(on 0 beta) $(on 0 beta)"
listed=$(curl -s -m 5 "http://$ADMIN/v1/overrides?domain=api")
check_contains "GET lists it" '"entries":[{"key":"api_key","value":"acme"}],"limits":[{"requests":5,"unit":"hour"}]' "$listed"
check_contains "... with its reason" '"reason":"ticket 42"' "$listed"
explained=$(curl -s -m 5 "http://$ADMIN/v1/explain?domain=api&descriptors=api_key=acme")
check_contains "explain shows it" "runtime override api_key=acme set by alice" "$explained"
check_contains "... outranking the rule" "outranking rule api.api_key" "$explained"
check_contains "the change is logged with the token's name" \
  "override set by alice: domain api api_key=acme with no end" "$(cat "$tmp/m.err")"
check "a reload (POST /v1/reload)" 200 "$(curl -s -o /dev/null -w '%{http_code}' -m 10 -X POST \
  -H 'Authorization: Bearer token-of-bob' "http://$ADMIN/v1/reload")"
check "after a reload: still in force" 5 "$(limit_of "$ADMIN" acme)"
stop
check "memory: stops cleanly" 0 "$STATUS"
check_contains "kept in the state directory" '"set_by":"alice"' "$(cat "$tmp/rules/state/overrides.jsonl")"
check_contains "sluice explain reads it from there" \
  "runtime override api_key=acme set by alice" \
  "$("$sluice" explain --config "$tmp/rules" --domain api api_key=acme 2>&1)"
start m2 --config "$tmp/rules"
admins=("$ADMIN") datas=("$DATA")
check "after a restart: in force again" 5 "$(limit_of "$ADMIN" acme)"
check_contains "... and on the RLS JSON endpoint (as on gRPC)" '"currentLimit":{"requestsPerUnit":5,"unit":"HOUR"}' \
  "$(curl -s -m 5 -d '{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"acme"}]}]}' "http://$DATA/json")"
check "DELETE by bob" 200 "$(remove "$ADMIN" token-of-bob api_key=acme)"
check_contains "... logged with his name" "override removed by bob: domain api api_key=acme" \
  "$(cat "$tmp/m2.err")"
check "... the rule's limit is back" 2 "$(limit_of "$ADMIN" acme)"
check "DELETE of one that is not there" 404 "$(remove "$ADMIN" token-of-bob api_key=acme)"
check "PUT for 2 s" 200 "$(put "$ADMIN" token-of-alice "$(ending_in_2s "$acme")")"
check "... in force" 5 "$(limit_of "$ADMIN" acme)"
for _ in $(seq 50); do [[ $(limit_of "$ADMIN" acme) == 2 ]] && break; sleep 0.1; done
check "... and over on its own" 2 "$(limit_of "$ADMIN" acme)"
check "... no longer listed" '{"overrides":[]}' "$(curl -s -m 5 "http://$ADMIN/v1/overrides")"
stop

# overrides_flow LABEL CUSTOMER: the shared story on the instances in `datas` and `admins`.
overrides_flow() {
  local label=$1 customer=$2 body took
  # A limit Redis cannot decide exactly (a token bucket of a million a day): refused, as in rules.
  body='{"domain":"api","entries":[{"key":"api_key","value":"'$customer'"}],"limits":[{"requests":1000000,"unit":"day","algorithm":"token_bucket"}]}'
  check "$label: a limit too large for Redis's exact range: 400" 400 \
    "$(put "${admins[0]}" token-of-alice "$body")"
  check_contains "$label: ... saying why" "too large to decide exactly on Redis" "$(cat "$tmp/put")"
  body=${acme//acme/$customer}
  check "$label: PUT on instance 0" 200 "$(put "${admins[0]}" token-of-alice "$body")"
  took=$(until_everywhere yes "$customer")
  check "$label: in force on every instance within 1 s" yes "$(within_a_second "$took")"
  echo "     (seen everywhere after $took ms)"
  check "$label: ... deciding there" 5 "$(limit_of "${admins[2]}" "$customer")"
  check "$label: the 4 instances admit exactly 5 between them" 5 "$(fire api api_key "$customer" 4)"
  stop "${spids[3]}"
  start "${label}-again" --config "$cfg" --threads 1
  admins[3]=$ADMIN datas[3]=$DATA spids[3]=$PID
  check "$label: a restarted instance reads it from Redis" 5 "$(limit_of "${admins[3]}" "$customer")"
  check "$label: ... and denies, the count being shared" 429 "$(on 3 "$customer")"
  check "$label: DELETE on instance 2" 200 "$(remove "${admins[2]}" token-of-bob "api_key=$customer")"
  took=$(until_everywhere no "$customer")
  check "$label: gone from every instance within 1 s" yes "$(within_a_second "$took")"
  check "$label: ... the rule's limit decides again" 2 "$(limit_of "${admins[1]}" "$customer")"
  body=$(ending_in_2s "$body")
  check "$label: PUT for 2 s on instance 1" 200 "$(put "${admins[1]}" token-of-alice "$body")"
  check "$label: ... in force everywhere" yes "$(within_a_second "$(until_everywhere yes "$customer")")"
  check "$label: ... and over everywhere within 3 s" yes \
    "$([[ $(until_everywhere no "$customer") != never ]] && echo yes)"
  for i in 0 1 2 3; do stop "${spids[$i]}"; check "$label: instance $i stops cleanly" 0 "$STATUS"; done
}

# ---------------------------------------------------------------- one Redis, four instances
start_redis_on; rport=$RPORT
cfg=$tmp/redis-rules
mkdir -p "$cfg"
cp "$tmp/rules/api.yaml" "$tmp/rules/tokens" "$cfg/"
printf 'admin: {token_file: tokens}\nbackend: redis\nredis: {url: "redis://127.0.0.1:%s", timeout: 2s}\n' \
  "$rport" >"$cfg/sluice.yaml"
start_four r --config "$cfg"
overrides_flow redis acme

# ---------------------------------------------------------------- a 3-master cluster
start_redis_cluster
cfg=$tmp/cluster-rules
mkdir -p "$cfg"
cp "$tmp/rules/api.yaml" "$tmp/rules/tokens" "$cfg/"
cluster_settings "$cfg" "admin: {token_file: tokens}"
start_four c --config "$cfg"
check_contains "cluster: the instances decide on it" "backend redis cluster" "$(cat "$tmp/c0.out")"
overrides_flow cluster globex
finish
