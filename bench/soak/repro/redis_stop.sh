#!/usr/bin/env bash
# Redis hangs (SIGSTOP) while a closed domain is asked: the 503 answers still take quota once
# Redis resumes, and /readyz stays 200 throughout.
# Expected: 429 never before 3 admissions (here: 200 200 200 after SIGCONT), /readyz 503 while
# Redis hangs (the domain fails closed). Found by bench/soak.sh ("denied under the limit",
# "readiness stayed up"). Usage: [SLUICE=build/release/sluice] bench/soak/repro/redis_stop.sh
set -u
S=${SLUICE:-$(cd "$(dirname "$0")/../../.." && pwd)/build/release/sluice}
d=$(mktemp -d); rp=$((20000 + RANDOM % 5000))
redis-server --port $rp --bind 127.0.0.1 --save '' --appendonly no --dir $d >/dev/null 2>&1 & r=$!
mkdir $d/rules; cat > $d/rules/c.yaml <<Y
domain: c
failure_mode: closed
descriptors:
  - key: user
    rate_limit: {algorithm: fixed_window, requests: 3, window: 1h}
Y
printf 'rules: ./rules\nbackend: redis\nredis: {url: redis://127.0.0.1:%s, timeout: 100ms}\n' $rp > $d/s.yaml
sleep 0.3; $S serve --config $d/s.yaml --listen 127.0.0.1:0 --admin 127.0.0.1:0 --grpc 0 > $d/out 2>&1 & s=$!
trap 'kill -CONT $r; kill $s $r; rm -rf $d' EXIT
sleep 1; D=$(sed -n 's/^sluice: data plane listening on //p' $d/out); A=$(sed -n 's/^sluice: admin listening on //p' $d/out)
q() { curl -s -o /dev/null -w '%{http_code} ' -d '{"domain":"c","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}' http://$D/v1/check; }
kill -STOP $r
echo "while Redis is stopped: $(q)$(q)$(q)  readyz: $(curl -s -o /dev/null -w '%{http_code}' -m 2 http://$A/readyz)"
kill -CONT $r; sleep 1.5
echo "after SIGCONT (limit 3 per hour, nothing admitted yet): $(q)$(q)$(q)"
