#!/usr/bin/env bash
# Checks sluice's layering: every `#include "dir/..."` in src/ and include/sluice/ must follow
# the table below, which is the one place the allowed include graph is written down.
#
#   bash scripts/check_layers.sh [ROOT]      (default: this script's repository)
#
# A file's module is its folder under src/ (src/http/transport/server.cc: http); include/sluice/ is the
# module `sluice`, the public API. Includes of third-party code (absl/, fmt/, gtest/, ...) are
# not checked; any other quoted include must name a module of the table. A module may include
# itself. Tests (*_test.cc, and *_testing.h helpers) may also include the modules in the table's
# third column. Prints every forbidden edge as `FILE:LINE: FROM -> TO ("INCLUDE")` and exits 1
# if there is one; exits 0 with a one-line summary otherwise.
set -euo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}

# module  | may include                                             | its tests may also include
TABLE='
sluice    | sluice                                                  |
util      |                                                         |
algo      | sluice                                                  |
backend   | algo sluice                                             | store
store     | algo util backend sluice                                |
rules     | util backend sluice                                     | engine store cli
engine    | rules algo backend util sluice                          | store
render    | engine rules util sluice                                | store
metrics   | util                                                    |
redis     | backend algo util metrics sluice                        | store tests
core      | algo store redis backend util sluice                    | tests
stack     | store redis backend rules metrics util sluice           |
tools     | store redis backend algo util sluice                    |
http      | engine rules render metrics backend util sluice         | store
rls       | engine rules render metrics backend util sluice         | store
sim       | stack tools store redis backend rules algo util sluice  |
cli       | http rls stack tools sim engine rules render metrics backend util sluice |
'
# What the rows mean:
# - algo: the algorithms are pure functions of the public types. util: nothing of ours.
# - backend: the Backend interface and the wrappers that decide through it (Failover, the
#   over-limit cache, leases), and Eventual, which also decides on copies of states with the
#   algorithms (algo), as the store does; store: the in-memory backend.
# - rules and engine know the Backend interface, never an implementation of it, nor a frontend.
# - render: rate-limit header fields, below both frontends (HTTP sends them, RLS carries them).
# - metrics: the Prometheus registry and sluice's metric set, for every frontend and Redis.
# - redis: a backend; never the engine nor a frontend. Its merges (consistency: eventual) return
#   states in algo's form.
# - core: the public library's implementation, which chooses among the backends.
# - stack: builds the backend stack (memory, Redis, the failure-policy wrapper) for `serve`.
# - tools: `sluice bench store|redis`, which measure the backend implementations themselves.
# - sim: `sluice sim`, several instances' stacks (stack) against one Redis, whose work it reads
#   (tools' INFO readings) and whose admissions it judges against an exact model (sluice).
# - http, rls: the frontends; never a backend implementation (store, redis), nor each other.
#   cli is the command line on top of everything but the backend implementations (stack builds
#   those for it, tools measures them).
# Tests: a real engine needs a backend, and tests use the in-memory one (store), as do the
# backend wrappers' tests (the store stands behind them); rules' tests
# check that ConfigManager reloads keep the engine's state (engine) and that the embedded default
# config (cli/default_config.h) loads; redis' tests, and core's of the library on Redis, run
# real Redis servers (tests/support/).

# TEMPORARY EXCEPTIONS: edges the table forbids that are still there. Each goes when its edge
# does; nothing may be added here. One per line: FROM TO reason.
EXCEPTIONS='
'

# First path components of third-party headers (not checked), and whole names without one.
THIRD_PARTY='absl fmt spdlog gtest gmock benchmark google envoy grpc CLI boost simdjson yaml-cpp'
THIRD_PARTY_FILES='xxhash.h'

declare -A allowed test_allowed excepted
while IFS='|' read -r module deps test_deps; do
  module=$(echo "$module" | xargs)
  [[ -z $module ]] && continue
  allowed[$module]=" $module $(echo "$deps" | xargs) "
  test_allowed[$module]=" $(echo "$test_deps" | xargs) "
done <<<"$TABLE"
while read -r from to _; do
  [[ -z $from ]] && continue
  excepted["$from $to"]=0
done <<<"$EXCEPTIONS"
declare -A third_party
for t in $THIRD_PARTY $THIRD_PARTY_FILES; do third_party[$t]=1; done

cd "$root"
[[ -d src ]] || {
  echo "check_layers: no src/ under $root" >&2
  exit 2
}
files=0
violations=0
while IFS= read -r -d '' file; do
  files=$((files + 1))
  if [[ $file == include/sluice/* ]]; then
    module=sluice
  else
    module=${file#src/}
    module=${module%%/*}
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
  done < <(grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$file" |
    sed -E 's/^([0-9]+):[^"]*"([^"]+)".*/\1:\2/')
done < <(find src include/sluice -type f \( -name '*.h' -o -name '*.cc' -o -name '*.h.in' \) -print0 2>/dev/null | sort -z)

for edge in "${!excepted[@]}"; do
  if [[ ${excepted[$edge]} == 0 ]]; then
    echo "check_layers: note: the exception '${edge/ / -> }' is no longer needed: delete it" >&2
  fi
done
if ((violations > 0)); then
  echo "check_layers: $violations forbidden include(s) in $files files (table: scripts/check_layers.sh)"
  exit 1
fi
echo "check_layers: $files files, every include allowed"
