#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing sluice needs, and the Node.js
# packages of the gRPC test client (tests/grpc). Idempotent: only what is missing is installed
# (Debian packages with --no-install-recommends).
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config
  # libraries (docs/design.md, "Dependencies", says why each)
  libabsl-dev libxxhash-dev libfmt-dev libspdlog-dev libcli11-dev libyaml-dev
  libboost1.81-dev libsimdjson-dev libprotobuf-dev protobuf-compiler libhiredis-dev
  libgrpc++-dev protobuf-compiler-grpc libssl-dev
  # tests and benchmarks: real HTTP clients, promtool for the metrics exposition, nginx and
  # Caddy for forward-auth (auth_request, forward_auth), wrk for bench/compare.sh, Redis for the
  # Redis backend (redis-sentinel for its Sentinel tests), openssl for the certificates of the
  # Redis TLS tests
  libgtest-dev libgmock-dev libbenchmark-dev curl prometheus nginx-light caddy wrk redis-server
  redis-sentinel redis-tools valgrind
  openssl
  # the soak's and the simulator's plots (bench/soak.sh, scripts/sim_plots.sh); a server that
  # stalls on purpose for openloop_e2e; the docs' YAML examples checked (tests/doc_examples.py)
  gnuplot-nox python3 python3-yaml
  # fuzzing (scripts/fuzz.sh, run by `make test`): clang and its libFuzzer/sanitizer runtimes
  clang-14 libclang-rt-14-dev
  # make lint (scripts/lint.sh): the format check and clang-tidy
  clang-format-14 clang-tidy-14 shellcheck
  # the .deb (make package, tests/package_e2e.sh): CPack's DEB generator runs `file`
  file
  # the operator console in a real browser (tests/console_e2e.sh): Debian's headless Chromium,
  # driven through ChromeDriver by Selenium's Python binding
  chromium chromium-driver python3-selenium
  # the time zones of calendar windows (src/types/calendar.h): the system's tz database
  # (priority required, so on every Debian; named because the code reads it)
  tzdata
  # the OCI image (make image, tests/image_e2e.sh): podman builds it FROM scratch, offline, and
  # runs it; runc is the runtime it runs with (named so that apt takes it for podman's
  # "crun | runc": crun cannot start containers on these machines). As root with the host's
  # network nothing else is needed (rootless podman would want uidmap and slirp4netns).
  podman runc
)
# The gRPC end-to-end test's client runs on Node.js; a node already on the PATH (from any
# source) will do, otherwise Debian's.
if ! command -v node >/dev/null; then
  packages+=(nodejs npm)
fi
# `kubectl kustomize` renders deploy/kubernetes for its test (tests/kubernetes_manifests_test.sh).
# A kubectl already on the PATH (from any source) will do; Debian's kubernetes-client conflicts
# with some of them (google-cloud-sdk's), so it is installed only where there is none.
if ! command -v kubectl >/dev/null; then
  packages+=(kubernetes-client)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -ne 0 ]; then
  echo "bootstrap: missing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: not root; install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Some of these packages come with a system service that their post-install script starts and
  # enables: nginx (port 80, and the install fails if that port is taken), caddy (port 80 and
  # its admin endpoint on 2019), redis-server (6379), redis-sentinel (26379), prometheus (9090).
  # The tests start their own on free ports, so none may start here: a policy-rc.d that refuses
  # every start while apt runs (removed after, unless one was there), then the units apt enabled
  # are disabled again.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# bootstrap.sh: no service starts during its install\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if [ "$own_policy" = 1 ]; then
    rm -f "$policy"
    trap - EXIT
  fi
  services=()
  for p in nginx-light:nginx caddy:caddy redis-server:redis-server redis-sentinel:redis-sentinel \
    prometheus:prometheus; do
    case " ${missing[*]} " in *" ${p%%:*} "*) services+=("${p#*:}") ;; esac
  done
  # (systemctl disables a unit without a running systemd too: it removes the links apt made,
  # which a later boot with systemd would otherwise follow.)
  if [ ${#services[@]} -ne 0 ] && command -v systemctl >/dev/null; then
    systemctl disable --quiet "${services[@]}" 2>/dev/null || true
  fi
  echo "bootstrap: installed ${missing[*]}"
  [ ${#services[@]} -eq 0 ] ||
    echo "bootstrap: the services of ${services[*]} were neither started nor left enabled"
fi

# The Node.js test client's packages, pinned by tests/grpc/package-lock.json. Not fatal: the
# build does not need them, and tests/grpc_e2e.sh tries again (and fails saying why).
grpc_tests="$(cd "$(dirname "$0")/.." && pwd)/tests/grpc"
if [ ! -d "$grpc_tests/node_modules/@grpc/grpc-js" ] || [ ! -d "$grpc_tests/node_modules/@grpc/proto-loader" ]; then
  echo "bootstrap: npm ci in tests/grpc"
  if ! (cd "$grpc_tests" && npm ci --no-audit --no-fund); then
    echo "bootstrap: npm ci failed; the grpc_e2e test will not pass until it succeeds" >&2
  fi
fi
