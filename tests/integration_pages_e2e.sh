#!/usr/bin/env bash
# The configurations that docs/integration/envoy.md and reverse-proxy.md show, run as the pages
# say (forward-auth.md's are run by auth_e2e.sh and caddy_e2e.sh): each page shows its files
# verbatim (check_doc_block), and only the addresses are replaced (replace_in) to put them on
# free loopback ports.
#   envoy.md: `sluice serve --config sluice.yaml` with the page's settings and rules/edge.yaml
#     prints `sluice: grpc listening on HOST:PORT` and decides the page's limits (logins: 5 per
#     minute per client IP) on /json, which answers as the gRPC port does;
#   reverse-proxy.md: rules/api.yaml in front of the test upstream: a request is forwarded with
#     the upstream's answer and the page's limits in RateLimit-Policy; the upstream's 500 is
#     passed on.
# Usage: SLUICE=path/to/sluice UPSTREAM=path/to/upstream_server tests/integration_pages_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}
upstream=${UPSTREAM:?set UPSTREAM to the upstream_server binary}
source "$(dirname "$0")/lib.sh"
need_tools curl

root=$(cd "$(dirname "$0")/.." && pwd)

# --- envoy.md
page=$root/docs/integration/envoy.md
for f in envoy-edge.yaml envoy-sluice.yaml; do
  check_doc_block "envoy.md shows $f as it is" "$page" "$root" "docs/integration/$f"
done
mkdir -p "$tmp/envoy/rules"
cp "$root/docs/integration/envoy-edge.yaml" "$tmp/envoy/rules/edge.yaml"
cp "$root/docs/integration/envoy-sluice.yaml" "$tmp/envoy/sluice.yaml"
free_port; grpc_port=$FREE_PORT
replace_in "$tmp/envoy/sluice.yaml" '0.0.0.0:8081' "127.0.0.1:$grpc_port" 1 || { finish; exit 1; }
start envoy --config "$tmp/envoy/sluice.yaml" --grpc "127.0.0.1:$grpc_port"
check "envoy.md: serve --config sluice.yaml says where gRPC listens" "127.0.0.1:$grpc_port" \
  "$(sed -n 's/^sluice: grpc listening on //p' "$tmp/envoy.out")"
# logins ADDRESS: the overall codes of six logins from ADDRESS, or "straddled" when the run
# crossed a minute (the limit's window turns then, and would admit more).
logins() {
  local body minute
  body='{"domain":"edge","descriptors":[{"entries":[{"key":"generic_key","value":"login"},{"key":"remote_address","value":"'$1'"}]}]}'
  minute=$(date -u +%Y%m%d%H%M)
  for _ in 1 2 3 4 5 6; do
    curl -s -m 5 -X POST "http://$DATA/json" -d "$body" | sed -n 's/.*"overallCode":"\([A-Z_]*\)".*/\1/p'; echo
  done | xargs
  [[ $(date -u +%Y%m%d%H%M) == "$minute" ]] || echo straddled
}
codes=$(logins 203.0.113.7)
[[ $codes != *straddled ]] || codes=$(logins 203.0.113.8)  # once more, from another address
check "envoy.md: logins, 5 per minute per client IP" "OK OK OK OK OK OVER_LIMIT" "$codes"
stop "$PID"

# --- reverse-proxy.md
page=$root/docs/integration/reverse-proxy.md
rules=docs/integration/reverse-proxy-api.yaml
check_doc_block "reverse-proxy.md shows $rules as it is" "$page" "$root" "$rules"
start_upstream || { finish; exit 1; }
mkdir -p "$tmp/proxy"
cp "$root/$rules" "$tmp/proxy/api.yaml"
replace_in "$tmp/proxy/api.yaml" 'http://127.0.0.1:9000' "http://$UP" 1 || { finish; exit 1; }
start proxy --config "$tmp/proxy"
req() { curl -s -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' --max-time 10 "$@"; }
check "reverse-proxy.md: a request is forwarded with the upstream's answer" 200 \
  "$(req "http://$DATA/status/200")"
check "reverse-proxy.md: ... and its body" "status 200" "$(cat "$tmp/body")"
policy=$(header RateLimit-Policy)
check_contains "reverse-proxy.md: RateLimit-Policy names per_ip" '"per_ip"' "$policy"
check_contains "reverse-proxy.md: RateLimit-Policy names smooth" '"smooth"' "$policy"
check "reverse-proxy.md: the upstream's 500 is passed on" 500 "$(req "http://$DATA/status/500")"
finish
