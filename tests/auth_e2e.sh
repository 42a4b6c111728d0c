#!/usr/bin/env bash
# End-to-end tests of forward-auth (/v1/auth): called directly the way nginx auth_request,
# Traefik ForwardAuth and Envoy ext_authz call it, and through real nginx servers started here on
# loopback ports, running the site that docs/integration/forward-auth.md shows
# (docs/integration/nginx-forward-auth.conf): its answers while sluice runs, stalls and is down,
# as it is and with its fail-open line. (Caddy: tests/caddy_e2e.sh.)
# Usage: SLUICE=path/to/sluice tests/auth_e2e.sh tests/auth
set -u
fixtures=$1
sluice=${SLUICE:?set SLUICE to the sluice binary}
nginx=$(command -v nginx || echo /usr/sbin/nginx)
[[ -x $nginx ]] || { echo "nginx is missing (scripts/bootstrap.sh installs nginx-light)"; echo "0 passed, 1 failed"; exit 1; }

source "$(dirname "$0")/lib.sh"
need_tools curl

# auth [CURL ARGS...]: one forward-auth call; prints the status, keeps headers and body.
auth() { curl -s -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' "$@"; }

mkdir -p "$tmp/rules"
# web.yaml is the page's rules file (forward-auth.md shows it), with counts a test can reach:
# 3 a day per client address, 2 a day per API key.
root=$(cd "$(dirname "$0")/.." && pwd)
page=$root/docs/integration/forward-auth.md
rules=docs/integration/forward-auth-nginx.yaml
check_doc_block "forward-auth.md shows $rules as it is" "$page" "$root" "$rules"
cp "$root/$rules" "$tmp/rules/web.yaml"
cp "$fixtures/site.yaml" "$tmp/rules/"
replace_in "$tmp/rules/web.yaml" 'requests: 100, window: 1m' 'requests: 3, window: 1d' 1 &&
  replace_in "$tmp/rules/web.yaml" 'requests: 1000, window: 1h' 'requests: 2, window: 1d' 1 &&
  replace_in "$tmp/rules/web.yaml" '[127.0.0.1]' '[127.0.0.1, "::1"]' 1 ||
  { finish; exit 1; }
start main --config "$tmp/rules"
url="http://$DATA/v1/auth"

# Each sequence below counts in fixed windows of a day (web.yaml, site.yaml), which turn at UTC
# midnight: a run of a few seconds practically never straddles one, and nothing waits for it.

# --- nginx auth_request style: X-Original-URI / X-Original-Method, the client in X-Forwarded-For
login() { auth -X GET -H 'X-Original-URI: /login?next=/home' -H 'X-Original-Method: POST' -H "X-Forwarded-For: $1" "$url"; }
check "login 1 allowed" 200 "$(login 203.0.113.1)"
check "an allowed answer has an empty body" "" "$(cat "$tmp/body")"
check "an allowed answer says Content-Length: 0" 0 "$(header Content-Length)"
check "allowed answers carry X-RateLimit-Limit" 2 "$(header X-RateLimit-Limit)"
check "allowed answers carry X-RateLimit-Remaining" 1 "$(header X-RateLimit-Remaining)"
check "login 2 allowed" 200 "$(login 203.0.113.1)"
check "login 3 denied with the default 429" 429 "$(login 203.0.113.1)"
check "Retry-After on the deny" 1 "$([[ $(header Retry-After) =~ ^[0-9]+$ && $(header Retry-After) -ge 1 ]] && echo 1 || echo 0)"
check_contains "RateLimit-Policy names the limit" '"login"' "$(header RateLimit-Policy)"
check_contains "the body says why" '"allowed":false' "$(cat "$tmp/body")"
check_contains "the deny's body is JSON" 'application/json' "$(header Content-Type)"
check "another client (by X-Forwarded-For from a trusted proxy) is independent" 200 "$(login 203.0.113.2)"
check "a GET to /login matches no route: allowed" 200 "$(auth -H 'X-Original-URI: /login' -H 'X-Original-Method: GET' -H 'X-Forwarded-For: 203.0.113.1' "$url")"
check "no route, no rate-limit headers" "" "$(header X-RateLimit-Limit)"

# --- Traefik ForwardAuth style: X-Forwarded-Method / X-Forwarded-Uri
traefik() { auth -H 'X-Forwarded-Method: POST' -H 'X-Forwarded-Uri: /login' -H "X-Forwarded-For: $1" "$url"; }
check "traefik 1" 200 "$(traefik 203.0.113.3)"
check "traefik 2" 200 "$(traefik 203.0.113.3)"
check "traefik 3 denied" 429 "$(traefik 203.0.113.3)"

# --- Envoy ext_authz (HTTP) style: the original path after /v1/auth, the request's own method
check "ext_authz path prefix 1" 200 "$(auth -X POST -H 'X-Forwarded-For: 203.0.113.4' "$url/login")"
check "ext_authz path prefix 2" 200 "$(auth -X POST -H 'X-Forwarded-For: 203.0.113.4' "$url/login")"
check "ext_authz path prefix 3 denied" 429 "$(auth -X POST -H 'X-Forwarded-For: 203.0.113.4' "$url/login")"

# --- X-Forwarded-For is believed only from trusted proxies: the peer here is 127.0.0.1, trusted;
# a forged leftmost entry does not pick the client.
check "forged leftmost entry is ignored" 429 "$(login '9.9.9.9, 203.0.113.1')"

# --- a domain's own deny status (web: 403), per-IP and per-key descriptors
api() { auth -H 'X-Original-URI: /api/items' -H 'X-Original-Method: GET' -H "X-Forwarded-For: $1" "${@:2}" "$url"; }
check "api 1" 200 "$(api 198.51.100.1)"
check "api 2" 200 "$(api 198.51.100.1)"
check "api 3" 200 "$(api 198.51.100.1)"
check "api 4 denied with the domain's deny_status" 403 "$(api 198.51.100.1)"
check "rate-limit headers on the 403 too" 0 "$(header X-RateLimit-Remaining)"

# --- every domain must allow, and a request denied by one consumes nothing in the other:
# /api/shared is limited by web (per IP, per key 2/min) and by site (shared, 3/min).
shared() { auth -H 'X-Original-URI: /api/shared' -H "X-Forwarded-For: $1" "${@:2}" "$url"; }
check "shared 1 (key k1)" 200 "$(shared 192.0.2.1 -H 'X-Api-Key: k1')"
check "shared 2 (key k1)" 200 "$(shared 192.0.2.2 -H 'X-Api-Key: k1')"
check "shared 3 denied by web's per-key limit" 403 "$(shared 192.0.2.3 -H 'X-Api-Key: k1')"
check "shared 4 (no key) allowed: the deny consumed nothing of site's limit" 200 "$(shared 192.0.2.4)"
check "shared 5 denied by site with its own 429" 429 "$(shared 192.0.2.5)"
check_contains "the headline is site's limit" '"shared"' "$(header RateLimit-Policy)"

# --- bad input
long=$(head -c 4097 /dev/zero | tr '\0' 'k')
check "a header value over max_key_bytes -> 400" 400 "$(api 198.51.100.9 -H "X-Api-Key: $long")"
check_contains "the 400 names the descriptor key" 'api_key' "$(cat "$tmp/body")"
check "unicode header values work" 200 "$(api 198.51.100.10 -H 'X-Api-Key: ключ-🔑')"

# --- through a real nginx running the page's site, docs/integration/nginx-forward-auth.conf:
# auth_request to sluice, 403 mapped to 429 by error_page, sluice's headers copied onto the
# answers; a second nginx with the page's fail-open line in force.
site=docs/integration/nginx-forward-auth.conf
check_doc_block "forward-auth.md shows $site as it is" "$page" "$root" "$site"

nginx_pids=()
# The master's workers outlive a SIGKILL of the master: stop it with TERM and wait, then kill
# whatever children are left, by pid.
stop_nginx() {  # stop_nginx PID
  local kids _
  kill -TERM "$1" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  kids=$(awk -v p="$1" '$4 == p {print $1}' /proc/[0-9]*/stat 2>/dev/null)
  # shellcheck disable=SC2086  # (one pid a word)
  kill -9 "$1" $kids 2>/dev/null
}
stop_all_nginx() { local p; for p in "${nginx_pids[@]}"; do stop_nginx "$p"; done; }
cleanup_hooks+=(stop_all_nginx)

# start_nginx NAME [fail-open]: an nginx whose http block holds the page's site (its three ports
# replaced: nginx on NPORT, sluice at $DATA, the app on another free port) and the app, a server
# answering "app: METHOD URI"; with fail-open, the site's commented `error_page 500` line in
# force. Files in $tmp/NAME. Sets NPORT and NPID; returns 1 if it did not start (up to three
# tries: a process outside these scripts may take a port reserved before nginx binds it).
start_nginx() {
  local dir=$tmp/$1 app _
  mkdir -p "$dir/tmp"
  for _ in 1 2 3; do
    free_port && NPORT=$FREE_PORT && free_port && app=$FREE_PORT || return 1
    cp "$root/$site" "$dir/site.conf"
    replace_in "$dir/site.conf" 'listen 80;' "listen 127.0.0.1:$NPORT;" 1 &&
      replace_in "$dir/site.conf" 'server 127.0.0.1:8080;' "server $DATA;" 1 &&
      replace_in "$dir/site.conf" 'server 127.0.0.1:9000;' "server 127.0.0.1:$app;" 1 || return 1
    if [[ ${2-} == fail-open ]]; then
      replace_in "$dir/site.conf" '#error_page 500 = @sluice_unreachable;' \
        'error_page 500 = @sluice_unreachable;' 1 || return 1
    fi
    cat >"$dir/nginx.conf" <<NGINX
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  include $dir/site.conf;
  server {
    listen 127.0.0.1:$app;
    location / { default_type text/plain; return 200 "app: \$request_method \$request_uri\n"; }
  }
}
NGINX
    "$nginx" -p "$dir/" -c "$dir/nginx.conf" -g 'daemon off;' >"$dir/stdout" 2>"$dir/stderr" &
    NPID=$!
    nginx_pids+=("$NPID")
    wait_listening "$NPORT" "$NPID" && wait_listening "$app" "$NPID" && return 0
    stop_nginx "$NPID"
  done
  echo "nginx $1 did not start: $(tail -3 "$dir/stderr")"
  return 1
}
start_nginx nginx; check "nginx runs the page's site" 0 $?
ngx=$NPORT
start_nginx nginx-fail-open fail-open; check "nginx runs the page's site with its fail-open line" 0 $?
ngx_open=$NPORT

# via PORT [CURL ARGS...]: GET /api/items through the nginx on PORT; prints the status, keeps
# headers and body.
via() { curl -s -m 10 -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' "${@:2}" "http://127.0.0.1:$1/api/items"; }
number() { [[ $1 =~ ^[0-9]+$ ]] && echo number || echo "not a number: [$1]"; }
# Clients behind a trusted proxy (the curl here, on 127.0.0.1, is one to sluice's eyes: nginx
# passes its X-Forwarded-For on with 127.0.0.1 appended).
check "nginx: 1 allowed" 200 "$(via "$ngx" -H 'X-Forwarded-For: 192.0.2.50')"
check "nginx: the app answered" "app: GET /api/items" "$(cat "$tmp/body")"
check "nginx: X-RateLimit-Limit on the allowed answer" 3 "$(header X-RateLimit-Limit)"
check "nginx: X-RateLimit-Remaining on the allowed answer" 2 "$(header X-RateLimit-Remaining)"
check "nginx: X-RateLimit-Reset on the allowed answer" number "$(number "$(header X-RateLimit-Reset)")"
check_contains "nginx: RateLimit on the allowed answer" '"per_ip";r=2' "$(header RateLimit)"
check_contains "nginx: RateLimit-Policy on the allowed answer" '"per_ip";q=3' "$(header RateLimit-Policy)"
check "nginx: 2 allowed" 200 "$(via "$ngx" -H 'X-Forwarded-For: 192.0.2.50')"
check "nginx: 3 allowed" 200 "$(via "$ngx" -H 'X-Forwarded-For: 192.0.2.50')"
check "nginx: 4 denied, 403 mapped to 429" 429 "$(via "$ngx" -H 'X-Forwarded-For: 192.0.2.50')"
check_contains "nginx: the 429 body" 'rate limited' "$(cat "$tmp/body")"
check "nginx: Retry-After on the 429" number "$(number "$(header Retry-After)")"
check "nginx: X-RateLimit-Limit on the 429" 3 "$(header X-RateLimit-Limit)"
check "nginx: X-RateLimit-Remaining on the 429" 0 "$(header X-RateLimit-Remaining)"
check "nginx: X-RateLimit-Reset on the 429" number "$(number "$(header X-RateLimit-Reset)")"
check_contains "nginx: RateLimit on the 429" '"per_ip";r=0' "$(header RateLimit)"
check_contains "nginx: RateLimit-Policy on the 429" '"per_ip";q=3' "$(header RateLimit-Policy)"
check "nginx: another client behind the same proxy is independent" 200 "$(via "$ngx" -H 'X-Forwarded-For: 192.0.2.51')"
# A client of its own address (curl from 127.0.0.2, which sluice does not trust): what it puts
# in X-Forwarded-For does not pick the key.
curl -s -m 10 -o /dev/null --interface 127.0.0.2 "http://127.0.0.1:$ngx/"
check "curl sends from 127.0.0.2 (all of 127.0.0.0/8 is loopback)" 0 $?
check "nginx: a client's own address 1" 200 "$(via "$ngx" --interface 127.0.0.2 -H 'X-Forwarded-For: 198.51.100.201')"
check "nginx: a client's own address 2" 200 "$(via "$ngx" --interface 127.0.0.2 -H 'X-Forwarded-For: 198.51.100.202')"
check "nginx: a client's own address 3" 200 "$(via "$ngx" --interface 127.0.0.2 -H 'X-Forwarded-For: 198.51.100.203')"
check "nginx: a client's own address 4 denied: its X-Forwarded-For is not believed" 429 \
  "$(via "$ngx" --interface 127.0.0.2 -H 'X-Forwarded-For: 198.51.100.204')"
# Per key: one key from three clients (web.yaml: 2 a day).
check "nginx: key 1" 200 "$(via "$ngx" --interface 127.0.0.3 -H 'X-Api-Key: nginx-key')"
check "nginx: key 2" 200 "$(via "$ngx" --interface 127.0.0.4 -H 'X-Api-Key: nginx-key')"
check "nginx: key 3 denied from a third client" 429 "$(via "$ngx" --interface 127.0.0.5 -H 'X-Api-Key: nginx-key')"
check_contains "nginx: the headline is the key's limit" '"per_key"' "$(header RateLimit-Policy)"
# sluice's 400 (a key over max_key_bytes) is an answer, not an outage: a 500 from nginx, also
# where it fails open.
check "nginx: sluice's 400 becomes a 500" 500 "$(via "$ngx" --interface 127.0.0.6 -H "X-Api-Key: $long")"
check "nginx, failing open: sluice's 400 still a 500, not let through" 500 \
  "$(via "$ngx_open" --interface 127.0.0.6 -H "X-Api-Key: $long")"
check "nginx, failing open: sluice up, the limits hold" 200 "$(via "$ngx_open" --interface 127.0.0.7)"
check "nginx, failing open: X-RateLimit-Remaining" 2 "$(header X-RateLimit-Remaining)"

# sluice stopped (SIGSTOP): it accepts connections but answers nothing; nginx gives up after
# the site's proxy_read_timeout (1s), then as when sluice is down (below). Clients of their own,
# so that the calls sluice reads when it goes on do not count against the others.
kill -STOP "$PID"
check "nginx: sluice not answering -> 500" 500 "$(via "$ngx" --interface 127.0.0.8)"
check "nginx, failing open: sluice not answering -> the app answers" 200 "$(via "$ngx_open" --interface 127.0.0.9)"
check "nginx, failing open: the app's answer" "app: GET /api/items" "$(cat "$tmp/body")"
kill -CONT "$PID"
[[ $failed -eq 0 ]] || { echo "--- nginx error logs"; tail -20 "$tmp"/nginx*/error.log "$tmp"/nginx*/stderr 2>/dev/null; }

stop
check "SIGTERM exits 0" 0 "$STATUS"

# sluice down: nginx answers 500 (the auth subrequest got 502), with no rate-limit headers;
# with the fail-open line, the app answers, a POST and its body included.
check "nginx: sluice down -> 500" 500 "$(via "$ngx" --interface 127.0.0.10)"
check "nginx: no rate-limit headers on that 500" "" "$(header X-RateLimit-Limit)$(header RateLimit)"
check "nginx, failing open: sluice down -> the app answers" 200 "$(via "$ngx_open" --interface 127.0.0.10 -X POST -d 'x=1')"
check "nginx, failing open: the app got the POST" "app: POST /api/items" "$(cat "$tmp/body")"
check "nginx, failing open: no rate-limit headers" "" "$(header X-RateLimit-Limit)$(header RateLimit)"
finish
