#!/usr/bin/env bash
# A unique-key flood on a full memory store evicts a live key's state: its limit is lifted.
# Expected: 429 429 429 429 after the flood (the minute's 3 are spent). Found by bench/soak.sh
# ("windows over the limit in mem hot"). Usage: [SLUICE=...] bench/soak/repro/memory_flood.sh
set -u
sluice=${SLUICE:-$(cd "$(dirname "$0")/../../.." && pwd)/build/release/sluice}
source "$(dirname "$0")/../../../tests/lib.sh"  # (everything started here is stopped on exit)
d=$tmp; mkdir "$d/rules"
cat > "$d/rules/h.yaml" <<Y
domain: h
descriptors:
  - key: user
    rate_limit: {algorithm: fixed_window, requests: 3, window: 1m}
  - key: f
    rate_limit: {algorithm: fixed_window, requests: 5, window: 1h}
Y
printf 'rules: ./rules\nstore: {max_entries: 100}\n' > "$d/s.yaml"
start s --config "$d/s.yaml" || { echo "sluice did not start: $(cat "$tmp/s.err")"; exit 1; }
q() { curl -s -o /dev/null -w '%{http_code} ' -d "{\"domain\":\"h\",\"descriptors\":[{\"entries\":[{\"key\":\"$1\",\"value\":\"$2\"}]}]}" "http://$DATA/v1/check"; }
left=$((60 - $(date +%s) % 60)); ((left >= 20)) || sleep $left   # one fixed minute
echo "user=u, limit 3 per minute: $(q user u)$(q user u)$(q user u)$(q user u)"
for i in $(seq 500); do echo "{\"domain\":\"h\",\"descriptors\":[{\"entries\":[{\"key\":\"f\",\"value\":\"k$i\"}]}]}"; done > "$d/bodies"
xargs -P 4 -I{} curl -s -o /dev/null -d {} "http://$DATA/v1/check" < "$d/bodies"
echo "after 500 unique keys, same minute: $(q user u)$(q user u)$(q user u)$(q user u)"
