#!/usr/bin/env bash
# End-to-end test of the over-limit cache (backend/hybrid/over_limit_cache.h): two `sluice serve`
# processes share one real redis-server. Once Redis has denied a key, an instance denies it again
# with no Redis call until the denial's retry_after (Redis's own command counts show it), and
# decides it on Redis again after; an admin reset through the other instance is seen within 1 s;
# with redis.over_limit_cache: 0 every request is a Redis call (the measurement can fail).
# Usage: SLUICE=path/to/sluice tests/over_limit_cache_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl redis-server redis-cli

script_calls() { redis_script_calls "$rport"; }

# check_n DATA USER N: N checks of USER in one curl (one keep-alive connection); prints the
# statuses' counts, e.g. "3x200 7x429".
check_n() {
  local body="{\"domain\":\"cache\",\"descriptors\":[{\"entries\":[{\"key\":\"$2\",\"value\":\"$3\"}]}]}"
  local args=() _
  for _ in $(seq "$4"); do
    args+=(-o /dev/null -w '%{http_code}\n' -H 'content-type: application/json' -d "$body"
           "http://$1/v1/check" --next)
  done
  curl -s -m 20 "${args[@]::${#args[@]}-1}" | sort | uniq -c | awk '{printf "%sx%s ", $1, $2}' |
    sed 's/ $//'
}

mkdir -p "$tmp/rules"
cat >"$tmp/rules/cache.yaml" <<'EOF'
domain: cache
failure_mode: closed
descriptors:
  - key: hour
    rate_limit: {algorithm: fixed_window, requests: 3, window: 1h}
  - key: short
    rate_limit: {algorithm: sliding_log, requests: 2, window: 2s}
EOF
start_redis_on; rport=$RPORT
url="redis://127.0.0.1:$rport"

# Redis's answers may take longer than the default 10 ms on a machine busy with other tests: a
# timeout would be a 503 here (failure_mode closed), which is not what this tests.
printf 'rules: %s\nredis:\n  timeout: 2s\n' "$tmp/rules" >"$tmp/on.yaml"
clear_of_hour_end 60  # (alice's window of an hour must not roll over while she is counted)
start s0 --config "$tmp/on.yaml" --redis "$url" --threads 1
data0=$DATA admin0=$ADMIN
start s1 --config "$tmp/on.yaml" --redis "$url" --threads 1
data1=$DATA admin1=$ADMIN
check "two instances up" "yes" "$([[ -n $data0 && -n $data1 ]] && echo yes)"

# ----------------------------------------------------------------- a denied key costs no calls
check "alice: 3 of 5 admitted (Redis decides)" "3x200 2x429" "$(check_n "$data0" hour alice 5)"
before=$(script_calls)
check "alice: 200 more denied" "200x429" "$(check_n "$data0" hour alice 200)"
calls=$(($(script_calls) - before))
check "... with at most 2 script calls (the first until the reset epoch is read)" yes \
  "$([[ $calls -le 2 ]] && echo yes || echo "no: $calls")"
hits=$(metric "$admin0" sluice_over_limit_cache_hits_total)
check "... counted as cache hits" yes "$([[ ${hits%.*} -ge 198 ]] && echo yes || echo "no: $hits")"
check "a 429 from the cache keeps its headers" 429 \
  "$(curl -s -o /dev/null -D "$tmp/headers" -w '%{http_code}' -H 'content-type: application/json' \
      -d '{"domain":"cache","descriptors":[{"entries":[{"key":"hour","value":"alice"}]}]}' \
      "http://$data0/v1/check")"
retry=$(header retry-after)
check "... Retry-After is the rest of the hour window" yes \
  "$([[ $retry -gt 0 && $retry -le 3600 ]] && echo yes || echo "no: '$retry'")"
check "another key is decided on Redis: bob admitted" "3x200" "$(check_n "$data0" hour bob 3)"

# ------------------------------------------------------- the second instance caches on its own
check "instance 1: alice denied (by Redis, then its cache)" "50x429" \
  "$(check_n "$data1" hour alice 50)"

# ---------------------------------------------- a reset through instance 1 reaches instance 0
reset=$(curl -s -X DELETE "http://$admin1/v1/limits?domain=cache&descriptors=hour=alice")
check "DELETE /v1/limits through instance 1" '{"reset":1}' "$reset"
start_ns=$(date +%s%N)
seen=""
for _ in $(seq 30); do
  if [[ $(check_n "$data0" hour alice 1) == "1x200" ]]; then
    seen=$((($(date +%s%N) - start_ns) / 1000000)); break
  fi
  sleep 0.05
done
echo "     (seen after ${seen:-never} ms)"
check "instance 0 admits alice again within 1 s of the reset" yes \
  "$([[ -n $seen && $seen -le 1000 ]] && echo yes || echo "no: '${seen:-never}' ms")"

# --------------------------------------------------------- after retry_after, Redis decides
check "carol (2 per 2 s): 2 admitted, then denied" "2x200 3x429" "$(check_n "$data0" short carol 5)"
sleep 2.2
check "carol after her retry_after: admitted again (the entry expired)" "2x200" \
  "$(check_n "$data0" short carol 2)"

# ------------------------------------------------------------------------ the cache turned off
stop_all_sluice() { local p; for p in "${pids[@]}"; do [[ $p != "$RPID" ]] && kill "$p" 2>/dev/null; done; }
stop_all_sluice
printf 'rules: %s\nredis:\n  over_limit_cache: 0\n  timeout: 2s\n' "$tmp/rules" >"$tmp/off.yaml"
start off --config "$tmp/off.yaml" --redis "$url" --threads 1
check_n "$DATA" hour dave 3 >/dev/null
before=$(script_calls)
check "cache off: dave denied 50 times" "50x429" "$(check_n "$DATA" hour dave 50)"
check "... each one a script call" 50 "$(($(script_calls) - before))"
check "... and no cache metrics" "" "$(metric "$ADMIN" sluice_over_limit_cache_hits_total)"

finish
