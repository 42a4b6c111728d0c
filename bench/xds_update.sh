#!/usr/bin/env bash
# Rules over xDS at scale: how long an update of DESCRIPTORS (10,000) descriptors takes to apply,
# and whether decisions pause while updates stream in.
#
#   bench/xds_update.sh            (build/release/sluice, build/release/openloop, build/release/xds_server)
#
# A test management server (tests/xds_server.cc) serves one RateLimitConfig shaped as Envoy
# Gateway makes them (a descriptor per route, a limit under each: DESCRIPTORS of them); sluice
# takes it over xDS (config_source.xds) beside compare.sh's forward-auth domain from a file
# (bench/compare/bench.yaml), with --threads 1. Each round, openloop offers RATE (5000) requests
# a second to /v1/auth/allow (100,000 keys) for DURATION (5 s) twice: quiet, then while the server
# publishes a new version every INTERVAL_MS (250). Every version is a whole new rule set that the
# loader validates and swaps in (the file domain with it). Prints, per round, each run's p50, p99,
# p99.9 and max latency (µs, from the intended send time) and the apply times sluice logged
# ("xds: version ... applied ... in N ms": decode, load and swap) during the updates; then the
# medians over ROUNDS (3) with their spread. Server on CPU SERVER_CPUS (0), openloop and the
# management server on CLIENT_CPUS (1), the management server and the snapshot writer in the idle
# scheduling class (so that neither delays openloop's sends).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
sluice=${SLUICE:-$root/build/release/sluice}
openloop=${OPENLOOP:-$root/build/release/openloop}
xds_server=${XDS_SERVER:-$root/build/release/xds_server}
descriptors=${DESCRIPTORS:-10000} rate=${RATE:-5000} duration=${DURATION:-5}
rounds=${ROUNDS:-3} interval_ms=${INTERVAL_MS:-250}
server_cpus=${SERVER_CPUS:-0} client_cpus=${CLIENT_CPUS:-1}
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

# snapshot VERSION: the rule set at VERSION (its first limit is VERSION's number, so each differs).
snapshot() {
  python3 - "$1" "$descriptors" >"$tmp/snapshot.json.new" <<'EOF'
import json, sys
version, n = sys.argv[1], int(sys.argv[2])
first = int(version.lstrip("v"))
routes = [{"key": f"route-{i}", "value": f"route-{i}",
           "descriptors": [{"key": "remote_address",
                            "rate_limit": {"unit": "MINUTE", "requests_per_unit": first if i == 0 else 100 + i}}]}
          for i in range(n)]
print(json.dumps({"versionInfo": version, "resources": [{
    "@type": "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig",
    "name": "gateway", "domain": "gateway", "descriptors": routes}]}))
EOF
  mv "$tmp/snapshot.json.new" "$tmp/snapshot.json"
}

echo "xds_update: $(nproc) CPUs, $(uptime | sed 's/.*load average/load average/'), sluice $("$sluice" --version 2>/dev/null | head -1)" >&2
version=1
snapshot "v$version"
free_port; xport=$FREE_PORT
taskset -c "$client_cpus" chrt --idle 0 "$xds_server" --port "$xport" --snapshot "$tmp/snapshot.json" >"$tmp/xds.out" 2>&1 &
XPID=$!
pids+=("$XPID")
wait_listening "$xport" "$XPID" 10 || { echo "xds_server did not start"; exit 1; }
mkdir -p "$tmp/etc/rules"
cp "$root/bench/compare/bench.yaml" "$tmp/etc/rules/"
cat >"$tmp/etc/sluice.yaml" <<EOF
rules: rules
config_source:
  xds: {server_url: "127.0.0.1:$xport", node_id: bench}
EOF
start_prefix=(taskset -c "$server_cpus")
start_wait=60
start sluice --config "$tmp/etc/sluice.yaml" --threads 1 || { echo "sluice did not start"; cat "$tmp/sluice.err"; exit 1; }

first=$(sed -n "s/.*xds: version 'v1' applied .* in \([0-9.]*\) ms/\1/p" "$tmp/sluice.err")
echo "first version, applied with no load: ${first:-?} ms"

# run NAME: one openloop run; prints "p50 p99 p999 max" (µs).
run() {
  taskset -c "$client_cpus" "$openloop" --url "http://$DATA/v1/auth/allow" --rate "$rate" \
    --duration "$duration" --connections 32 --keys 100000 >"$tmp/$1.json"
  local j; j=$(cat "$tmp/$1.json")
  echo "$(field p50_us "$j") $(field p99_us "$j") $(field p999_us "$j") $(field max_us "$j")"
}
# publishing SECONDS: a new version every INTERVAL_MS for SECONDS (in the background). It and the
# management server run on the client CPUs at the idle priority (SCHED_IDLE): writing, reading
# and sending a 10,000-descriptor snapshot takes them about a tenth of a second each time, which
# would otherwise delay openloop's sends (counted as latency) or the server (its own pause).
publishing() {
  taskset -cp "$client_cpus" "$BASHPID" >/dev/null
  chrt --idle -p 0 "$BASHPID"
  local until=$(($(date +%s%3N) + $1 * 1000))
  while (($(date +%s%3N) < until)); do
    version=$((version + 1))
    snapshot "v$version"
    kill -HUP "$XPID"
    sleep "$(awk -v ms="$interval_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
  done
}

quiet_p99=() busy_p99=() applies=()
for round in $(seq "$rounds"); do
  q=$(run "quiet$round")
  lines_before=$(wc -l <"$tmp/sluice.err")
  publishing "$duration" &
  pub=$!
  b=$(run "busy$round")
  wait "$pub"
  sleep 1
  mapfile -t took < <(tail -n +$((lines_before + 1)) "$tmp/sluice.err" | sed -n 's/.*xds: version .* applied .* in \([0-9.]*\) ms/\1/p')
  sorted=$(printf '%s\n' "${took[@]}" | sort -n)
  echo "round $round: quiet p50/p99/p99.9/max µs $q | during updates $b | ${#took[@]} updates applied, ms: median $(sed -n "$(((${#took[@]} + 1) / 2))p" <<<"$sorted") max $(tail -1 <<<"$sorted")"
  quiet_p99+=("$(cut -d' ' -f2 <<<"$q")")
  busy_p99+=("$(cut -d' ' -f2 <<<"$b")")
  applies+=("${took[@]}")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] " [" v[1] "-" v[NR] "]" }'; }
echo "p99 quiet µs: $(median "${quiet_p99[@]}")"
echo "p99 during updates µs: $(median "${busy_p99[@]}")"
echo "apply ms ($descriptors descriptors, ${#applies[@]} updates): $(median "${applies[@]}")"
