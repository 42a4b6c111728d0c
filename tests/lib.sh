# shellcheck shell=bash
# shellcheck disable=SC2034  # (the variables set here are read by the scripts that source it)
# The one shell library of the end-to-end tests, the checks of the tree (tests/*_test.sh) and the
# benchmarks (bench/lib.sh sources it and adds CPU-time readings): a temp dir and cleanup, checks
# and their tally (pass, fail, check), starting and stopping `sluice serve`, the test upstream and
# redis-server, free loopback ports and waiting for a server on one, the proxy configs the docs
# show, and reading /metrics and JSON lines. Source it after setting `sluice` (the binary) if the
# script starts one. It works in scripts with `set -u` and in those with `set -euo pipefail`.
#
# Every process a script starts goes into `pids` and is killed by pid on exit, after the
# functions in `cleanup_hooks` ran (a script adds its own there rather than trapping EXIT). An
# interrupt (INT, TERM) exits through the same cleanup.

tmp=$(mktemp -d /tmp/sluice-e2e.XXXXXX)
pids=()
cleanup_hooks=()
cleanup() {
  local h p
  for h in "${cleanup_hooks[@]}"; do "$h" || true; done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done  # (quietly: no "Killed" lines)
  rm -rf "$tmp" || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

passed=0 failed=0 failed_names=()
pass() {  # pass NAME: one check passed
  passed=$((passed + 1)); echo "ok   $1"
}
# fail NAME WHY [DETAIL]: one check failed, and why; then DETAIL (a command's output, say), each
# line indented with "  | ", its last 40 lines.
fail() {
  local lines
  failed=$((failed + 1)); failed_names+=("$1"); echo "FAIL $1: $2"
  [[ -n ${3:-} ]] || return 0
  lines=$(printf '%s\n' "$3" | wc -l)
  ((lines <= 40)) || echo "  | ($((lines - 40)) lines left out)"
  printf '%s\n' "$3" | tail -40 | sed 's/^/  | /'
}
need_tools() {  # need_tools TOOL...: fail the whole script (one failed check) if one is missing
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null && continue
    echo "$tool is missing (scripts/bootstrap.sh installs it)"
    echo "0 passed, 1 failed"
    exit 1
  done
}
# fail_setup WHY: the script cannot run its checks (a server that did not start, no
# certificates): says why, counts one failure and exits.
fail_setup() { echo "$1"; echo "0 passed, 1 failed"; exit 1; }

# need_grpc_client FIXTURES: the Node.js gRPC test client's packages in FIXTURES (tests/grpc),
# installed from its lock file if missing (scripts/bootstrap.sh normally has); fail_setup if
# they cannot be.
need_grpc_client() {
  [[ -d $1/node_modules/@grpc/grpc-js && -d $1/node_modules/@grpc/proto-loader ]] && return 0
  echo "installing the Node.js test client's packages (npm ci)"
  (cd "$1" && timeout 300 npm ci --no-audit --no-fund >/dev/null) || fail_setup "npm ci failed in $1"
}

check() {  # check NAME EXPECTED ACTUAL
  if [[ $2 == "$3" ]]; then
    pass "$1"
  else
    fail "$1" "expected [$2], got [$3]"
  fi
}
check_contains() {  # check_contains NAME NEEDLE HAYSTACK
  if [[ $3 == *"$2"* ]]; then
    pass "$1"
  else
    fail "$1" "[$2] not in [$3]"; return 1
  fi
}
# finish: the failed checks' names again (a long output is cut in the middle where ctest's or
# CI's log is short), then the tally; the script's exit status.
finish() {
  local name
  for name in "${failed_names[@]}"; do echo "failed: $name"; done
  echo "$passed passed, $failed failed"
  ((failed == 0))
}

# ------------------------------------------------------------------ processes, by pid
# out_base NAME: where the process started as NAME writes: $tmp/NAME, or NAME itself when it is
# a path (has a /): a benchmark keeps its servers' output beside its results that way.
out_base() { if [[ $1 == */* ]]; then echo "$1"; else echo "$tmp/$1"; fi; }

# start NAME [ARGS...]: starts `sluice serve ARGS` and waits (start_wait seconds, 10) until it is
# up (it prints its config line last) or has exited; returns 1 unless it is up. Sets PID, DATA,
# ADMIN and GRPC (empty when not serving); output in NAME.out and NAME.err (out_base). Ports:
# the kernel picks them (port 0; sluice prints the ones it got), so no two servers can race for
# one. --listen and --admin are 127.0.0.1:0 unless ARGS name them; gRPC is off unless ARGS name
# --grpc or KEEP_GRPC=1 (its default is a fixed port). start_prefix (an array, empty) is run in
# front of the binary: taskset, valgrind.
start_prefix=()
start_wait=10
start() {
  local name=$1; shift
  local base ports=()
  base=$(out_base "$name")
  [[ " $* " == *" --listen "* ]] || ports+=(--listen 127.0.0.1:0)
  [[ " $* " == *" --admin "* ]] || ports+=(--admin 127.0.0.1:0)
  [[ " $* " == *" --grpc "* || ${KEEP_GRPC:-0} == 1 ]] || ports+=(--grpc 0)
  # Emptied first: the background redirection may not have happened yet when wait_started
  # first looks, and an earlier server's output must not pass for this one's.
  : >"$base.out"
  : >"$base.err"
  "${start_prefix[@]}" "${sluice:?set sluice before sourcing tests/lib.sh}" serve "${ports[@]}" "$@" \
    >"$base.out" 2>"$base.err" &
  PID=$!
  pids+=("$PID")
  wait_started "$name"
  DATA=$(sed -n 's/^sluice: data plane listening on //p' "$base.out")
  ADMIN=$(sed -n 's/^sluice: admin listening on //p' "$base.out")
  GRPC=$(sed -n 's/^sluice: grpc listening on //p' "$base.out")
  grep -q '^sluice: config' "$base.out"
}

# wait_started NAME: waits (at most start_wait seconds) until the `sluice serve` started as NAME
# (pid PID, output in NAME.out, out_base) has printed its config line, the last of its start-up,
# or has exited.
wait_started() {
  local out _
  out=$(out_base "$1").out
  for _ in $(seq $((${start_wait:-10} * 20))); do
    grep -q '^sluice: config' "$out" 2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
  done
}

# stop [PID [SECONDS]]: SIGTERM to PID (default PID), killed after SECONDS (5) if still there;
# sets STATUS to its exit status. PID leaves `pids` (a later pid of that number is not ours).
stop() {
  local pid=${1:-$PID} limit=${2:-5} p _ kept=()
  kill -CONT "$pid" 2>/dev/null || true  # (a stopped process would not act on SIGTERM)
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq $((limit * 20))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  kill -9 "$pid" 2>/dev/null || true
  STATUS=0
  wait "$pid" 2>/dev/null || STATUS=$?
  for p in "${pids[@]}"; do [[ $p == "$pid" ]] || kept+=("$p"); done
  pids=("${kept[@]}")
}

# start_upstream [NAME]: the test upstream (tests/upstream_server.cc, `upstream` the binary) on
# a port the kernel picks; waits (5 s) for it. Sets UP (HOST:PORT) and UPID; returns 1 and says
# so if it did not come up. Output in NAME.out and .err (default upstream; out_base).
start_upstream() {
  local base _
  base=$(out_base "${1:-upstream}")
  : >"$base.out"
  "${upstream:?set upstream to the upstream_server binary}" --listen 127.0.0.1:0 \
    >"$base.out" 2>"$base.err" &
  UPID=$!
  pids+=("$UPID")
  for _ in $(seq 100); do
    grep -q '^upstream: listening' "$base.out" 2>/dev/null && break
    kill -0 "$UPID" 2>/dev/null || break
    sleep 0.05
  done
  UP=$(sed -n 's/^upstream: listening on //p' "$base.out")
  [[ -n $UP ]] || { echo "the test upstream did not start: $(tail -3 "$base.err")"; return 1; }
}

# ------------------------------------------------------------------ free loopback ports
# sluice and the test upstream bind port 0 (above). For a server that must be told its port
# (redis-server, nginx, an example binary), reserve_port and free_port take one for this script:
# a lock on the file $port_locks/PORT, which scripts of this library on this machine share, held
# (flock) for as long as this script or any process it started lives, so no two scripts get the
# same port however they interleave; and nothing may listen on the port now. A process outside
# these scripts may still bind it in between: a server that then fails to start is retried on
# another port, and start_redis makes sure the Redis that answers is the one it started.
port_locks=/tmp/sluice-ports

# reserve_port PORT: takes PORT for this script (above), through the file descriptor port_fd
# (closing it gives the port up); returns 1 if another script holds it or something listens on it.
reserve_port() {
  [[ -d $port_locks ]] || { mkdir -p "$port_locks" && chmod 1777 "$port_locks"; } 2>/dev/null || true
  { exec {port_fd}>>"$port_locks/$1"; } 2>/dev/null || return 1
  if flock -n "$port_fd" && ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
  exec {port_fd}>&-
  return 1
}

# free_port: sets FREE_PORT to a loopback port reserved for this script (reserve_port), drawn at
# random below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768 up by default):
# a port some client connection holds as its local end cannot be bound, and does not show when
# probed. (Not in $(...): the reservation would end with the subshell.)
free_port() {
  local p low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  ((low > 21000)) || low=32768
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % (low - 20000)))
    reserve_port "$p" && { FREE_PORT=$p; return 0; }
  done
  echo "no free port found" >&2
  return 1
}

# ------------------------------------------------------------------ Redis
# redis_script_calls PORT: the script calls (EVALSHA and EVAL) the Redis on PORT has run.
redis_script_calls() {
  redis-cli -p "$1" info commandstats |
    awk -F'[:=,]' '/^cmdstat_eval(sha)?:/ {n += $3} END {print n + 0}'
}

# make_tls_certs DIR: certificates for TLS tests, made by openssl in DIR (EC P-256 keys,
# unencrypted PEM): ca.pem (and ca.key), and signed by it server.pem for localhost and 127.0.0.1,
# client.pem (mutual TLS), expired.pem (for localhost and 127.0.0.1, expired from the start) and
# elsewhere.pem (for elsewhere.test only), each with its .key; other-ca.pem, a CA that signed none
# of them. Returns 1 and says why if openssl failed.
make_tls_certs() {
  local dir=$1 ca name key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
  mkdir -p "$dir"
  (
    set -e
    cd "$dir"
    for ca in ca other-ca; do
      openssl req -x509 "${key[@]}" -keyout "$ca.key" -out "$ca.pem" -days 30 \
        -subj "/CN=sluice-test-$ca" -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign,cRLSign
    done
    leaf() {  # leaf NAME CN SAN DAYS
      if [[ -n $3 ]]; then echo "subjectAltName=$3"; else echo; fi >"$1.ext"
      openssl req "${key[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$2"
      openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days "$4" \
        -extfile "$1.ext" -out "$1.pem"
    }
    leaf server localhost DNS:localhost,IP:127.0.0.1 30
    leaf client sluice-test-client "" 30
    leaf expired localhost DNS:localhost,IP:127.0.0.1 -1  # its validity ended before it began
    leaf elsewhere elsewhere.test DNS:elsewhere.test 30
    ! openssl x509 -in expired.pem -noout -checkend 0 >/dev/null
  ) >"$dir/make.log" 2>&1 || { echo "openssl could not make the certificates:"; tail -5 "$dir/make.log"; return 1; }
}

# redis_cli PORT ARGS...: redis-cli to the Redis on 127.0.0.1:PORT; over TLS with redis_tls's
# client certificate when redis_tls is set (start_redis).
redis_cli() {
  local port=$1; shift
  if [[ -n ${redis_tls:-} ]]; then
    redis-cli --tls --cacert "$redis_tls/ca.pem" --cert "$redis_tls/client.pem" \
      --key "$redis_tls/client.key" -p "$port" "$@"
  else
    redis-cli -p "$port" "$@"
  fi
}

# start_redis PORT [ARGS...]: a throwaway redis-server on 127.0.0.1:PORT (no persistence; ARGS
# may override that), its files and redis.log in redis_dir/redis-PORT (redis_dir: $tmp unless
# set; a restart on the same port keeps them); waits (10 s) until it is ready: it logged so
# since this start (so it bound the port: not another server answering there) and answers.
# Sets RPID; returns 1 and says so if it did not start. With redis_tls set (a make_tls_certs
# directory), it serves TLS alone on PORT, with mutual TLS (its clients need client.pem), and
# the certificate redis_tls_cert names (server unless set: expired, elsewhere).
start_redis() {
  local port=$1; shift
  local dir=${redis_dir:-$tmp}/redis-$port _ size=0 listen=(--port "$port")
  mkdir -p "$dir"
  [[ -f $dir/redis.log ]] && size=$(stat -c %s "$dir/redis.log")
  if [[ -n ${redis_tls:-} ]]; then
    listen=(--port 0 --tls-port "$port" --tls-cert-file "$redis_tls/${redis_tls_cert:-server}.pem"
      --tls-key-file "$redis_tls/${redis_tls_cert:-server}.key" --tls-ca-cert-file "$redis_tls/ca.pem"
      --tls-auth-clients yes)
  fi
  redis-server "${listen[@]}" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --enable-debug-command local "$@" >>"$dir/redis.log" 2>&1 &
  RPID=$!
  pids+=("$RPID")
  for _ in $(seq 200); do
    # (grep without -q: one that stops reading early could fail the pipe under pipefail)
    # (--insecure: a server with the expired or another name's certificate answers too.)
    if tail -c +$((size + 1)) "$dir/redis.log" | grep 'Ready to accept connections' >/dev/null &&
      redis_cli "$port" ${redis_tls:+--insecure} ping 2>&1 | grep -E 'PONG|NOAUTH' >/dev/null; then
      return 0
    fi
    kill -0 "$RPID" 2>/dev/null || break
    sleep 0.05
  done
  echo "redis-server on $port did not start:"; tail -3 "$dir/redis.log"
  return 1
}

# start_redis_on [ARGS...]: start_redis on a free port (free_port), up to 5 ports; sets RPORT
# and RPID.
start_redis_on() {
  local _
  for _ in $(seq 5); do
    free_port && RPORT=$FREE_PORT && start_redis "$RPORT" "$@" && return 0
  done
  return 1
}

# free_node_port: free_port (sets FREE_PORT) for a Redis Cluster node: its port and its cluster
# bus port (+10000) both reserved, and both below the ephemeral range (32768+).
free_node_port() {
  local p fd
  for _ in $(seq 100); do
    p=$((10000 + RANDOM % 12000))
    reserve_port "$p" || continue
    fd=$port_fd
    reserve_port $((p + 10000)) && { FREE_PORT=$p; return 0; }
    exec {fd}>&-
  done
  echo "no free port found" >&2
  return 1
}

# start_redis_cluster: a 3-master Redis Cluster (no replicas) of throwaway redis-servers on
# loopback (free_node_port); sets cluster_ports (the masters' ports) and returns 0 once it says
# cluster_state:ok. A node that fails to start gets another port.
start_redis_cluster() {
  local p _
  cluster_ports=()
  for _ in 1 2 3; do
    for _ in $(seq 5); do
      free_node_port || continue
      p=$FREE_PORT
      start_redis "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
        --cluster-node-timeout 2000 && { cluster_ports+=("$p"); break; }
    done
  done
  ((${#cluster_ports[@]} == 3)) || { echo "cluster: only ${#cluster_ports[@]} nodes started"; return 1; }
  yes yes | redis-cli --cluster create "${cluster_ports[@]/#/127.0.0.1:}" \
    --cluster-replicas 0 --cluster-yes >"$tmp/cluster.log" 2>&1 || true
  for _ in $(seq 100); do
    redis-cli -p "${cluster_ports[0]}" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && return 0
    sleep 0.1
  done
  cat "$tmp/cluster.log"; for p in "${cluster_ports[@]}"; do tail -5 "${redis_dir:-$tmp}/redis-$p/redis.log"; done
  return 1
}

# cluster_settings DIR [LINE...]: DIR/sluice.yaml for instances deciding on the cluster
# start_redis_cluster started (reached through its first node, a 2 s timeout), each LINE (a
# top-level setting) first.
cluster_settings() {
  local dir=$1; shift
  mkdir -p "$dir"
  {
    (($# == 0)) || printf '%s\n' "$@"
    printf 'backend: redis\nredis:\n  cluster: true\n  nodes: [redis://127.0.0.1:%s]\n  timeout: 2s\n' \
      "${cluster_ports[0]}"
  } >"$dir/sluice.yaml"
}

# wait_listening PORT PID [SECONDS]: waits (at most SECONDS, 5) until 127.0.0.1:PORT accepts a
# connection while the process PID lives: a server that must be told its port (nginx, Caddy)
# is up. Returns 1 if PID exited or the time ran out.
wait_listening() {
  local _
  for _ in $(seq $((${3:-5} * 20))); do
    kill -0 "$2" 2>/dev/null || return 1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# ------------------------------------------------------------------ configs from the docs
# A page that shows a whole file of the repository (a proxy's config) shows it verbatim: the
# line `<!-- file: PATH -->` (PATH from the repository root), then the file in a fenced block.
# The test that runs the file checks the two are the same (doc_block), then adapts a copy to
# its ports (replace_in).

# doc_block PAGE PATH: the lines of the fenced block that follows `<!-- file: PATH -->` in PAGE.
doc_block() {
  awk -v marker="<!-- file: $2 -->" '
    $0 == marker { state = 1; next }
    state == 1 && /^```/ { state = 2; next }
    state == 2 && /^```[ \t]*$/ { exit }
    state == 2 { print }' "$1"
}

# envoy_runtime: upstream's runtime tree in $tmp/runtime (RUNTIME_ROOT=$runtime/current, a
# symlink to v1; RUNTIME_SUBDIRECTORY=ratelimit) holding one domain, api: user 2 a day; and three
# free ports for its listeners. Sets runtime, port, grpc_port, debug_port.
envoy_runtime() {
  runtime=$tmp/runtime
  mkdir -p "$runtime/v1/ratelimit/config"
  cat >"$runtime/v1/ratelimit/config/api.yaml" <<'EOF'
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 2
EOF
  ln -s v1 "$runtime/current"
  free_port; port=$FREE_PORT
  free_port; grpc_port=$FREE_PORT
  free_port; debug_port=$FREE_PORT
}

# start_env NAME VAR=VALUE...: `sluice serve --envoy-env` with only these variables (and PATH);
# waits (bounded) until it serves or exits. Sets PID.
start_env() {
  local name=$1; shift
  env -i PATH="$PATH" "$@" "$sluice" serve --envoy-env >"$tmp/$name.out" 2>"$tmp/$name.err" &
  PID=$!
  pids+=("$PID")
  wait_started "$name"
}

# start_four PREFIX ARGS...: four `sluice serve ARGS --threads 1` (PREFIX0..3); sets datas,
# admins and spids.
start_four() {
  local prefix=$1 i; shift
  datas=() admins=() spids=()
  for i in 0 1 2 3; do
    start "$prefix$i" "$@" --threads 1
    datas+=("$DATA") admins+=("$ADMIN") spids+=("$PID")
  done
}

# check_body DOMAIN KEY VALUE [MORE]: the body of a POST /v1/check of one descriptor of one entry
# KEY=VALUE; MORE (e.g. ',"cost":0') is added inside the object.
check_body() {
  echo "{\"domain\":\"$1\",\"descriptors\":[{\"entries\":[{\"key\":\"$2\",\"value\":\"$3\"}]}]${4:-}}"
}

# check_one DATA DOMAIN KEY VALUE: one POST /v1/check to DATA (HOST:PORT), one descriptor of one
# entry KEY=VALUE; prints the status, keeps headers and body (header, $tmp/body).
check_one() {
  curl -s -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' -m 5 -H 'content-type: application/json' \
    -d "$(check_body "$2" "$3" "$4")" "http://$1/v1/check"
}

# remaining_of DATA DOMAIN KEY VALUE: what a look (POST /v1/check with cost 0) at one descriptor
# of one entry KEY=VALUE says is left of its first limit, on DATA (HOST:PORT).
remaining_of() {
  curl -s -m 5 -d "$(check_body "$2" "$3" "$4" ',"cost":0')" \
    "http://$1/v1/check" | grep -o '"remaining":[0-9]*' | head -1 | cut -d: -f2
}

# fire DOMAIN KEY VALUE N [INSTANCES...]: N such checks on each instance given (indexes into the
# array `datas`, HOST:PORT each; all by default), FIRE_PARALLEL (8) at a time per instance, all
# at once; prints how many were allowed (200). One curl per instance makes its N requests
# (--parallel): a curl process per request cost about 20 ms of CPU, most of what a test that
# fires thousands spent.
fire() {
  local body
  body=$(check_body "$1" "$2" "$3")
  local n=$4 workers=() i transfers; shift 4
  # shellcheck disable=SC2154  # (datas: the caller's instances)
  local which=("$@"); ((${#which[@]})) || which=("${!datas[@]}")
  for i in "${which[@]}"; do
    transfers=()
    for _ in $(seq "$n"); do transfers+=(-o /dev/null "http://${datas[$i]}/v1/check"); done
    curl -s --parallel --parallel-immediate --parallel-max "${FIRE_PARALLEL:-8}" -m 5 \
      -w '%{http_code}\n' -H 'content-type: application/json' -d "$body" "${transfers[@]}" \
      >"$tmp/fire.$i" &
    workers+=($!)
  done
  wait "${workers[@]}"
  cat "$tmp"/fire.* | grep -c '^200$'
  rm -f "$tmp"/fire.*
}

# contains_in_order TEXT PATTERN: TEXT contains PATTERN's `…`-separated pieces, in order (the
# `# → TEXT` expectations of the commands that the docs show: readme_quickstart_e2e,
# library_example_e2e).
contains_in_order() {
  local rest=$1 pattern=$2 piece
  while :; do
    piece=${pattern%%…*}
    [[ $rest == *"$piece"* ]] || return 1
    rest=${rest#*"$piece"}
    [[ $pattern == *…* ]] || return 0
    pattern=${pattern#*…}
  done
}

# check_doc_block NAME PAGE ROOT PATH: a check that PAGE shows ROOT/PATH verbatim (doc_block);
# prints the difference if not.
check_doc_block() {
  if diff -u "$3/$4" <(doc_block "$2" "$4") >"$tmp/doc_block.diff"; then
    check "$1" same same
  else
    check "$1" same different
    cat "$tmp/doc_block.diff"
  fi
}

# replace_in FILE OLD NEW COUNT: replaces every OLD (a literal string) in FILE by NEW; returns 1
# and says so, changing nothing, unless there were exactly COUNT of them (the file must still
# say what the test means to replace).
replace_in() {
  local text rest n
  text=$(<"$1")
  rest=${text//"$2"/}
  n=$(((${#text} - ${#rest}) / ${#2}))
  if ((n != $4)); then
    echo "$1: [$2] found $n times, not $4"
    return 1
  fi
  printf '%s\n' "${text//"$2"/"$3"}" >"$1"
}

# ------------------------------------------------------------------ reading answers
# metrics ADMIN: the /metrics text of the instance whose admin listener is ADMIN (HOST:PORT).
metrics() { curl -s -m 10 "http://$1/metrics"; }

# metric ADMIN SAMPLE [DEFAULT]: the value of one sample on ADMIN's /metrics: SAMPLE is the
# metric's name with its labels as exposed (name{a="x",b="y"}); prints DEFAULT (nothing unless
# given) when there is no such sample.
metric() {
  metrics "$1" | awk -v m="$2" -v d="${3-}" '$1 == m && !found {v = $2; found = 1} END {print found ? v : d}'
}

# field NAME JSON: the value of "NAME" in a one-line JSON object (the last one, if the name is
# there more than once; a string without its quotes): the JSON lines of sluice sim, openloop
# and grpc_load.
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$2"; }

# The headers of the last request made with -D "$tmp/headers".
header() { grep -i "^$1:" "$tmp/headers" | head -1 | cut -d' ' -f2- | tr -d '\r'; }

# now_ms: the wall clock in milliseconds.
now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }

# until_true SECONDS COMMAND...: runs COMMAND every 50 ms until it succeeds; 1 if SECONDS passed.
until_true() {
  local limit=$(($(now_ms) + $1 * 1000)); shift
  until "$@"; do
    (($(now_ms) < limit)) || return 1
    sleep 0.05
  done
}

# clear_of_hour_end SECONDS: if the next hour of the clock (an epoch-aligned window of an hour or
# a day ends there) is less than SECONDS away, sleeps past it. For a test that counts a fixed
# window of an hour or a day exactly: one that rolls over while it runs admits the limit again.
clear_of_hour_end() {
  local left=$((3600 - $(date +%s) % 3600))
  if ((left < $1)); then sleep $((left + 1)); fi
}
