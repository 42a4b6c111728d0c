#!/usr/bin/env bash
# The issue-23 scenarios on a many-core machine, run from inside the bundle that
# bench/device/bundle.sh makes (no packages needed there: every binary goes through the bundled
# dynamic loader). Forward-auth nginx limit_req (N workers) against `sluice serve --threads N`,
# both servers pinned to cores 0..N-1 and the clients to cores N..CORES-1:
#
#   1. throughput at each N in NS, per scenario in SCENARIOS (default zipf_100k: /allow, X-Key
#      drawn from zipf(ZIPF) over NKEYS keys; also allow_100k, deny_1key as in scale.sh): wrk,
#      closed loop, CORES-N threads (at most 10) and 64 connections each, as scale.sh runs it.
#      wrk rather than openloop at a rate nobody can reach: a closed loop with many connections
#      keeps the server busy without queueing in the client (openloop's backlog would only grow),
#      wrk costs the client less per request than openloop, so fewer client cores hold a server
#      at saturation, and the figures stand beside scale.sh's allow_100k and deny_1key columns.
#   2. latency at a fixed load at each N in FIXED_NS: nginx's saturation rate on allow_100k with
#      wrk (WARM + SAT seconds), then openloop at LOAD of that rate (constant rate, latency from
#      the intended send time: coordinated-omission-correct) against each server in turn,
#      FIXED_ROUNDS times: p50, p99, p99.9, max and the client's own lag p99, in µs.
#
# Writes $OUT/throughput.tsv, $OUT/fixed_load.tsv and the raw client output ($OUT/raw.tgz);
# prints the tables to stdout, progress to stderr. Every process it starts is stopped on exit.
#
#   NS="1 2 4 8" FIXED_NS="1 8" OUT=$OUT timeout 540 bash .device-bundle/scenarios.sh
#
# Environment (defaults): CORES (nproc), NS ("1 2 4 8"), SCENARIOS (zipf_100k), DUR (8, seconds
# of each wrk run; "8s" works too), WARM (2, seconds of wrk before each measurement; 0 = none),
# FIXED_NS ("1 8"; empty = skip part 2), LOAD (0.5), SAT (5), FIXED_DUR (10), FIXED_ROUNDS (2),
# FIXED_WARM (2, seconds of openloop per server before the rounds), OL_THREADS (client cores, at
# most 8), OL_CONNS (64 per openloop thread), NKEYS (100000), ZIPF (1.0), NGINX_PORT (18080),
# SLUICE_PORT (18090), SLUICE_ADMIN_PORT (18091), OUT (/tmp/scenarios-out), BUNDLE (this dir),
# DRY (0; 1 = print the plan and the time estimate, run nothing).
# An N needs N + 1 cores (servers on N, clients on the rest); one that does not fit is skipped.
set -euo pipefail

B=${BUNDLE:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
L=$B/lib
CORES=${CORES:-$(nproc)}
NS=${NS-"1 2 4 8"}
SCENARIOS=${SCENARIOS:-zipf_100k}
DUR=${DUR:-8}; DUR=${DUR%s}
WARM=${WARM:-2}; WARM=${WARM%s}
FIXED_NS=${FIXED_NS-"1 8"}
LOAD=${LOAD:-0.5}
SAT=${SAT:-5}; SAT=${SAT%s}
FIXED_DUR=${FIXED_DUR:-10}; FIXED_DUR=${FIXED_DUR%s}
FIXED_ROUNDS=${FIXED_ROUNDS:-2}
FIXED_WARM=${FIXED_WARM:-2}; FIXED_WARM=${FIXED_WARM%s}
OL_THREADS=${OL_THREADS:-}
OL_CONNS=${OL_CONNS:-64}
NKEYS=${NKEYS:-100000}
ZIPF=${ZIPF:-1.0}
NGINX_PORT=${NGINX_PORT:-18080}
SLUICE_PORT=${SLUICE_PORT:-18090}
SLUICE_ADMIN_PORT=${SLUICE_ADMIN_PORT:-18091}
OUT=${OUT:-/tmp/scenarios-out}

R=("$L/ld-linux-x86-64.so.2" --library-path "$L")
log() { echo "scenarios: $*" >&2; }
die() { log "$*"; exit 1; }

command -v taskset >/dev/null || die "taskset is required"
command -v timeout >/dev/null || die "timeout is required"
for b in sluice nginx wrk openloop; do [ -x "$B/bin/$b" ] || die "no $B/bin/$b: make the bundle with bench/device/bundle.sh"; done
for v in CORES DUR WARM SAT FIXED_DUR FIXED_ROUNDS FIXED_WARM OL_CONNS NKEYS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, got '${!v}'"
done
for v in DUR FIXED_DUR SAT FIXED_ROUNDS; do [ "${!v}" -ge 1 ] || die "$v must be at least 1"; done
for s in $SCENARIOS; do case $s in zipf_100k|allow_100k|deny_1key) ;; *) die "unknown scenario $s" ;; esac; done

# ---------------------------------------------------------------- plan
fits() { [ "$1" -ge 1 ] && [ $(($1 + 1)) -le "$CORES" ]; }
in_list() { local x; for x in $2; do [ "$x" = "$1" ] && return 0; done; return 1; }
all_ns=$(for n in $NS $FIXED_NS; do echo "$n"; done | sort -n -u | tr '\n' ' ')
est=0
for n in $all_ns; do
  fits "$n" || { log "N=$n skipped: it needs $((n + 1)) cores, there are $CORES"; continue; }
  est=$((est + 2))
  in_list "$n" "$NS" && for _ in $SCENARIOS; do est=$((est + 2 * (WARM + DUR + 1))); done
  in_list "$n" "$FIXED_NS" && est=$((est + WARM + SAT + 2 * (FIXED_WARM + 1) + FIXED_ROUNDS * 2 * (FIXED_DUR + 2)))
done
log "cores $CORES, sluice $(cat "$B/conf/sluice-commit" 2>/dev/null), kit $(cat "$B/conf/kit-commit" 2>/dev/null), $(uname -r)"
log "throughput N: ${NS:-none} ($SCENARIOS, ${DUR}s); fixed load N: ${FIXED_NS:-none} (LOAD $LOAD, ${FIXED_DUR}s x $FIXED_ROUNDS rounds)"
log "estimated run time: about $est s"
[ "${DRY:-0}" = 0 ] || exit 0

for p in "$NGINX_PORT" "$SLUICE_PORT" "$SLUICE_ADMIN_PORT"; do
  ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || die "port $p is taken on 127.0.0.1; not benchmarking someone else's server"
done

mkdir -p "$OUT"
# The kit's copy of bench/lib.sh and tests/lib.sh (bundle.sh puts them there): starting and
# stopping sluice by pid, CPU ticks, JSON fields, cleanup on exit (its work dir $tmp).
sluice=$B/bin/sluice
# shellcheck source=bench/lib.sh
source "$B/bench/lib.sh"
W=$tmp
ng=$W/nginx
sluice_pid=""
client_pid=""

# ---------------------------------------------------------------- processes
# nginx daemonizes: its master is found through the pid file, its workers through /proc.
nginx_master() { [ -s "$ng/nginx.pid" ] && cat "$ng/nginx.pid"; }
children() { # PID: the pids whose parent is PID (field 4 of /proc/PID/stat, after the ")")
  local f stat rest
  for f in /proc/[0-9]*/stat; do
    read -r stat 2>/dev/null <"$f" || continue
    read -ra rest <<<"${stat##*) }"
    [ "${rest[1]}" = "$1" ] && { f=${f#/proc/}; echo "${f%/stat}"; }
  done
  return 0
}
# wait_gone PID...: up to 5 s for them to exit, then SIGKILL.
wait_gone() {
  local _ p alive
  for _ in $(seq 1 100); do
    alive=0; for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.05
  done
  for p in "$@"; do kill -KILL "$p" 2>/dev/null || true; done
}
stop_servers() {
  local m ng_pids=()
  if [ -n "$sluice_pid" ]; then
    stop "$sluice_pid"
    sluice_pid=""
  fi
  if m=$(nginx_master); then
    mapfile -t ng_pids < <(echo "$m"; children "$m")
    kill -TERM "$m" 2>/dev/null || true; wait_gone "${ng_pids[@]}"; rm -f "$ng/nginx.pid"
  fi
}
# On exit (tests/lib.sh's cleanup runs it, then removes $W): the client and the servers stopped,
# the raw output packed.
scenarios_cleanup() {
  if [ -n "$client_pid" ]; then kill -TERM "$client_pid" 2>/dev/null || true; wait_gone "$client_pid"; fi
  stop_servers
  tar -C "$W" --exclude=nginx/tmp -czf "$OUT/raw.tgz" . 2>/dev/null || true
}
cleanup_hooks+=(scenarios_cleanup)

# client LIMIT_S CPUS OUTFILE BINARY ARGS...: a client through the bundled loader, pinned, killed
# after LIMIT_S, in the background so that a signal to this script stops it at once.
client() {
  local limit=$1 cpus=$2 out=$3 bin=$4 rc=0; shift 4
  timeout -k 2 "$limit" taskset -c "$cpus" "${R[@]}" "$B/bin/$bin" "$@" >"$out" 2>&1 &
  client_pid=$!
  wait "$client_pid" || rc=$?
  client_pid=""
  return $rc
}

start_servers() { # N
  local n=$1 _
  mkdir -p "$ng/tmp"
  local user=""; [ "$(id -u)" = 0 ] && user='user root;'   # else nginx switches to nobody
  sed -e "s#@PORT@#$NGINX_PORT#g" -e "s#@DIR@#$ng#g" -e "s#^worker_processes 1;#worker_processes $n; $user#" \
    "$B/conf/nginx.conf.template" >"$ng/nginx.conf"
  taskset -c "0-$((n - 1))" "${R[@]}" "$B/bin/nginx" -p "$ng/" -e "$ng/error.log" -c "$ng/nginx.conf" ||
    { cat "$ng/error.log" >&2; die "nginx did not start"; }
  start_prefix=(taskset -c "0-$((n - 1))" "${R[@]}")
  if start "$W/sluice.$n" --config "$B/conf/bench.yaml" --threads "$n" \
    --grpc 0 --listen "127.0.0.1:$SLUICE_PORT" --admin "127.0.0.1:$SLUICE_ADMIN_PORT"; then
    sluice_pid=$PID
    for _ in $(seq 1 200); do
      (exec 3<>"/dev/tcp/127.0.0.1/$NGINX_PORT") 2>/dev/null && return 0
      sleep 0.05
    done
  fi
  cat "$W/sluice.$n.err" "$ng/error.log" >&2
  die "the servers did not come up at N=$n"
}

# ---------------------------------------------------------------- measurements
hz=$(getconf CLK_TCK)
server_pids() { # PEER: the server's pids in the array spids (nginx: master and workers)
  if [ "$1" = sluice ]; then spids=("$sluice_pid"); return; fi
  local m; m=$(nginx_master)
  mapfile -t spids < <(echo "$m"; children "$m")
}
url() { # PEER SCENARIO
  local path=${2%%_*}; [ "$path" = zipf ] && path=allow
  if [ "$1" = nginx ]; then echo "http://127.0.0.1:$NGINX_PORT/$path"; else echo "http://127.0.0.1:$SLUICE_PORT/v1/auth/$path"; fi
}
wrk_args() { # PEER SCENARIO: wrk's script, URL and script arguments in the array args
  case $2 in
    zipf_100k) args=(-s "$B/conf/zipf.lua" "$(url "$1" "$2")" -- "$NKEYS" "$ZIPF") ;;
    allow_100k) args=(-s "$B/conf/keys.lua" "$(url "$1" "$2")" -- "$NKEYS") ;;
    deny_1key) args=(-s "$B/conf/fixed.lua" "$(url "$1" "$2")" -- one-key) ;;
  esac
}
# wrk_rps FILE: wrk's Requests/sec, rounded.
wrk_rps() { awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$1"; }

echo -e "peer\tN\tscenario\trps\tp99_ms\tcpu_s\treq_per_cpu_s\tnon2xx\terrors" >"$OUT/throughput.tsv"
throughput() { # PEER N SCENARIO
  local peer=$1 n=$2 scen=$3 wt=$((CORES - $2)) f="$W/wrk.$1.$2.$3" t0 t1 args spids
  [ $wt -gt 10 ] && wt=10
  wrk_args "$peer" "$scen"
  server_pids "$peer"
  if [ "$WARM" -gt 0 ]; then
    client $((WARM + 10)) "$n-$((CORES - 1))" "$f.warm" wrk -t"$wt" -c$((64 * wt)) -d"${WARM}s" "${args[@]}" ||
      log "WARN wrk warm-up failed: $peer N=$n $scen"
  fi
  t0=$(cpu_ticks "${spids[@]}")
  client $((DUR + 15)) "$n-$((CORES - 1))" "$f" wrk -t"$wt" -c$((64 * wt)) -d"${DUR}s" --latency "${args[@]}" ||
    log "WARN wrk failed: $peer N=$n $scen (see raw.tgz)"
  t1=$(cpu_ticks "${spids[@]}")
  local rps p99 tot non2 errs cpu eff
  rps=$(wrk_rps "$f"); tot=$(awk '/ requests in / {print $1}' "$f")
  p99=$(awk '$1=="99%" {v=$2; n=v+0; if (v ~ /us$/) n/=1000; else if (v ~ /ms$/) n=n; else if (v ~ /s$/) n*=1000; printf "%.3f", n}' "$f")
  non2=$(awk '/Non-2xx/ {print $NF}' "$f"); errs=$(awk '/Socket errors/ {$1=$2=""; print}' "$f" | tr -s ' ' | sed 's/^ //')
  cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" 'BEGIN {printf "%.2f", t / hz}')
  eff=$(awk -v n="${tot:-0}" -v c="$cpu" 'BEGIN {if (c > 0) printf "%.0f", n / c; else print 0}')
  case $scen in
    deny_*) [ "${non2:-0}" -ge $((${tot:-0} - 2)) ] || log "WARN $peer N=$n $scen: only ${non2:-0} of ${tot:-0} were 429" ;;
    *) [ "${non2:-0}" = 0 ] || log "WARN $peer N=$n $scen: $non2 answers were not 2xx" ;;
  esac
  [ -z "$errs" ] || log "WARN $peer N=$n $scen: socket errors $errs"
  log "$peer N=$n $scen: ${rps:-0} r/s, p99 ${p99:-?} ms, server CPU ${cpu} s"
  echo -e "$peer\t$n\t$scen\t${rps:-0}\t${p99:-0}\t$cpu\t$eff\t${non2:-0}\t${errs:-}" >>"$OUT/throughput.tsv"
}

echo -e "N\tround\tpeer\tnginx_saturation_rps\toffered_rps\tachieved_rps\tp50_us\tp99_us\tp999_us\tmax_us\tclient_lag_p99_us\tclient_cpu_pct\tclean" >"$OUT/fixed_load.tsv"
fixed_load() { # N
  local n=$1 wt=$((CORES - $1)) ot f="$W/saturation.$1" sat rate args
  [ $wt -gt 10 ] && wt=10
  ot=${OL_THREADS:-$((CORES - n))}; [ -n "$OL_THREADS" ] || [ "$ot" -le 8 ] || ot=8
  wrk_args nginx allow_100k
  if [ "$WARM" -gt 0 ]; then client $((WARM + 10)) "$n-$((CORES - 1))" "$f.warm" wrk -t"$wt" -c$((64 * wt)) -d"${WARM}s" "${args[@]}" || true; fi
  client $((SAT + 15)) "$n-$((CORES - 1))" "$f" wrk -t"$wt" -c$((64 * wt)) -d"${SAT}s" "${args[@]}" || log "WARN wrk failed (saturation)"
  sat=$(wrk_rps "$f")
  if [ -z "$sat" ] || [ "$sat" -le 0 ]; then log "WARN N=$n: no saturation rate from wrk; fixed load skipped"; return 0; fi
  rate=$(awk -v s="$sat" -v l="$LOAD" 'BEGIN {printf "%.0f", s * l}')
  log "N=$n: nginx saturates at $sat r/s on allow_100k; offering $rate r/s (openloop, $ot threads, $((OL_CONNS * ot)) connections)"
  local ol=(--rate "$rate" --threads "$ot" --connections $((OL_CONNS * ot)) --keys "$NKEYS" --key-header X-Key)
  local peer round o json problems pct
  if [ "$FIXED_WARM" -gt 0 ]; then
    for peer in nginx sluice; do
      client $((FIXED_WARM + 15)) "$n-$((CORES - 1))" "$W/openloop.$peer.$n.warm" openloop --url "$(url "$peer" allow_100k)" \
        --duration "$FIXED_WARM" "${ol[@]}" || log "WARN openloop warm-up failed: $peer N=$n"
    done
  fi
  for round in $(seq 1 "$FIXED_ROUNDS"); do
    for peer in nginx sluice; do
      o="$W/openloop.$peer.$n.$round"
      client $((FIXED_DUR + 15)) "$n-$((CORES - 1))" "$o" openloop --url "$(url "$peer" allow_100k)" \
        --duration "$FIXED_DUR" "${ol[@]}" || log "WARN openloop failed: $peer N=$n round $round"
      json=$(cat "$o" 2>/dev/null || true)
      [ -n "$(field p99_us "$json")" ] || { log "WARN no result from openloop: $peer N=$n round $round"; cat "$o" >&2; continue; }
      problems=""
      [ "$(field sent "$json")" = "$(field intended "$json")" ] || problems+=" only $(field sent "$json") of $(field intended "$json") sent;"
      [ "$(field completed "$json")" = "$(field sent "$json")" ] || problems+=" $(field errors "$json") errors, $(field timeouts "$json") timeouts;"
      [ "$(field non_2xx "$json")" = 0 ] || problems+=" $(field non_2xx "$json") non-2xx;"
      [ -z "$problems" ] || log "WARN $peer N=$n round $round:$problems"
      # The client threads' mean share of a core: near 100 % the client is itself the bottleneck.
      pct=$(awk -v c="$(field client_cpu_s "$json")" -v d="$FIXED_DUR" -v t="$ot" 'BEGIN {printf "%.0f", 100 * c / d / t}')
      [ "$pct" -le 80 ] || log "WARN $peer N=$n round $round: openloop used $pct % of each of its cores"
      log "$peer N=$n round $round: $(field achieved_rps "$json") r/s, p50 $(field p50_us "$json") µs, p99 $(field p99_us "$json") µs," \
        "p99.9 $(field p999_us "$json") µs, client lag p99 $(field lag_p99_us "$json") µs"
      echo -e "$n\t$round\t$peer\t$sat\t$rate\t$(field achieved_rps "$json")\t$(field p50_us "$json")\t$(field p99_us "$json")\t$(field p999_us "$json")\t$(field max_us "$json")\t$(field lag_p99_us "$json")\t$pct\t$([ -z "$problems" ] && echo 1 || echo 0)" >>"$OUT/fixed_load.tsv"
    done
  done
}

started=$(date +%s)

for n in $all_ns; do
  fits "$n" || continue
  start_servers "$n"
  log "N=$n: nginx pid $(nginx_master), sluice pid $sluice_pid, on cores 0-$((n - 1)); clients on $n-$((CORES - 1))"
  if in_list "$n" "$NS"; then
    for scen in $SCENARIOS; do for peer in nginx sluice; do throughput "$peer" "$n" "$scen"; done; done
  fi
  if in_list "$n" "$FIXED_NS"; then fixed_load "$n"; fi
  stop_servers
done

# ---------------------------------------------------------------- tables
# column(1) aligns them where it exists (util-linux or bsdextrautils; a bare image may lack it).
align() { if command -v column >/dev/null; then column -t -s $'\t'; else cat; fi; }
if [ "$(wc -l <"$OUT/throughput.tsv")" -gt 1 ]; then
  echo "== throughput (wrk, closed loop; rps, p99 ms, requests per server CPU-second)"
  awk -F'\t' 'NR > 1 { k = $3 SUBSEP $2; rps[k, $1] = $4; p99[k, $1] = $5; eff[k, $1] = $7
                       if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
    END {
      printf "scenario\tN\tnginx_rps\tsluice_rps\tsluice/nginx\tnginx_p99_ms\tsluice_p99_ms\tnginx_req/cpu_s\tsluice_req/cpu_s\n"
      for (i = 1; i <= m; i++) { k = order[i]; split(k, a, SUBSEP)
        r = rps[k, "nginx"] > 0 ? sprintf("%.2f", rps[k, "sluice"] / rps[k, "nginx"]) : "-"
        printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a[1], a[2], rps[k, "nginx"], rps[k, "sluice"], r,
               p99[k, "nginx"], p99[k, "sluice"], eff[k, "nginx"], eff[k, "sluice"] } }' \
    "$OUT/throughput.tsv" | align
fi
if [ "$(wc -l <"$OUT/fixed_load.tsv")" -gt 1 ]; then
  echo "== latency at a fixed load (openloop, allow_100k; µs from the intended send time; median of the rounds [min-max])"
  awk -F'\t' '
    function spread(list,   a, n, i, j, t, med) {
      n = split(list, a, " ")
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
      med = n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      return n == 1 ? sprintf("%.0f", med) : sprintf("%.0f [%.0f-%.0f]", med, a[1], a[n])
    }
    NR > 1 { k = $1 SUBSEP $3; if (!(k in seen)) { seen[k] = 1; order[++m] = k }
             sat[k] = $4; off[k] = $5; clean[k] += $13; rounds[k]++
             for (c = 6; c <= 12; c++) v[k, c] = v[k, c] " " $c }
    END {
      printf "N\tpeer\tnginx_sat_rps\toffered_rps\tclean\tachieved_rps\tp50_us\tp99_us\tp99.9_us\tmax_us\tclient_lag_p99_us\tclient_cpu_%%\n"
      for (i = 1; i <= m; i++) { k = order[i]; split(k, a, SUBSEP)
        printf "%s\t%s\t%s\t%s\t%d/%d", a[1], a[2], sat[k], off[k], clean[k], rounds[k]
        for (c = 6; c <= 12; c++) printf "\t%s", spread(v[k, c])
        printf "\n" } }' "$OUT/fixed_load.tsv" | align
fi
log "done in $(($(date +%s) - started)) s (estimated $est s); $OUT/throughput.tsv, $OUT/fixed_load.tsv, raw output in $OUT/raw.tgz"
