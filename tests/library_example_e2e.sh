#!/usr/bin/env bash
# The library as a user gets it: `cmake --install` of the release build into a temporary prefix
# (the `library` component: libsluice.so, include/sluice/, the CMake package), then examples/
# configured out of tree with find_package(sluice) against that prefix alone, built, and run on
# a free loopback port. curl checks what the example promises: each client admitted up to its
# limit, then 429 with Retry-After; failed work refunded; another client unaffected.
# Usage: BUILD=build/release tests/library_example_e2e.sh [SOURCE_DIR]
set -u
build=$(cd "${BUILD:?set BUILD to the release build directory}" && pwd)
source_dir=$(cd "${1:-$(dirname "$0")/..}" && pwd)
source "$(dirname "$0")/lib.sh"
need_tools cmake curl nm c++filt

prefix=$tmp/prefix
timeout 120 cmake --install "$build" --prefix "$prefix" --component library >"$tmp/install.log" 2>&1
check "cmake --install --component library" 0 "$?"
check "the public headers, nothing else" "clock.h limit.h limiter.h on_full.h rate_limiter.h" \
  "$(cd "$prefix/include/sluice" 2>/dev/null && echo *)"
lib=$(find "$prefix" -name 'libsluice.so' | head -1)
check "libsluice.so installed" 1 "$([[ -n $lib ]] && echo 1)"
check "the CMake package installed" 1 \
  "$([[ -n $(find "$prefix" -name sluiceConfig.cmake) && -n $(find "$prefix" -name sluiceTargets.cmake) ]] && echo 1)"
if [[ -n $lib ]]; then
  exported=$(nm -D --defined-only "$lib" | c++filt | cut -d' ' -f3-)
  check "exports sluice::RateLimiter" 1 "$(grep -q '^sluice::RateLimiter::Decide' <<<"$exported" && echo 1)"
  check "exports nothing internal (store, redis, backend, algo, stack, fmt, spdlog, asio)" "" \
    "$(grep -E '(sluice::(store|redis|backend|algo|util|stack)::|fmt::|spdlog::|asio::)' <<<"$exported" | head -3)"
fi

example=$tmp/example
timeout 120 cmake -S "$source_dir/examples" -B "$example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log" 2>&1
status=$?
check "examples/ configures with find_package(sluice)" 0 "$status"
((status == 0)) || cat "$tmp/configure.log"
timeout 300 cmake --build "$example" >"$tmp/build.log" 2>&1
status=$?
check "examples/ builds against the installed package" 0 "$status"
((status == 0)) || tail -30 "$tmp/build.log"
server=$example/rate_limited_server
[[ -x $server ]] || { finish; exit 1; }

free_port; port=$FREE_PORT
"$server" --port "$port" >"$tmp/server.out" 2>"$tmp/server.err" &
PID=$!
pids+=("$PID")
for _ in $(seq 100); do
  grep -q '^listening on' "$tmp/server.out" 2>/dev/null && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.05
done
check "the example listens" "listening on 127.0.0.1:$port, limits on memory" "$(cat "$tmp/server.out")"

url=http://127.0.0.1:$port
codes() {  # codes CLIENT PATH N: the statuses of N requests
  local client=$1 path=$2 n=$3
  for _ in $(seq "$n"); do
    curl -s -m 5 -o /dev/null -w '%{http_code} ' -H "X-Client-Id: $client" "$url$path"
  done | xargs
}
check "client a: 5 admitted (5 per minute)" "200 200 200 200 200" "$(codes a / 5)"
curl -s -m 5 -o /dev/null -D "$tmp/headers" -w '%{http_code}' -H 'X-Client-Id: a' "$url/" >"$tmp/code"
check "client a: then 429" 429 "$(cat "$tmp/code")"
retry=$(header Retry-After)
check "429 says Retry-After in whole seconds, 1 to 60" 1 "$([[ $retry =~ ^[0-9]+$ ]] && ((retry >= 1 && retry <= 60)) && echo 1)"
check "client a has nothing left (a peek)" "remaining 0" \
  "$(curl -s -m 5 -H 'X-Client-Id: a' "$url/quota")"
check "client b is not limited by a" "200 200" "$(codes b / 2)"
check "client c: failed work (refunded) never runs out" "500 500 500 500 500 500 500 500" "$(codes c /fail 8)"
check "client c: still its whole quota" "200 200 200 200 200 429" "$(codes c / 6)"

stop
check "stopped by its pid (SIGTERM)" 143 "$STATUS"
finish
