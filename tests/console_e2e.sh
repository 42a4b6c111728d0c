#!/usr/bin/env bash
# End-to-end test of the operator console (GET /ui on the admin port; docs/operations.md, "The
# console") in a real browser: `sluice serve` with an admin token, then tests/console_check.py
# drives Debian's headless Chromium through ChromeDriver against it while sending its own bounded
# traffic (see there for what it requires). Also, without a browser: the page and its assets
# come from the binary with a Content-Security-Policy that allows nothing but this port, a POST
# is a 405, an unknown asset a 404, and GET /v1/explain answers as `sluice explain` does.
# Screenshots are kept in ARTEFACTS (default: $tmp, removed with it).
# Usage: SLUICE=path/to/sluice [ARTEFACTS=DIR] tests/console_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl python3 chromium chromedriver

mkdir -p "$tmp/rules"
cat >"$tmp/rules/api.yaml" <<'YAML'
domain: api
descriptors:
  - key: user
    rate_limit: {requests: 5, window: 1m}
YAML
printf 'console-secret\n' >"$tmp/token"
cat >"$tmp/rules/sluice.yaml" <<YAML
admin: {token_file: $tmp/token}
YAML

start s --config "$tmp/rules"
check "sluice serve is up" 1 "$([[ -n $ADMIN ]] && echo 1)"

headers=$(curl -s -D - -o "$tmp/page" -m 5 "http://$ADMIN/ui")
check_contains "GET /ui: the page" "<title>sluice console</title>" "$(cat "$tmp/page")"
check_contains "GET /ui: only this port may serve its parts" "default-src 'self'" "$headers"
check "GET /ui/console.js: a script" "200 text/javascript; charset=utf-8" \
  "$(curl -s -o /dev/null -m 5 -w '%{http_code} %{content_type}' "http://$ADMIN/ui/console.js")"
check "GET /ui/console.css: a style sheet" "200 text/css; charset=utf-8" \
  "$(curl -s -o /dev/null -m 5 -w '%{http_code} %{content_type}' "http://$ADMIN/ui/console.css")"
check "an unknown asset: 404" 404 "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "http://$ADMIN/ui/x.js")"
check "POST /ui: 405" 405 "$(curl -s -o /dev/null -m 5 -w '%{http_code}' -X POST "http://$ADMIN/ui")"
explained=$(curl -s -m 5 "http://$ADMIN/v1/explain?domain=api&descriptors=user=bob")
check_contains "GET /v1/explain: the rule's limit and where" \
  "5/1m fixed_window at $tmp/rules/api.yaml:4:17" "$(python3 -c 'import json, sys
print(json.load(sys.stdin)["explanation"])' <<<"$explained")"
check "GET /v1/explain of an unknown domain: 404" 404 \
  "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "http://$ADMIN/v1/explain?domain=x&descriptors=a=b")"
check "GET /v1/explain with bad descriptors: 400" 400 \
  "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "http://$ADMIN/v1/explain?domain=api&descriptors=%3D")"

artefacts=${ARTEFACTS:-$tmp/screenshots}
mkdir -p "$artefacts"
# Debian's python3, which python3-selenium installs into (another python3 may come first on the
# PATH).
if timeout 120 /usr/bin/python3 "$(dirname "$0")/console_check.py" "$DATA" "$ADMIN" console-secret \
  "$artefacts" >"$tmp/browser.out" 2>&1; then
  pass "the console in headless Chromium ($(tail -1 "$tmp/browser.out"))"
else
  fail "the console in headless Chromium" "a check in the browser failed" "$(cat "$tmp/browser.out")"
fi
for shot in wide inspector narrow; do
  check "screenshot $shot.png saved" 1 "$([[ -s $artefacts/$shot.png ]] && echo 1)"
done
stop
check "sluice stops cleanly" 0 "$STATUS"
finish
