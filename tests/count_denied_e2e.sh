#!/usr/bin/env bash
# End-to-end test of count_denied on every algorithm (docs/algorithms.md, "Recorded overdrafts"):
# `sluice serve` on the memory store, then on a real redis-server (with its over-limit cache), a
# domain with count_denied: true for each consistency (exact, leased, eventual), replaying what
# Envoy AI Gateway sends for an LLM token limit: a check with hits_addend 0 at request time, and
# after the response a report of the tokens used, past the limit or not. Each report is recorded
# in full (the next check is denied for as long as the overdraft takes to pay back at the limit's
# rate: days, at 1000 tokens a day; a fixed window until it ends, as upstream's counter), repeated
# denied reports all reach the store, and a domain without count_denied records nothing that does
# not fit.
# Usage: SLUICE=path/to/sluice tests/count_denied_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl redis-server redis-cli

algorithms=(token_bucket leaky_bucket fixed_window sliding_window sliding_log)
mkdir -p "$tmp/rules"
# domain_file NAME CONSISTENCY COUNT_DENIED: 1000 tokens a day per user, one key per algorithm.
domain_file() {
  {
    printf 'domain: %s\nconsistency: %s\ncount_denied: %s\nfailure_mode: closed\ndescriptors:\n' "$1" "$2" "$3"
    for a in "${algorithms[@]}"; do
      burst=""
      [[ $a == leaky_bucket ]] && burst=", burst: 999"
      printf '  - key: %s\n    rate_limit: {algorithm: %s, requests: 1000, window: 1d%s}\n' "$a" "$a" "$burst"
    done
  } >"$tmp/rules/$1.yaml"
}
for c in exact leased eventual; do domain_file "ai_$c" "$c" true; done
domain_file plain exact false

# ask DOMAIN KEY USER HITS: one check; prints "CODE REMAINING RETRY_AFTER_MS".
ask() {
  local body out code
  body="{\"domain\":\"$1\",\"descriptors\":[{\"entries\":[{\"key\":\"$2\",\"value\":\"$3\"}],\"hits_addend\":$4}]}"
  out=$(curl -s -m 5 -w '\n%{http_code}' -H 'content-type: application/json' -d "$body" "http://$DATA/v1/check")
  code=$(tail -1 <<<"$out")
  echo "$code $(field remaining "$out") $(field retry_after_ms "$out")"
}

day_ms=86400000
# exchange WHERE DOMAIN: the AI-Gateway exchange on each algorithm's key of DOMAIN.
exchange() {
  local where=$1 domain=$2 a user got code remaining retry want_retry retry2
  for a in "${algorithms[@]}"; do
    user="$where-$domain-$a"
    got=$(ask "$domain" "$a" "$user" 0)
    check "$where $domain $a: the first check (hits_addend 0) is allowed, nothing used" "200 1000" "${got% *}"
    ask "$domain" "$a" "$user" 900 >/dev/null
    got=$(ask "$domain" "$a" "$user" 0)
    check "$where $domain $a: a report of 900 fits: 100 left" "200 100" "${got% *}"
    got=$(ask "$domain" "$a" "$user" 5000)
    check "$where $domain $a: a report of 5000 is denied (OVER_LIMIT)" "429" "${got%% *}"
    read -r code remaining retry <<<"$(ask "$domain" "$a" "$user" 0)"
    # 4900 past 1000 a day: four days and more to pay back (the log forgets it after a day, a
    # fixed window when its day ends, as upstream's counter).
    want_retry=$((4 * day_ms))
    [[ $a == sliding_log ]] && want_retry=$((day_ms - 600000))
    [[ $a == fixed_window ]] && want_retry=1
    if [[ $code == 429 && $remaining == 0 && $retry -ge $want_retry ]]; then
      pass "$where $domain $a: it was recorded: the next check is denied, retry_after ${retry} ms"
    else
      fail "$where $domain $a: the report of 5000 was not recorded in full" \
        "check: $code remaining $remaining retry_after ${retry} ms (want 429, 0, >= $want_retry)"
    fi
    # Denied reports keep reaching the store, none answered from a denial kept for the same cost
    # (Redis's over-limit cache keeps denials of a cost within the capacity, whose retry_after is
    # finite): 1000 more tokens of debt are 1000 x 86.4 s more to wait on a bucket.
    ask "$domain" "$a" "$user" 500 >/dev/null
    ask "$domain" "$a" "$user" 500 >/dev/null
    read -r code remaining retry2 <<<"$(ask "$domain" "$a" "$user" 0)"
    if [[ $a == token_bucket || $a == leaky_bucket ]]; then
      if ((retry2 - retry >= 1000 * 86400 - 5000)); then
        pass "$where $domain $a: two more denied reports of 500 were recorded too"
      else
        fail "$where $domain $a: denied reports were not recorded" "retry_after $retry then $retry2 ms"
      fi
    else
      check "$where $domain $a: still denied after more reports" "429" "$code"
    fi
  done
  # Without count_denied a report that does not fit records nothing.
  user="$where-$domain-plain"
  ask plain token_bucket "$user" 900 >/dev/null
  got=$(ask plain token_bucket "$user" 5000)
  check "$where plain: without count_denied a report of 5000 is denied" "429" "${got%% *}"
  got=$(ask plain token_bucket "$user" 0)
  check "$where plain: ... and records nothing: 100 left" "200 100" "${got% *}"
}

printf 'rules: %s\n' "$tmp/rules" >"$tmp/memory.yaml"
if start memory --config "$tmp/memory.yaml" --threads 2; then
  exchange memory ai_exact
  exchange memory ai_leased
  exchange memory ai_eventual
  stop
else
  fail "memory: sluice did not start" "" "$(cat "$tmp/memory.err")"
fi

start_redis_on || { echo "0 passed, 1 failed"; exit 1; }
# (A timeout that a busy machine does not reach: a call that timed out would be answered by the
# domain's failure_mode instead, recording nothing.)
printf 'rules: %s\nredis:\n  instances: 2\n  timeout: 2s\n  over_limit_cache: 1000\n  sync_interval: 100ms\n' \
  "$tmp/rules" >"$tmp/redis.yaml"
if start redis --config "$tmp/redis.yaml" --redis "redis://127.0.0.1:$RPORT" --threads 2; then
  exchange redis ai_exact
  exchange redis ai_leased
  exchange redis ai_eventual
  stop
else
  fail "redis: sluice did not start" "" "$(cat "$tmp/redis.err")"
fi

finish
