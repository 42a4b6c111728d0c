#!/usr/bin/env bash
# A flood of unique keys against `sluice serve` with a tiny memory store (issue 18): a key the
# store tracks stays at its limit whatever the flood does, the store stays at store.max_entries,
# and /metrics counts the decisions that found it full. Once per store.on_full mode that differs
# for new keys: shared (the default) and deny.
# Usage: SLUICE=path/to/sluice tests/store_flood_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl

# 5 per hour: nothing refills while the test runs.
mkdir -p "$tmp/rules"
cat >"$tmp/rules/api.yaml" <<YAML
domain: api
descriptors:
  - key: user
    rate_limit: {name: per_user, requests: 5, window: 1h, algorithm: token_bucket}
YAML

body() { echo "{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"$1\"}]}]}"; }
victim() { curl -s -m 5 -o /dev/null -w '%{http_code}' -X POST --data-binary "$(body victim)" "http://$DATA/v1/check"; }

# flood N PREFIX: N checks for unique users over one keep-alive connection (one curl, bounded in
# time); writes each status code on a line of $tmp/flood.
flood() {
  awk -v n="$1" -v prefix="$2" -v data="$DATA" 'BEGIN {
    for (i = 0; i < n; i++) {
      if (i > 0) print "next"
      printf "url = \"http://%s/v1/check\"\n", data
      printf "data-binary = \"{\\\"domain\\\":\\\"api\\\",\\\"descriptors\\\":[{\\\"entries\\\":[{\\\"key\\\":\\\"user\\\",\\\"value\\\":\\\"%s-%d\\\"}]}]}\"\n", prefix, i
      printf "output = \"/dev/null\"\nwrite-out = \"%%{http_code}\\n\"\n"
    }
  }' >"$tmp/flood.curl"
  curl -s -m 60 -K "$tmp/flood.curl" >"$tmp/flood"
}

for mode in shared deny; do
  cat >"$tmp/sluice.yaml" <<YAML
rules: rules
store: {max_entries: 64, on_full: $mode}
YAML
  start "$mode" --config "$tmp/sluice.yaml"
  [[ -n $DATA ]] || { echo "FAIL $mode: sluice did not start: $(cat "$tmp/$mode.err")"; failed=$((failed + 1)); continue; }

  codes=""
  for _ in 1 2 3; do codes+="$(victim) "; done
  check "$mode: the victim's first 3 requests are admitted" "200 200 200 " "$codes"

  flood 3000 "$mode-flood"
  check "$mode: every flood request was answered" 3000 "$(wc -l <"$tmp/flood")"
  admitted=$(grep -c '^200$' "$tmp/flood")
  if [[ $mode == shared ]]; then
    # 64 states tracked at most, and the rest share 5 per shard (64 shards).
    ((admitted <= 64 + 5 * 64)) && ok=yes || ok="no ($admitted)"
    check "$mode: the flood's new keys share their limit" yes "$ok"
  else
    ((admitted <= 64)) && ok=yes || ok="no ($admitted)"
    check "$mode: new keys beyond the bound are denied" yes "$ok"
  fi

  codes=""
  for _ in 1 2 3 4; do codes+="$(victim) "; done
  check "$mode: the victim has exactly 2 left after the flood" "200 200 429 429 " "$codes"

  entries=$(metric "$ADMIN" sluice_store_entries)
  ((${entries:-999} <= 64)) && ok=yes || ok="no ($entries)"
  check "$mode: sluice_store_entries stays at most max_entries" yes "$ok"
  denied=$(metric "$ADMIN" "sluice_store_no_room_decisions_total{on_full=\"$mode\",decision=\"denied\"}")
  ((${denied:-0} >= 3000 - 64 - 5 * 64)) && ok=yes || ok="no ($denied)"
  check "$mode: /metrics counts the decisions that found the store full" yes "$ok"
  check "$mode: no evictions counter any more" 0 "$(metrics "$ADMIN" | grep -c '^sluice_store_evictions_total')"
  stop
  check "$mode: clean exit" 0 "$STATUS"
done

finish
