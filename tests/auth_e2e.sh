#!/usr/bin/env bash
# End-to-end tests of forward-auth (/v1/auth): called directly the way nginx auth_request,
# Traefik ForwardAuth and Envoy ext_authz call it, and through a real nginx (auth_request +
# error_page 403 -> 429) started here on a loopback port.
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
cp "$fixtures/web.yaml" "$fixtures/site.yaml" "$tmp/rules/"
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

# --- through a real nginx: auth_request to sluice, 403 mapped to 429 by error_page, the
# rate-limit headers copied with auth_request_set
ngx="$tmp/nginx" && mkdir -p "$ngx/www/api" "$ngx/tmp"
chmod 755 "$tmp" && echo "hello from upstream" >"$ngx/www/api/items" && chmod -R a+rX "$ngx/www"
# The config for nginx on port $nport.
write_nginx_conf() {
cat >"$ngx/nginx.conf" <<NGINX
worker_processes 1;
pid $ngx/nginx.pid;
error_log $ngx/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $ngx/tmp/body;
  proxy_temp_path $ngx/tmp/proxy;
  fastcgi_temp_path $ngx/tmp/fastcgi;
  uwsgi_temp_path $ngx/tmp/uwsgi;
  scgi_temp_path $ngx/tmp/scgi;
  server {
    listen 127.0.0.1:$nport;
    root $ngx/www;
    location /api/ {
      auth_request /_ratelimit;
      auth_request_set \$rl_limit \$upstream_http_x_ratelimit_limit;
      auth_request_set \$rl_remaining \$upstream_http_x_ratelimit_remaining;
      auth_request_set \$rl_retry \$upstream_http_retry_after;
      add_header X-RateLimit-Limit \$rl_limit always;
      add_header X-RateLimit-Remaining \$rl_remaining always;
      error_page 403 = @ratelimited;
    }
    location = /_ratelimit {
      internal;
      proxy_pass http://$DATA/v1/auth;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Original-URI \$request_uri;
      proxy_set_header X-Original-Method \$request_method;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
    location @ratelimited {
      add_header Retry-After \$rl_retry always;
      add_header X-RateLimit-Remaining \$rl_remaining always;
      default_type application/json;
      return 429 '{"error":"rate limited"}\n';
    }
  }
}
NGINX
}
# The master's workers outlive a SIGKILL of the master: stop it with TERM and wait, then kill
# whatever children are left, by pid.
stop_nginx() {
  kill -TERM "$nginx_pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.05; done
  local kids; kids=$(awk -v p="$nginx_pid" '$4 == p {print $1}' /proc/[0-9]*/stat 2>/dev/null)
  kill -9 "$nginx_pid" $kids 2>/dev/null
}
cleanup_hooks+=(stop_nginx)
# Up to three ports: a process outside these scripts may take the one reserved before nginx
# binds it (free_port).
for _ in 1 2 3; do
  free_port; nport=$FREE_PORT
  write_nginx_conf
  "$nginx" -p "$ngx/" -c "$ngx/nginx.conf" -g 'daemon off;' >"$ngx/stdout" 2>"$ngx/stderr" &
  nginx_pid=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$nport") 2>/dev/null && kill -0 "$nginx_pid" 2>/dev/null && break 2
    kill -0 "$nginx_pid" 2>/dev/null || break
    sleep 0.05
  done
  stop_nginx
done
via() { curl -s -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' -H "X-Forwarded-For: $1" "http://127.0.0.1:$nport/api/items"; }
check "nginx: 1 allowed" 200 "$(via 192.0.2.50)"
check "nginx: the upstream answered" "hello from upstream" "$(cat "$tmp/body")"
check "nginx: X-RateLimit-Limit passed on" 3 "$(header X-RateLimit-Limit)"
check "nginx: X-RateLimit-Remaining passed on" 2 "$(header X-RateLimit-Remaining)"
check "nginx: 2 allowed" 200 "$(via 192.0.2.50)"
check "nginx: 3 allowed" 200 "$(via 192.0.2.50)"
check "nginx: 4 denied, 403 mapped to 429" 429 "$(via 192.0.2.50)"
check_contains "nginx: the 429 body" 'rate limited' "$(cat "$tmp/body")"
check "nginx: Retry-After passed on" 1 "$([[ $(header Retry-After) =~ ^[0-9]+$ ]] && echo 1 || echo 0)"
check "nginx: another client behind the same proxy is independent" 200 "$(via 192.0.2.51)"
[[ $failed -eq 0 ]] || { echo "--- nginx error log"; cat "$ngx/error.log" "$ngx/stderr" 2>/dev/null | tail -20; }

stop
check "SIGTERM exits 0" 0 "$STATUS"
finish
