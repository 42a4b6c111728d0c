#!/usr/bin/env bash
# A settings file naming its rules directory (`rules: ./rules`): a change in that directory is
# not picked up by the file watcher (only SIGHUP / POST /v1/reload load it). With --config
# pointing at the rules directory itself it is.
# Expected: "picked up" for both. Found by bench/soak.sh ("had not loaded the last rules file by
# itself"). Usage: [SLUICE=...] bench/soak/repro/rules_watch.sh
set -u
sluice=${SLUICE:-$(cd "$(dirname "$0")/../../.." && pwd)/build/release/sluice}
source "$(dirname "$0")/../../../tests/lib.sh"  # (everything started here is stopped on exit)
d=$tmp; mkdir "$d/rules"
w() { printf 'domain: churn\ndescriptors:\n  - key: c\n    rate_limit: {requests: %s, window: 1s}\n' "$1" > "$d/rules/.t"; mv "$d/rules/.t" "$d/rules/churn.yaml"; }
w 1; printf 'rules: ./rules\n' > "$d/s.yaml"
for conf in "$d/s.yaml" "$d/rules"; do
  start s --config "$conf" || { echo "sluice did not start: $(cat "$tmp/s.err")"; exit 1; }
  w $RANDOM; sleep 2   # the watcher's debounce is 200 ms
  a=$(curl -s "http://$ADMIN/v1/rules" | sed 's/.*"version":"\([^"]*\)".*/\1/')
  b=$(curl -s -X POST "http://$ADMIN/v1/reload" | sed 's/.*"version":"\([^"]*\)".*/\1/')
  echo "--config ${conf#"$d"/}: version after the change $a, after POST /v1/reload $b: $([[ $a == "$b" ]] && echo picked up || echo MISSED)"
  stop
done
