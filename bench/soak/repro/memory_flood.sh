#!/usr/bin/env bash
# A unique-key flood on a full memory store evicts a live key's state: its limit is lifted.
# Expected: 429 429 429 429 after the flood (the minute's 3 are spent). Found by bench/soak.sh
# ("windows over the limit in mem hot"). Usage: [SLUICE=...] bench/soak/repro/memory_flood.sh
set -u
S=${SLUICE:-$(cd "$(dirname "$0")/../../.." && pwd)/build/release/sluice}
d=$(mktemp -d); mkdir $d/rules
cat > $d/rules/h.yaml <<Y
domain: h
descriptors:
  - key: user
    rate_limit: {algorithm: fixed_window, requests: 3, window: 1m}
  - key: f
    rate_limit: {algorithm: fixed_window, requests: 5, window: 1h}
Y
printf 'rules: ./rules\nstore: {max_entries: 100}\n' > $d/s.yaml
$S serve --config $d/s.yaml --listen 127.0.0.1:0 --admin 127.0.0.1:0 --grpc 0 > $d/out 2>&1 & s=$!
trap 'kill $s; rm -rf $d' EXIT
sleep 1; D=$(sed -n 's/^sluice: data plane listening on //p' $d/out)
q() { curl -s -o /dev/null -w '%{http_code} ' -d "{\"domain\":\"h\",\"descriptors\":[{\"entries\":[{\"key\":\"$1\",\"value\":\"$2\"}]}]}" http://$D/v1/check; }
left=$((60 - $(date +%s) % 60)); ((left >= 20)) || sleep $left   # one fixed minute
echo "user=u, limit 3 per minute: $(q user u)$(q user u)$(q user u)$(q user u)"
for i in $(seq 500); do echo "{\"domain\":\"h\",\"descriptors\":[{\"entries\":[{\"key\":\"f\",\"value\":\"k$i\"}]}]}"; done > $d/bodies
xargs -P 4 -I{} curl -s -o /dev/null -d {} http://$D/v1/check < $d/bodies
echo "after 500 unique keys, same minute: $(q user u)$(q user u)$(q user u)$(q user u)"
