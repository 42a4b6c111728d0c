#!/usr/bin/env bash
# `sluice serve` with no configuration (what `make run` starts): every endpoint limits out of the
# box, and the "try it" lines it prints work as printed, with its real ports.
# Usage: SLUICE=path/to/sluice tests/default_config_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}
source "$(dirname "$0")/lib.sh"
need_tools curl

start default
check "started on the embedded default" 1 "$(grep -q '^sluice: config <embedded default>' "$tmp/default.out" && echo 1)"
mapfile -t tries < <(sed -n 's/^  \(curl .*\)$/\1/p' "$tmp/default.out")
check "three try-it commands printed" 3 "${#tries[@]}"
check_contains "they use the real data port" "$DATA" "${tries[0]}"
check_contains "and the real admin port" "$ADMIN" "${tries[2]}"

# The printed commands, run as printed.
out=$(bash -c "${tries[0]}")
check_contains "try 1 (/v1/check): 200" "HTTP/1.1 200" "$out"
check_contains "try 1: the free plan's per-second limit, its burst as the limit" "X-RateLimit-Limit: 20" "$out"
check_contains "try 1: JSON names the limit" '"name":"free-per-second"' "$out"
out=$(bash -c "${tries[1]}")
check_contains "try 2 (/v1/auth): 200" "HTTP/1.1 200" "$out"
check_contains "try 2: per-ip applies to forward-auth" '"per-ip";q=200;w=1' "$out"
check_contains "try 2: and the API key's plan" '"free-per-second"' "$out"
out=$(bash -c "${tries[2]}")
check_contains "try 3 (/metrics): decisions counted by limit name" \
  'sluice_decisions_total{domain="default",limit="free-per-second",decision="allowed"}' "$out"

# Every endpoint limits: forward-auth and /v1/check get 429s for one API key past its burst,
# /json answers with the limits of the domain `default`.
# (One curl for 60 requests on one connection: quick enough that the bucket cannot refill.)
urls() { for _ in $(seq 60); do printf '%s\n' "$1"; done; }
mapfile -t many < <(urls "http://$DATA/v1/auth")
codes=$(curl -s -o /dev/null -w '%{http_code} ' -H 'X-Api-Key: flood' "${many[@]}")
check_contains "forward-auth: an API key past its burst gets 429" "429" "$codes"
mapfile -t many < <(urls "http://$DATA/v1/check")
codes=$(curl -s -o /dev/null -w '%{http_code} ' \
  -d '{"domain":"default","descriptors":[{"entries":[{"key":"api_key","value":"flood2"}]}]}' \
  "${many[@]}")
check_contains "/v1/check: an API key past its burst gets 429" "429" "$codes"
out=$(curl -s "http://$DATA/json" -d '{"domain":"default","descriptors":[{"entries":[{"key":"remote_address","value":"10.1.2.3"}]}]}')
check_contains "/json: the per-ip limit applies" '"currentLimit":{"name":"per-ip"' "$out"
out=$(curl -s "http://$DATA/json" -d '{"domain":"default","descriptors":[{"entries":[{"key":"plan","value":"pro"},{"key":"api_key","value":"p1"}]}]}')
check_contains "/json: a request naming the pro plan gets its limits" '"name":"pro-' "$out"

stop
check "SIGTERM: exit 0" 0 "$STATUS"
finish
