#!/usr/bin/env bash
# Checks sluice's layering: every `#include "dir/..."` in src/, include/sluice/ and the unit tests'
# kit (tests/support/) must follow the table below, which is the one place the allowed include
# graph is written down.
#
#   bash scripts/check_layers.sh [ROOT]      (default: this script's repository)
#
# A file's module is the longest key of the table that is a folder of its path under src/
# (src/backend/memory/memory_store.cc: backend/memory, not backend; src/http/service.cc: http);
# include/sluice/ is the module `sluice`, the public API; the kit's files are modules by their path
# from the repository's root (tests/support/temp_dir.cc: tests/support). An include's module is
# found the same way from its path ("backend/memory/memory_store.h": backend/memory,
# "tests/support/limits.h": tests/support). Includes of third-party code
# (absl/, fmt/, gtest/, ...) are not checked; any other quoted include must name a module of the
# table. A module may include itself; a nested module (backend/memory) is a module of its own: it
# may include its parent (backend) only if its row says so, and the parent may not include it unless
# its row says so. Tests (*_test.cc, and *_testing.h helpers) may also include the kit's core
# (tests/support: it knows the public types only) and the modules in the table's third column.
# Prints every forbidden edge as `FILE:LINE: FROM -> TO ("INCLUDE")` and exits 1 if there is one;
# exits 0 with a one-line summary otherwise.
#
# The build follows the same table: each src/ folder's CMakeLists.txt builds one library,
# sluice_<module> (slashes as underscores: sluice_backend_memory), linked only to the libraries of
# its row, and its tests' binary, linked to those of the test column too and to the kit's core,
# sluice_testing (tests/support/CMakeLists.txt, linked by sluice_test() into every test binary).
# This script checks those links as it checks includes; a forbidden call then fails to link as
# well, even one that no include names (tests/layers_build_test.sh).
set -euo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}

# module        | may include                                                         | its tests may also include
TABLE='
sluice          | sluice                                                              |
types           | sluice                                                              |
util            |                                                                     |
trace           | util sluice                                                         |
trace/otlp      | trace util sluice                                                   |
algo            | sluice                                                              |
backend         | algo sluice                                                         |
backend/memory  | backend algo util sluice                                            |
backend/hybrid  | backend algo sluice                                                 | backend/memory
redis           | metrics util sluice                                                 |
backend/redis   | redis backend/hybrid backend algo metrics util sluice               | backend/memory tests/support/redis_store
rules           | backend util sluice                                                 | engine backend/memory cli
engine          | rules backend algo trace util sluice                                      | backend/memory
headers         | engine rules util sluice                                            | backend/memory
metrics         | util                                                                |
stack           | backend/memory backend/hybrid backend/redis redis backend rules metrics util sluice |
library         | stack backend/memory backend util sluice                            |
http/transport  | util sluice                                                         |
http            | http/transport engine rules headers metrics backend trace util sluice | backend/memory
rls             | engine rules headers metrics backend trace util sluice              | backend/memory
xds             | rls rules metrics util sluice                                       |
cli/bench       | backend/memory backend/redis redis backend algo util sluice         |
sim             | stack cli/bench backend/memory backend/redis redis backend rules algo util library sluice |
cli             | http http/transport rls xds stack cli/bench sim library engine rules headers metrics backend trace trace/otlp util sluice |
tests/support   | sluice                                                              |
tests/support/redis_store | tests/support backend/redis redis sluice                  |
'
# What the rows mean, bottom up (a request flows from a frontend through the engine to the
# Backend interface, behind which the implementations decide with the algorithms):
# - sluice: the public headers (include/sluice/). Their definitions are in types (clock.h,
#   limit.h: the public types every layer uses) and library (limiter.h, rate_limiter.h: the
#   library's classes). A row naming sluice links sluice_types; library has no headers, and a row
#   naming it may link sluice_library, for sluice::Limiter (sim, cli).
# - algo: the algorithms are pure functions of the public types. util: nothing of ours.
# - trace: spans of sluice's work (OpenTelemetry's model), sampling and their bounded queue;
#   knows nothing of rate limits. trace/otlp: their OTLP exporter (gRPC, HTTP/protobuf), for cli.
# - backend: the Backend interface, the Failover wrapper (the failure policy), the ids of limits'
#   states, reset epochs, the ticker and held denials (rules shared by the over-limit cache and
#   the memory store's kept denials); never an implementation of itself.
# - backend/memory: the in-memory backend and its per-thread fronts (kept denials, leases).
#   backend/hybrid: wrappers that decide through another Backend (the over-limit cache, leases,
#   hot keys) or on copies of states with the algorithms (Eventual). backend/redis: the Redis
#   backend (its scripts, its eviction-policy check), on the wire client (redis) and on hybrid's
#   leases and eventual copies, whose states it merges in algo's form.
# - redis: the wire client (RESP, connections, cluster client, breaker); knows no Backend.
# - rules and engine know the Backend interface, never an implementation of it, nor a frontend.
# - headers: rate-limit header fields, below both frontends (HTTP sends them, RLS carries them).
# - metrics: the Prometheus registry and sluice's metric set, for every frontend and Redis.
# - stack: builds the backend stacks (memory, Redis, the hybrid wrappers, the failure policy)
#   for `serve`, `sluice sim` and the library: the one module above the implementations.
# - library: the public library's implementation (sluice::Limiter on the memory store,
#   sluice::RateLimiter on a stack that stack builds).
# - http/transport: the Beast server, sessions and the reverse proxy's upstream client; knows
#   nothing of rate limits. http: the rate-limit endpoints on it (check, auth, proxy, admin).
# - http, rls: the frontends; never a backend implementation, nor each other.
# - xds: the rules over xDS (the ADS client of a management server, RateLimitConfig made into
#   rules for rules' loader); on rls's generated Envoy messages, never a frontend's code.
# - cli/bench: `sluice bench store|redis`, which measure the backend implementations themselves,
#   and the Redis INFO readings that sim uses too.
# - sim: `sluice sim`, several instances' stacks (stack) against one Redis, whose work it reads
#   (cli/bench's INFO readings) and whose admissions it judges against an exact model (library).
# - cli is the command line on top of everything but the backend implementations (stack builds
#   those for it, cli/bench measures them).
# - tests/support: the unit tests' kit (sluice_testing, namespace sluice::testing): TempDir, the
#   limit builders, real Redis servers and clusters, a slow relay, a clock that jumps. On the
#   public types only, so that every module's tests may use it. tests/support/redis_store: its
#   calls through redis::Client and redis::RedisStore (header-only), for backend/redis's tests.
# Tests: a real engine needs a backend, and tests use the in-memory one (backend/memory), as do
# the hybrid wrappers' tests (the store stands behind them) and the Redis scripts' (the same
# decisions on both); rules' tests check that ConfigManager reloads keep the engine's state
# (engine) and that the embedded default config (cli/default_config.h) loads; the Redis tests,
# and library's of the library on Redis, run real Redis servers (the kit's RedisServer and
# RedisCluster), and backend/redis's call its store through the kit's redis_store/.

# TEMPORARY EXCEPTIONS: edges the table forbids that are still there. Each goes when its edge
# does; nothing may be added here. One per line: FROM TO reason.
EXCEPTIONS='
'

# The kit's core: every module's tests may include it and link it (sluice_testing).
KIT=tests/support

# First path components of third-party headers (not checked), and whole names without one.
THIRD_PARTY='absl fmt spdlog gtest gmock benchmark google envoy ratelimit grpc CLI boost simdjson
  opentelemetry'
THIRD_PARTY_FILES='xxhash.h'

declare -A allowed test_allowed excepted
# (No process per row or per file below: the planted test runs this script a dozen times.)
while IFS='|' read -r module deps test_deps; do
  module=${module//[[:space:]]/}
  [[ -z $module ]] && continue
  read -ra words <<<"$deps"
  allowed[$module]=" $module ${words[*]} "
  read -ra words <<<"$test_deps"
  test_allowed[$module]=" $KIT ${words[*]} "
done <<<"$TABLE"
while read -r from to _; do
  [[ -z $from ]] && continue
  excepted["$from $to"]=0
done <<<"$EXCEPTIONS"
declare -A third_party
for t in $THIRD_PARTY $THIRD_PARTY_FILES; do third_party[$t]=1; done

# module_of PATH: the longest key of the table that is a folder of PATH (a/b/c.h: a/b, else a),
# else PATH's first folder; sets `found`.
module_of() {
  local dir=${1%/*}
  while [[ $dir == */* && -z ${allowed[$dir]+x} ]]; do
    dir=${dir%/*}
  done
  found=$dir
}

cd "$root"
[[ -d src ]] || {
  echo "check_layers: no src/ under $root" >&2
  exit 2
}
violations=0
# Every file's quoted includes as "LINE:INCLUDE" lines, read with one grep over all of them (not
# two processes a file: this script runs a dozen times in check_layers_planted).
mapfile -d '' -t sources < <(find src include/sluice "$KIT" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.h.in' \) -print0 2>/dev/null | sort -z)
declare -A includes_of
while IFS= read -r entry; do
  file=${entry%%:*} rest=${entry#*:}
  include=${rest#*\"} include=${include%%\"*}
  includes_of[$file]+="${rest%%:*}:$include"$'\n'
done < <(((${#sources[@]} == 0)) || grep -H -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "${sources[@]}")
for file in "${sources[@]}"; do
  if [[ $file == include/sluice/* ]]; then
    module=sluice
  elif [[ $file == tests/* ]]; then
    module_of "$file"
    module=$found
  else
    module_of "${file#src/}"
    module=$found
  fi
  base=${file##*/}
  is_test=0
  [[ $base == *_test.cc || $base == *_testing.h ]] && is_test=1
  if [[ -z ${allowed[$module]+x} ]]; then
    echo "$file: module '$module' is not in the table of scripts/check_layers.sh"
    violations=$((violations + 1))
    continue
  fi
  # Quoted includes only: `#include <...>` is the system's and third-party code's.
  while IFS=: read -r line include; do
    [[ -z $line ]] && continue
    target=${include%%/*}
    [[ $include != */* ]] && target=$include
    [[ -n ${third_party[$target]+x} ]] && continue
    module_of "$include"
    target=$found
    if [[ $include != */* ]]; then
      echo "$file:$line: \"$include\" names no module (write \"module/$include\")"
      violations=$((violations + 1))
      continue
    fi
    [[ ${allowed[$module]} == *" $target "* ]] && continue
    [[ $is_test == 1 && ${test_allowed[$module]} == *" $target "* ]] && continue
    if [[ -n ${excepted["$module $target"]+x} ]]; then
      excepted["$module $target"]=1
      continue
    fi
    if [[ -z ${allowed[$target]+x} ]]; then
      echo "$file:$line: $module -> $target (\"$include\"): '$target' is not a module of the table"
    else
      echo "$file:$line: $module -> $target (\"$include\") is not allowed"
    fi
    violations=$((violations + 1))
  done <<<"${includes_of[$file]-}"
done

# The build: in each src/<module>/CMakeLists.txt (and the kit's, tests/support/CMakeLists.txt),
# target_link_libraries may name only the sluice libraries (sluice_<module>, slashes as
# underscores) of the modules the row allows (sluice: the public types' sluice_types; the kit:
# sluice_testing), and a test binary's (sluice_test ... LINK ...) those of the test column too.
# Prints `FILE: TARGET -> MODULE (LIBRARY) is not allowed`.
declare -A library_module
for key in "${!allowed[@]}"; do
  [[ $key == tests/* ]] || library_module[sluice_${key//\//_}]=$key
done
library_module[sluice_testing]=$KIT
link_files=0
while IFS= read -r -d '' cmake_file; do
  link_files=$((link_files + 1))
  module=${cmake_file#src/}
  module=${module%/CMakeLists.txt}
  if [[ -z ${allowed[$module]+x} ]]; then
    echo "$cmake_file: module '$module' is not in the table of scripts/check_layers.sh"
    violations=$((violations + 1))
    continue
  fi
  # The file without comments, on one line.
  mapfile -t lines <"$cmake_file"
  text=""
  for line in "${lines[@]}"; do text+="${line%%#*} "; done
  # One entry per link: TARGET lib|test LIBRARIES... (a test's libraries are those after LINK).
  links=()
  rest=$text
  while [[ $rest =~ (target_link_libraries|sluice_test)\(([^\)]*)\) ]]; do
    rest=${rest#*"${BASH_REMATCH[0]}"}
    read -ra words <<<"${BASH_REMATCH[2]}"
    if [[ ${BASH_REMATCH[1]} == sluice_test ]]; then
      [[ ${BASH_REMATCH[2]} == *" LINK "* ]] || continue
      read -ra libraries <<<"${BASH_REMATCH[2]#* LINK }"
      links+=("${words[0]} test ${libraries[*]}")
    else
      links+=("${words[0]} lib ${words[*]:1}")
    fi
  done
  for link in "${links[@]}"; do
    read -r target kind libraries <<<"$link"
    for library in $libraries; do
      [[ $library == sluice_* ]] || continue
      to=${library_module[$library]:-}
      [[ $library == sluice_types ]] && to=sluice
      if [[ -z $to ]]; then
        echo "$cmake_file: $target -> $library: no module of the table builds it"
        violations=$((violations + 1))
        continue
      fi
      [[ ${allowed[$module]} == *" $to "* ]] && continue
      [[ $kind == test && ${test_allowed[$module]} == *" $to "* ]] && continue
      echo "$cmake_file: $target -> $to ($library) is not allowed"
      violations=$((violations + 1))
    done
  done
done < <(find src "$KIT" -name CMakeLists.txt -print0 2>/dev/null | sort -z)

for edge in "${!excepted[@]}"; do
  if [[ ${excepted[$edge]} == 0 ]]; then
    echo "check_layers: note: the exception '${edge/ / -> }' is no longer needed: delete it" >&2
  fi
done
if ((violations > 0)); then
  echo "check_layers: $violations forbidden include(s) or link(s) in ${#sources[@]} files and" \
    "$link_files CMakeLists.txt (table: scripts/check_layers.sh)"
  exit 1
fi
echo "check_layers: ${#sources[@]} files and $link_files CMakeLists.txt, every include and link allowed"
