#!/usr/bin/env bash
# End-to-end test of consistency: leased (backend/hybrid/leases.h) across a reload that changes a leased
# limit: the limit's state gets a new id, and the unspent units of the lease this instance held
# of the old one go back to Redis when that lease ends. Two `sluice serve` processes share one
# redis-server: A takes a lease of a fixed_window limit of 100 per day and spends part of it; its
# limit is changed to 120 and reloaded; with no request on A, within a lease interval of the
# reload A gives the unspent units back (its sluice_lease_units_total{fate="returned"}, and the
# old state's count in Redis drops to what A spent), and B, which kept the old limit, then admits
# exactly the rest of the 100.
# Usage: SLUICE=path/to/sluice tests/leases_reload_e2e.sh
set -u
sluice=${SLUICE:?set SLUICE to the sluice binary}

source "$(dirname "$0")/lib.sh"
need_tools curl redis-server redis-cli
source "$(dirname "$0")/lease_load.sh"

domain=leased
# rules LIMIT: the rules file with the descriptor `cfg` limited to LIMIT per day (windows of a
# day: the test never sees one turn, clear_of_midnight).
rules() {
  cat <<EOF
domain: leased
consistency: leased
failure_mode: closed
descriptors:
  - key: cfg
    rate_limit: {algorithm: fixed_window, requests: $1, window: 1d}
  - key: other
    rate_limit: {algorithm: fixed_window, requests: 1000, window: 1d}
EOF
}
mkdir -p "$tmp/a" "$tmp/b"
rules 100 >"$tmp/a/leased.yaml"
rules 100 >"$tmp/b/leased.yaml"
# A window's lease lives 5 s here: long enough to tell a return at the reload
# from one when the lease ends.
life_s=5
clear_of_hour_end 90  # (its fixed windows must not roll over while it counts them)
start_redis_on; rport=$RPORT
for x in a b; do
  printf 'rules: %s\nredis:\n  instances: 2\n  timeout: 1s\n  lease_interval: 500ms\n  window_lease_life: 5s\n' \
    "$tmp/$x" >"$tmp/$x.yaml"
done
start a --config "$tmp/a.yaml" --redis "redis://127.0.0.1:$rport" --threads 1
a_data=$DATA a_admin=$ADMIN
start b --config "$tmp/b.yaml" --redis "redis://127.0.0.1:$rport" --threads 1
b_data=$DATA
check "two instances up" "yes yes" "$([[ -n $a_data ]] && echo yes) $([[ -n $b_data ]] && echo yes)"
[[ -n $a_data ]] || { finish; exit; }

# counts: "KEY COUNT" for each fixed_window state in Redis (a string of two little-endian
# doubles, idle_at and count: decide.lua), the key in hex.
counts() {
  redis-cli -p "$rport" eval '
    local out = {}
    for _, k in ipairs(redis.call("KEYS", "*")) do
      if redis.call("TYPE", k).ok == "string" then
        local v = redis.call("GET", k)
        if #v == 16 then
          local _, count = struct.unpack("<dd", v)
          out[#out + 1] = k:gsub(".", function(c) return string.format("%02x", c:byte()) end) ..
                          " " .. tostring(count)
        end
      end
    end
    return out' 0
}
count_of() { counts | awk -v k="$1" '$1 == k {print $2}'; }  # count_of KEY_HEX
admins=("$a_admin")  # (lease_metric reads A's)
returned() { lease_metric 'sluice_lease_units_total{fate="returned"}'; }

clear_of_midnight
# A takes a lease and spends part of it: its second lease is sized on the rate it spent the first
# at, over the lease's 5 s life, at most half of what the state had left per instance (25).
datas=("$a_data")
for _ in $(seq 12); do echo "0 cfg x"; done >"$tmp/a_load"
spent=$(fire_dealt "$tmp/a_load" | grep -c ' 200$')
check "A: all 12 admitted" 12 "$spent"
old_key=$(counts | awk '{print $1}')
check "Redis holds one state, the old limit's" 1 "$(echo "$old_key" | grep -c .)"
counted=$(count_of "$old_key")
held=$((counted - spent))
echo "# A spent $spent; Redis counts $counted: A holds $held unspent"
check "A holds unspent units of its lease" yes "$([[ $held -gt 0 ]] && echo yes || echo "no: $held")"
returned_before=$(returned)

# ---------------------------------------------------------------- the limit changes: 100 -> 120
rules 120 >"$tmp/a/leased.yaml"
check "A reloaded the changed limit" 200 \
  "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://$a_admin/v1/reload")"
reloaded_ms=$(date +%s%3N)

# With no request on A at all: Stack gives every lease back once it sees the reload (checked
# every lease interval, 500 ms here), long before the old lease's 5 s life is over.
back=0
for _ in $(seq 30); do
  [[ $(count_of "$old_key") == "$spent" ]] && { back=1; break; }
  sleep 0.1
done
took_ms=$(($(date +%s%3N) - reloaded_ms))
echo "# the old state counts $(count_of "$old_key") $took_ms ms after the reload; A returned" \
  "$(( $(returned) - returned_before )) units"
check "A gave its $held unspent units of the old limit back (the state counts what A spent)" 1 "$back"
check "... with no request, within 2 s of the reload (the old lease would live ${life_s} s)" yes \
  "$([[ $took_ms -le 2000 ]] && echo yes || echo "no: $took_ms ms")"
check "A counted them returned" yes \
  "$(r=$(( $(returned) - returned_before )); [[ $r -ge $held ]] && echo yes || echo "no: $r")"

# ---------------------------------------------------------------- B, on the old limit, gets them
datas=("$b_data")
for _ in $(seq 120); do echo "0 cfg x"; done >"$tmp/b_load"
check "B (the old limit, 100) then admits exactly the $((100 - spent)) A did not spend" \
  "$((100 - spent))" "$(fire_dealt "$tmp/b_load" | grep -c ' 200$')"

datas=("$a_data")
for _ in $(seq 130); do echo "0 cfg x"; done >"$tmp/a_load"
check "A, on the new limit (120), admits its own 120" 120 "$(fire_dealt "$tmp/a_load" | grep -c ' 200$')"

finish
