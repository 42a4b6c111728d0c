#!/usr/bin/env bash
# docs/library.md, followed literally. Its shell commands are run as the page writes them, in
# order: `cmake --install --component library` of the release build, examples/ configured out of
# tree with find_package(sluice) against that install alone, built, and run, and curl against
# it; each prints what the page says it prints, and none a compiler warning. Its C++ snippets
# compile and link against the install, without a warning under the flags of examples/
# (-Werror added), in the project its ```cmake fences make. Then what the page and the example
# promise beyond that: the package's files, exports and shared libraries, the example's limits
# per client, refunds and peeks, and the library's log lines on standard error, or in the
# program's own logger named "sluice".
# Usage: BUILD=build/release tests/library_example_e2e.sh [SOURCE_DIR]
#
# The page's fences:
#   ```sh     preceded by a directive, an HTML comment the rendered page does not show:
#             <!-- run -->               its commands are run, in order, each in a shell of its
#                                        own in the repository's root;
#             <!-- run: background -->   its one command is started and left running (a server);
#             <!-- not run: WHY -->      not run, for the reason given (a build of minutes).
#             A line `# → TEXT` is an expectation of the command before it: its output (stdout
#             and stderr, CRs removed; a background command's within 10 s) contains TEXT, where
#             `…` stands for anything. Other `#` lines are comments; a line ending in `\` goes on
#             on the next. The commands run with HOME set to a temporary directory (the page
#             installs under $HOME), with `build/release` replaced by BUILD, `build/example` by a
#             temporary directory, and 8080 (in commands and expectations) by a free port.
#   ```cmake  together, in order, a project's CMakeLists.txt, with `app.cc` its source.
#   ```cpp    each is app.cc in turn: its `#include` lines at the top, the rest the body of
#             `int main()`, as the page says a reader uses them.
set -u
build=$(cd "${BUILD:?set BUILD to the release build directory}" && pwd)
source_dir=$(cd "${1:-$(dirname "$0")/..}" && pwd)
page=$source_dir/docs/library.md
source "$(dirname "$0")/lib.sh"
need_tools cmake make curl nm c++filt
[[ -r $page ]] || { echo "cannot read $page"; echo "0 passed, 1 failed"; exit 1; }

# ------------------------------------------------------------------ the page's fences
# $tmp/fences/NN.KIND (NN its rank on the page), and NN.KIND.directive with the line before it
# when that is an HTML comment.
mkdir -p "$tmp/fences"
awk -v dir="$tmp/fences" '
  !inside && /^```/ {
    inside = 1; n++; kind = substr($0, 4); gsub(/[ \t]/, "", kind)
    file = sprintf("%s/%02d.%s", dir, n, kind == "" ? "text" : kind)
    printf "" > file
    if (prev ~ /^<!-- .* -->$/) { print prev > (file ".directive"); close(file ".directive") }
    next
  }
  inside && /^```[ \t]*$/ { inside = 0; close(file); next }
  inside { print > file; next }
  { prev = $0 }' "$page"
shopt -s nullglob
sh_fences=("$tmp"/fences/*.sh)
cmake_fences=("$tmp"/fences/*.cmake)
cpp_fences=("$tmp"/fences/*.cpp)
shopt -u nullglob
echo "docs/library.md: ${#sh_fences[@]} sh, ${#cmake_fences[@]} cmake, ${#cpp_fences[@]} cpp fences"

# ------------------------------------------------------------------ its shell commands
home=$tmp/home
mkdir -p "$home"
free_port; port=$FREE_PORT

# Substitutions in a command or an expectation (above).
adapt() {
  local text=$1
  text=${text//build\/release/$build}
  text=${text//…\/build\/example/…$tmp/example}  # (an expectation's "…/build/example")
  text=${text//build\/example/$tmp/example}
  printf '%s' "${text//8080/$port}"
}

# parse_commands FILE: commands[i] and expects[i] (newline-separated) of one sh fence.
parse_commands() {
  local line pending="" n
  commands=() expects=()
  while IFS= read -r line; do
    if [[ -n $pending ]]; then
      pending+=$'\n'"$line"
      [[ $line == *\\ ]] && continue
      commands+=("$pending"); expects+=(""); pending=""
    elif [[ $line == '# → '* ]]; then
      n=${#commands[@]}
      ((n > 0)) || { check "an expectation follows a command" "a command" "[$line] first"; continue; }
      expects[n - 1]+="${line#'# → '}"$'\n'
    elif [[ $line == '#'* || -z ${line// /} ]]; then
      continue
    elif [[ $line == *\\ ]]; then
      pending=$line
    else
      commands+=("$line"); expects+=("")
    fi
  done <"$1"
}

# expect NAME OUTPUT EXPECTATIONS: a check per expectation line.
expect() {
  local want
  while IFS= read -r want; do
    [[ -n $want ]] || continue
    want=$(adapt "$want")
    if contains_in_order "$2" "$want"; then
      pass "$1 → $want"
    else
      fail "$1" "expected [$want] in its output" "$2"
    fi
  done <<<"$3"
}

install_cmd="" server_pid="" server_out=""
ran=0
for fence in "${sh_fences[@]}"; do
  directive=$(cat "$fence.directive" 2>/dev/null)
  case $directive in
    '<!-- run -->' | '<!-- run: background -->') ;;
    '<!-- not run: '*' -->') echo "skip $(head -1 "$fence") (${directive:14:-4})"; continue ;;
    *)
      check "library.md: a sh fence has a directive (<!-- run -->, <!-- not run: WHY -->)" \
        directive "[$directive] before [$(head -1 "$fence")]"
      continue ;;
  esac
  parse_commands "$fence"
  for i in "${!commands[@]}"; do
    cmd=${commands[i]}
    name="library.md: $(head -1 <<<"$cmd" | cut -c1-70)"
    ran=$((ran + 1))
    [[ -n ${expects[i]} ]] || { check "$name: has a '# →' expectation" yes no; continue; }
    [[ $cmd == *'cmake --install'* ]] && install_cmd=$cmd
    if [[ $directive == '<!-- run: background -->' ]]; then
      out=$tmp/background.$ran
      (cd "$source_dir" && HOME=$home exec bash -c "exec $(adapt "$cmd")") >"$out" 2>&1 &
      server_pid=$! server_out=$out
      pids+=("$server_pid")
      for _ in $(seq 200); do
        all=1
        while IFS= read -r want; do
          [[ -z $want ]] || contains_in_order "$(tr -d '\r' <"$out")" "$(adapt "$want")" || all=0
        done <<<"${expects[i]}"
        ((all)) && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.05
      done
      expect "$name" "$(tr -d '\r' <"$out")" "${expects[i]}"
    else
      (cd "$source_dir" && HOME=$home timeout 120 bash -c "$(adapt "$cmd")") >"$tmp/command.$ran" 2>&1
      output=$(tr -d '\r' <"$tmp/command.$ran")
      expect "$name" "$output" "${expects[i]}"
    fi
  done
done
check "library.md's commands print no compiler warning (examples/ builds clean)" "" \
  "$(grep -h 'warning:' "$tmp"/command.* 2>/dev/null | head -3)"
check "library.md runs its install, the example's build and run, and curl (at least 6 commands)" \
  yes "$( ((ran >= 6)) && echo yes)"

# ------------------------------------------------------------------ what it installed
# The prefix the page installs into, under this run's HOME.
prefix=$(sed -n 's/.*--prefix "\{0,1\}\([^" ]*\)"\{0,1\}.*/\1/p' <<<"$install_cmd")
prefix=${prefix//\$HOME/$home}
prefix=${prefix//\~/$home}
check "library.md installs with --component library" 1 \
  "$([[ $install_cmd == *'--component library'* && -d $prefix ]] && echo 1)"
check "the public headers, nothing else" "clock.h concurrency_limiter.h limit.h limiter.h on_full.h rate_limiter.h" \
  "$(cd "$prefix/include/sluice" 2>/dev/null && echo *)"
lib=$(find "$prefix" -name 'libsluice.so' 2>/dev/null | head -1)
check "libsluice.so installed" 1 "$([[ -n $lib ]] && echo 1)"
check "the CMake package installed" 1 \
  "$([[ -n $(find "$prefix" -name sluiceConfig.cmake) && -n $(find "$prefix" -name sluiceTargets.cmake) ]] && echo 1)"
check "nothing but the library (no server, no /etc)" "include lib" "$(cd "$prefix" 2>/dev/null && echo *)"
if [[ -n $lib ]]; then
  exported=$(nm -D --defined-only "$lib" | c++filt | cut -d' ' -f3-)
  check "exports sluice::RateLimiter" 1 "$(grep -q '^sluice::RateLimiter::Decide' <<<"$exported" && echo 1)"
  check "exports nothing internal (store, redis, backend, algo, stack, fmt, spdlog, asio)" "" \
    "$(grep -E '(sluice::(store|redis|backend|algo|util|stack)::|fmt::|spdlog::|asio::)' <<<"$exported" | head -3)"
  # The run-time dependencies the page lists are the ones it is linked with: each shared library
  # libsluice.so needs (but the dynamic loader) comes from a package the page names.
  runtime=$(sed -n '/^- \*\*at run time\*\*/,/^- \*\*to build\*\*/p' "$page")
  while read -r so path; do
    pkg=$({ dpkg -S "$path" || dpkg -S "$(readlink -f "$path")"; } 2>/dev/null | head -1 | cut -d: -f1)
    check_contains "library.md lists the package of $so" "\`${pkg:-(no package for $path)}\`" \
      "$runtime"
  done < <(ldd "$lib" | awk -v needed="$(objdump -p "$lib" | awk '$1 == "NEEDED" {print $2}')" '
    BEGIN { n = split(needed, list, "\n"); for (i = 1; i <= n; i++) direct[list[i]] = 1 }
    $2 == "=>" && $3 ~ /^\// && ($1 in direct) {print $1, $3}')
fi

# ------------------------------------------------------------------ its CMake and C++ snippets
project=$tmp/snippets
mkdir -p "$project"
cat "${cmake_fences[@]}" >"$project/CMakeLists.txt" 2>/dev/null
check "library.md: a cmake fence with find_package(sluice ...)" 1 \
  "$(grep -q '^find_package(sluice' "$project/CMakeLists.txt" && echo 1)"

# examples/CMakeLists.txt does what the page's project does: the same find_package, link and
# compile options (the target's name aside).
cmake_lines() {  # cmake_lines FILE TARGET: those lines, comments removed, TARGET as T
  grep -E '^(find_package\(sluice|target_link_libraries|target_compile_options)' "$1" |
    sed -e 's/ *#.*//' -e "s/(${2} /(T /"
}
check "library.md's find_package and target lines are examples/CMakeLists.txt's" \
  "$(cmake_lines "$source_dir/examples/CMakeLists.txt" rate_limited_server)" \
  "$(cmake_lines "${cmake_fences[0]}" app)"
flags=$(sed -n 's/^target_compile_options(rate_limited_server PRIVATE \(.*\))$/\1/p' \
  "$source_dir/examples/CMakeLists.txt")
check "examples/ builds with -Wall -Wextra" "-Wall -Wextra" "$flags"

# wrap FENCE: the snippet as a reader's app.cc: its #include lines, then the rest in main().
wrap() {
  grep '^#include' "$1"
  echo
  echo 'int main() {'
  grep -v '^#include' "$1"
  echo '}'
}

configured=0
build_app() {  # build_app NAME: builds $project/app.cc (configured once); a check
  local status
  if ((configured == 0)); then
    timeout 120 cmake -S "$project" -B "$project/build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_CXX_FLAGS=-Werror >"$tmp/snippets.configure" 2>&1
    status=$?
    check "library.md's project configures against the install" 0 "$status"
    ((status == 0)) || { cat "$tmp/snippets.configure"; return 1; }
    configured=1
  fi
  timeout 120 cmake --build "$project/build" >"$tmp/snippets.build" 2>&1
  status=$?
  if ((status == 0)); then
    pass "$1"
  else
    fail "$1" "exit $status" "$(cat "$tmp/snippets.build")"
  fi
  return "$status"
}

for fence in "${cpp_fences[@]}"; do
  wrap "$fence" >"$project/app.cc"
  build_app "library.md's snippet $(basename "$fence") compiles and links, -Wall -Wextra -Werror" ||
    cat -n "$project/app.cc"
done
((${#cpp_fences[@]} >= 3)) || check "library.md has its 3 snippets (memory, Redis, logging)" 3 "${#cpp_fences[@]}"

# ------------------------------------------------------------------ the example's promises
url=http://127.0.0.1:$port
codes() {  # codes CLIENT PATH N: the statuses of N requests
  local client=$1 path=$2 n=$3
  for _ in $(seq "$n"); do
    curl -s -m 5 -o /dev/null -w '%{http_code} ' -H "X-Client-Id: $client" "$url$path"
  done | xargs
}
if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
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
  check "the example logs nothing on memory" "" "$(grep -v '^listening on' "$server_out")"
  stop "$server_pid"
  check "stopped by its pid (SIGTERM)" 143 "$STATUS"
else
  check "the example (the page's background command) is serving" running stopped
fi

# ------------------------------------------------------------------ the library's log lines
# On a Redis that is not there (a port reserved here, nothing listening), the failed connection
# is a warning (the line library.md shows): on standard error, never standard output, by
# default ...
example=$tmp/example/rate_limited_server
free_port; redis_port=$FREE_PORT
free_port; port2=$FREE_PORT
if [[ -x $example ]]; then
  "$example" --port "$port2" --redis "redis://127.0.0.1:$redis_port" >"$tmp/redis.out" 2>"$tmp/redis.err" &
  PID=$!
  pids+=("$PID")
  for _ in $(seq 100); do
    grep -q '^listening on' "$tmp/redis.out" 2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
  done
  stop
  check "on an absent Redis, standard output has the example's line alone" \
    "listening on 127.0.0.1:$port2, limits on redis 127.0.0.1:$redis_port" "$(cat "$tmp/redis.out")"
  check_contains "... and the library's warning is on standard error" \
    "[warning] redis: cannot connect to 127.0.0.1:$redis_port: Connection refused" "$(cat "$tmp/redis.err")"
fi
# ... and in the program's own logger named "sluice" when it registered one first: the page's
# logging snippet, then a limiter on that absent Redis.
log_fence=$(grep -l 'spdlog' "${cpp_fences[@]}" 2>/dev/null | head -1)
check "library.md shows how to redirect the log (a cpp fence with spdlog)" 1 "$([[ -n $log_fence ]] && echo 1)"
if [[ -n $log_fence && $configured == 1 ]]; then
  {
    grep '^#include' "$log_fence"
    echo '#include "sluice/rate_limiter.h"'
    echo 'int main() {'
    grep -v '^#include' "$log_fence"
    echo '  sluice::RateLimiter::Options options;'
    echo '  options.redis.emplace();'
    echo "  options.redis->url = \"redis://127.0.0.1:$redis_port\";"
    echo '  auto limiter = sluice::RateLimiter::Create('
    echo '      {{.algorithm = sluice::Algorithm::kTokenBucket, .requests = 1, .window_us = 1000000}}, options);'
    echo '  return limiter.ok() ? 0 : 1;'
    echo '}'
  } >"$project/app.cc"
  if build_app "the logging snippet with a limiter on an absent Redis builds"; then
    mkdir -p "$tmp/run"
    (cd "$tmp/run" && timeout 30 "$project/build/app" >"$tmp/run.out" 2>"$tmp/run.err")
    check "it runs (exit 0)" 0 "$?"
    check "nothing on its standard output or error" "" "$(cat "$tmp/run.out" "$tmp/run.err")"
    log=$(grep -o '"[^"]*\.log"' "$log_fence" | head -1 | tr -d '"')
    check_contains "the library's warning is in the snippet's $log" \
      "[warning] redis: cannot connect to 127.0.0.1:$redis_port: Connection refused" \
      "$(cat "$tmp/run/$log" 2>/dev/null)"
  fi
fi
finish
