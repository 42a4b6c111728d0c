#!/usr/bin/env bash
# End-to-end: Caddy in front of `sluice serve`, running the Caddyfile that
# docs/integration/forward-auth.md shows (docs/integration/caddy-forward-auth.Caddyfile), on
# loopback ports: the page shows the file as it is; per-client and per-key limits; the rate-limit
# headers on the allowed answers and on the 429; a client's own X-Forwarded-For ignored; a request
# no route matches reaching the app with nothing added; and what Caddy answers while sluice
# stalls and once it is down, with the file as it is (502, 504) and with its fail-open import
# (the app answers).
# Usage: SLUICE=path/to/sluice tests/caddy_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl caddy

root=$(cd "$(dirname "$0")/.." && pwd)
page=$root/docs/integration/forward-auth.md
file=docs/integration/caddy-forward-auth.Caddyfile
check_doc_block "forward-auth.md shows $file as it is" "$page" "$root" "$file"
caddy fmt "$root/$file" >"$tmp/fmt.Caddyfile" 2>"$tmp/fmt.err"
check "caddy fmt leaves $file as it is" same \
  "$(cmp -s "$root/$file" "$tmp/fmt.Caddyfile" && echo same || echo "changed ($(head -c 300 "$tmp/fmt.err"))")"

# web.yaml is the page's rules file for Caddy (forward-auth.md shows it), with counts a test
# can reach: 3 a day per client address, 2 a day per API key.
rules=docs/integration/forward-auth-caddy.yaml
check_doc_block "forward-auth.md shows $rules as it is" "$page" "$root" "$rules"
mkdir -p "$tmp/rules"
cp "$root/$rules" "$tmp/rules/web.yaml"
replace_in "$tmp/rules/web.yaml" 'requests: 100, window: 1m' 'requests: 3, window: 1d' 1 &&
  replace_in "$tmp/rules/web.yaml" 'requests: 1000, window: 1h' 'requests: 2, window: 1d' 1 &&
  replace_in "$tmp/rules/web.yaml" '[127.0.0.1]' '[127.0.0.1, "::1"]' 1 ||
  { finish; exit 1; }
start main --config "$tmp/rules"
check "sluice started" 1 "$([[ -n $DATA ]] && echo 1 || echo 0)"

# start_caddy NAME [fail-open]: `caddy run` on the page's Caddyfile with its three ports replaced
# (Caddy on CPORT, sluice at $DATA, the app on another free port), behind a global block that
# binds loopback only and turns the admin endpoint off, and followed by the app: a site that
# answers "app: METHOD URI" and the rate-limit headers it was sent (none, unless Caddy added
# some). With fail-open, the file's commented `import sluice_fail_open` in force. Files (and
# Caddy's own data and autosave) in $tmp/NAME. Sets CPORT and CPID; returns 1 if it did not
# start (up to three tries: a process outside these scripts may take a port reserved before
# Caddy binds it).
start_caddy() {
  local dir=$tmp/$1 app _
  mkdir -p "$dir"
  for _ in 1 2 3; do
    free_port && CPORT=$FREE_PORT && free_port && app=$FREE_PORT || return 1
    cp "$root/$file" "$dir/site"
    replace_in "$dir/site" ':80 {' ":$CPORT {" 1 &&
      replace_in "$dir/site" ' 127.0.0.1:8080 {' " $DATA {" 1 &&
      replace_in "$dir/site" 'hostport} 127.0.0.1:8080' "hostport} $DATA" 1 &&
      replace_in "$dir/site" 'reverse_proxy 127.0.0.1:9000' "reverse_proxy 127.0.0.1:$app" 2 || return 1
    if [[ ${2-} == fail-open ]]; then
      replace_in "$dir/site" '#import sluice_fail_open' 'import sluice_fail_open' 1 || return 1
    fi
    {
      printf '{\n\tadmin off\n\tdefault_bind 127.0.0.1\n}\n\n'
      cat "$dir/site"
      printf '\nhttp://:%s {\n\trespond "app: {method} {uri} limit=[{header.X-RateLimit-Limit}]"\n}\n' "$app"
    } >"$dir/Caddyfile"
    XDG_CONFIG_HOME=$dir XDG_DATA_HOME=$dir \
      caddy run --config "$dir/Caddyfile" --adapter caddyfile >"$dir/out" 2>"$dir/err" &
    CPID=$!
    pids+=("$CPID")
    wait_listening "$CPORT" "$CPID" 10 && wait_listening "$app" "$CPID" && return 0
    stop "$CPID"
  done
  echo "caddy $1 did not start:"
  grep -i error "$dir/err" | tail -3
  return 1
}
CPORT="" CPID=""
start_caddy caddy
started=$?
check "Caddy runs the page's Caddyfile" 0 $started
c=$CPORT c_pid=$CPID
start_caddy caddy-fail-open fail-open
started_open=$?
check "Caddy runs it with its fail-open import" 0 $started_open
c_open=$CPORT c_open_pid=$CPID
((started == 0 && started_open == 0)) || { finish; exit 1; }  # (nothing below could pass)

# via PORT FROM [CURL ARGS...] [PATH]: a request through the Caddy on PORT from the client
# address FROM (a loopback address of its own, which sluice does not trust); GET /api/items
# unless ARGS end in a path (/...). Prints the status, keeps headers and body.
via() {
  local port=$1 from=$2 path=/api/items
  shift 2
  if (($# > 0)) && [[ ${!#} == /* ]]; then path=${!#}; set -- "${@:1:$#-1}"; fi
  curl -s -m 10 -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' --interface "$from" "$@" \
    "http://127.0.0.1:$port$path"
}
number() { [[ $1 =~ ^[0-9]+$ ]] && echo number || echo "not a number: [$1]"; }
curl -s -m 10 -o /dev/null --interface 127.0.0.2 "http://127.0.0.1:$c/"
check "curl sends from 127.0.0.2 (all of 127.0.0.0/8 is loopback)" 0 $?

# --- per client: its own address, whatever X-Forwarded-For it sends (Caddy replaces it)
check "1 allowed" 200 "$(via "$c" 127.0.0.2 -H 'X-Forwarded-For: 203.0.113.1')"
check "the app answered" "app: GET /api/items limit=[]" "$(cat "$tmp/body")"
check "X-RateLimit-Limit on the allowed answer" 3 "$(header X-RateLimit-Limit)"
check "X-RateLimit-Remaining on the allowed answer" 2 "$(header X-RateLimit-Remaining)"
check "X-RateLimit-Reset on the allowed answer" number "$(number "$(header X-RateLimit-Reset)")"
check_contains "RateLimit on the allowed answer" '"per_ip";r=2' "$(header RateLimit)"
check_contains "RateLimit-Policy on the allowed answer" '"per_ip";q=3' "$(header RateLimit-Policy)"
check "no Retry-After on the allowed answer" "" "$(header Retry-After)"
check "2 allowed (another forged X-Forwarded-For)" 200 "$(via "$c" 127.0.0.2 -H 'X-Forwarded-For: 203.0.113.2')"
check "X-RateLimit-Remaining counts down" 1 "$(header X-RateLimit-Remaining)"
check "3 allowed" 200 "$(via "$c" 127.0.0.2)"
check "4 denied: 429 from sluice, passed on" 429 "$(via "$c" 127.0.0.2 -H 'X-Forwarded-For: 203.0.113.4')"
check "Retry-After on the 429" number "$(number "$(header Retry-After)")"
retry=$(header Retry-After)
check "Retry-After is at least 1" 1 "$((${retry:-0} >= 1))"
check "X-RateLimit-Limit on the 429" 3 "$(header X-RateLimit-Limit)"
check "X-RateLimit-Remaining on the 429" 0 "$(header X-RateLimit-Remaining)"
check "X-RateLimit-Reset on the 429" number "$(number "$(header X-RateLimit-Reset)")"
check_contains "RateLimit on the 429" '"per_ip";r=0' "$(header RateLimit)"
check_contains "RateLimit-Policy on the 429" '"per_ip";q=3' "$(header RateLimit-Policy)"
check_contains "the 429's body is sluice's JSON" '"allowed":false' "$(cat "$tmp/body")"
check_contains "the 429 says JSON" 'application/json' "$(header Content-Type)"
check "another client is independent" 200 "$(via "$c" 127.0.0.3 -H 'X-Forwarded-For: 127.0.0.2')"
check "its own count" 2 "$(header X-RateLimit-Remaining)"

# --- per key: one key from three clients (web.yaml: 2 a day)
check "key 1" 200 "$(via "$c" 127.0.0.4 -H 'X-Api-Key: caddy-key')"
check "key 2" 200 "$(via "$c" 127.0.0.5 -H 'X-Api-Key: caddy-key')"
check "key 3 denied from a third client" 429 "$(via "$c" 127.0.0.6 -H 'X-Api-Key: caddy-key')"
check_contains "the 429's headline is the key's limit" '"per_key"' "$(header RateLimit-Policy)"
check "another key is independent" 200 "$(via "$c" 127.0.0.6 -H 'X-Api-Key: other-key')"

# --- no route: sluice allows without headers; nothing is added on either side (forward_auth's
# copy_headers would hand the app placeholder texts here in Caddy 2.6)
check "a path no route matches: allowed" 200 "$(via "$c" 127.0.0.2 /elsewhere)"
check "the app got no rate-limit header" "app: GET /elsewhere limit=[]" "$(cat "$tmp/body")"
check "no rate-limit headers on that answer" "" "$(header X-RateLimit-Limit)$(header RateLimit)$(header RateLimit-Policy)"

# --- sluice's 400 (a key over max_key_bytes) is an answer: passed on, also where it fails open
long=$(head -c 4097 /dev/zero | tr '\0' 'k')
check "sluice's 400 passed on" 400 "$(via "$c" 127.0.0.7 -H "X-Api-Key: $long")"
check "failing open: sluice's 400 still passed on" 400 "$(via "$c_open" 127.0.0.7 -H "X-Api-Key: $long")"
check "failing open: sluice up, the limits hold" 200 "$(via "$c_open" 127.0.0.8)"
check "failing open: X-RateLimit-Remaining" 2 "$(header X-RateLimit-Remaining)"

# --- sluice stopped (SIGSTOP): it accepts connections but answers nothing; Caddy gives up after
# the file's response_header_timeout (1 s). Clients of their own, so that the calls sluice reads
# when it goes on count against nobody else.
kill -STOP "$PID"
check "sluice not answering -> 504" 504 "$(via "$c" 127.0.0.9)"
check "failing open: sluice not answering -> the app answers" 200 "$(via "$c_open" 127.0.0.10)"
check "failing open: the app's answer" "app: GET /api/items limit=[]" "$(cat "$tmp/body")"
kill -CONT "$PID"

stop
check "sluice: SIGTERM exits 0" 0 "$STATUS"

# --- sluice down: 502 with an empty body; failing open, the app answers, a POST's body included
check "sluice down -> 502" 502 "$(via "$c" 127.0.0.11)"
check "an empty body" "" "$(cat "$tmp/body")"
check "no rate-limit headers" "" "$(header X-RateLimit-Limit)$(header RateLimit)"
check "failing open: sluice down -> the app answers" 200 "$(via "$c_open" 127.0.0.11 -X POST -d 'x=1')"
check "failing open: the app got the POST" "app: POST /api/items limit=[]" "$(cat "$tmp/body")"

for p in "$c_pid" "$c_open_pid"; do
  stop "$p"
  check "Caddy: SIGTERM exits 0" 0 "$STATUS"
done
[[ $failed -eq 0 ]] || { echo "--- Caddy's errors"; grep -h -i '"error"' "$tmp"/caddy*/err | tail -10; }
finish
