#!/usr/bin/env bash
# Redis hangs (SIGSTOP) while a closed domain is asked: the 503 answers still take quota once
# Redis resumes, and /readyz stays 200 throughout.
# Expected: 429 never before 3 admissions (here: 200 200 200 after SIGCONT), /readyz 503 while
# Redis hangs (the domain fails closed). Found by bench/soak.sh ("denied under the limit",
# "readiness stayed up"). Usage: [SLUICE=build/release/sluice] bench/soak/repro/redis_stop.sh
set -u
sluice=${SLUICE:-$(cd "$(dirname "$0")/../../.." && pwd)/build/release/sluice}
source "$(dirname "$0")/../../../tests/lib.sh"  # (everything started here is stopped on exit)
start_redis_on >/dev/null || { echo "redis-server did not start"; exit 1; }
d=$tmp; mkdir "$d/rules"; cat > "$d/rules/c.yaml" <<Y
domain: c
failure_mode: closed
descriptors:
  - key: user
    rate_limit: {algorithm: fixed_window, requests: 3, window: 1h}
Y
printf 'rules: ./rules\nbackend: redis\nredis: {url: redis://127.0.0.1:%s, timeout: 100ms}\n' "$RPORT" > "$d/s.yaml"
start s --config "$d/s.yaml" || { echo "sluice did not start: $(cat "$tmp/s.err")"; exit 1; }
q() { curl -s -o /dev/null -w '%{http_code} ' -d '{"domain":"c","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}' "http://$DATA/v1/check"; }
kill -STOP "$RPID"
echo "while Redis is stopped: $(q)$(q)$(q)  readyz: $(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://$ADMIN/readyz")"
kill -CONT "$RPID"; sleep 1.5
echo "after SIGCONT (limit 3 per hour, nothing admitted yet): $(q)$(q)$(q)"
