#!/usr/bin/env bash
# A settings file naming its rules directory (`rules: ./rules`): a change in that directory is
# not picked up by the file watcher (only SIGHUP / POST /v1/reload load it). With --config
# pointing at the rules directory itself it is.
# Expected: "picked up" for both. Found by bench/soak.sh ("had not loaded the last rules file by
# itself"). Usage: [SLUICE=...] bench/soak/repro/rules_watch.sh
set -u
S=${SLUICE:-$(cd "$(dirname "$0")/../../.." && pwd)/build/release/sluice}
d=$(mktemp -d); mkdir $d/rules
w() { printf 'domain: churn\ndescriptors:\n  - key: c\n    rate_limit: {requests: %s, window: 1s}\n' $1 > $d/rules/.t; mv $d/rules/.t $d/rules/churn.yaml; }
w 1; printf 'rules: ./rules\n' > $d/s.yaml
for conf in $d/s.yaml $d/rules; do
  $S serve --config $conf --listen 127.0.0.1:0 --admin 127.0.0.1:0 --grpc 0 > $d/out 2>&1 & s=$!
  sleep 1; A=$(sed -n 's/^sluice: admin listening on //p' $d/out)
  w $RANDOM; sleep 2   # the watcher's debounce is 200 ms
  a=$(curl -s http://$A/v1/rules | sed 's/.*"version":"\([^"]*\)".*/\1/')
  b=$(curl -s -X POST http://$A/v1/reload | sed 's/.*"version":"\([^"]*\)".*/\1/')
  echo "--config ${conf#$d/}: version after the change $a, after POST /v1/reload $b: $([[ $a == "$b" ]] && echo picked up || echo MISSED)"
  kill $s; wait $s 2>/dev/null
done
rm -rf $d
