#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing sluice needs.
# Idempotent: only packages that are missing are installed, with --no-install-recommends.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config
  # libraries (see ../shared/DESIGN.md for why each)
  libabsl-dev libxxhash-dev libfmt-dev libspdlog-dev libcli11-dev libyaml-cpp-dev
  libboost1.81-dev libsimdjson-dev libprotobuf-dev protobuf-compiler libhiredis-dev
  # tests and benchmarks: real HTTP clients, promtool for the metrics exposition, nginx for
  # forward-auth (auth_request), wrk for bench/compare.sh, Redis for the Redis backend
  libgtest-dev libgmock-dev libbenchmark-dev curl prometheus nginx-light wrk redis-server redis-tools
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "bootstrap: missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "bootstrap: not root; install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
