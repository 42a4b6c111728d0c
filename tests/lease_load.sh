# shellcheck shell=bash
# shellcheck disable=SC2154  # (datas, admins, domain: the sourcing test's; tmp: tests/lib.sh's)
# Load for the end-to-end tests of consistency: leased (tests/leases_e2e.sh,
# tests/leases_cluster_e2e.sh): one hot key and a zipf-skewed set of keys, dealt over the
# instances and fired at them all at once, tallied per key. Source it after tests/lib.sh; the
# instances are `datas` (their data-plane addresses), the domain `domain`.

# zipf_requests KEY TOP: a zipf (s = 1) set of 50 values of descriptor KEY: value zK is asked
# for round(TOP / K) times (TOP, TOP/2, TOP/3, ... 1 or 2), one "KEY VALUE" line per request.
zipf_requests() {
  awk -v key="$1" -v top="$2" \
    'BEGIN { for (k = 1; k <= 50; k++) for (n = int(top / k + 0.5); n > 0; n--) print key, "z" k }'
}

# hot_requests KEY N: N requests of one value ("hot") of descriptor KEY.
hot_requests() { yes "$1 hot" | head -n "$2"; }

# deal FILE: the "KEY VALUE" requests of FILE in a fixed shuffled order, dealt round-robin over
# the instances: "INSTANCE KEY VALUE" lines (each instance gets about 1/n of every key).
deal() {
  local n=${#datas[@]}
  shuf --random-source=<(yes) "$1" | awk -v n="$n" '{ print (NR - 1) % n, $0 }'
}

# fire_dealt FILE: every request of FILE ("INSTANCE KEY VALUE", INSTANCE an index into datas) on
# its instance, 4 streams per instance, every instance at once; each stream's requests go in
# order, 25 to a curl (one connection). Prints "KEY VALUE STATUS" per request.
fire_dealt() {
  local i s workers=()
  mkdir -p "$tmp/streams"
  for i in "${!datas[@]}"; do
    for s in 0 1 2 3; do
      awk -v i="$i" -v s="$s" '$1 == i { if (n++ % 4 == s) print $2, $3 }' "$1" >"$tmp/streams/$i.$s"
      fire_stream "${datas[$i]}" <"$tmp/streams/$i.$s" >"$tmp/streams/$i.$s.out" &
      workers+=($!)
    done
  done
  wait "${workers[@]}"
  cat "$tmp"/streams/*.out
  rm -rf "$tmp/streams"
}

# fire_stream DATA: the "KEY VALUE" requests on stdin, in order, on the instance at DATA.
fire_stream() {
  local key value n=0 args=()
  while read -r key value; do
    args+=(-s -o /dev/null -m 5 -w "$key $value %{http_code}\n" -H 'content-type: application/json'
      -d "{\"domain\":\"$domain\",\"descriptors\":[{\"entries\":[{\"key\":\"$key\",\"value\":\"$value\"}]}]}"
      "http://$1/v1/check" --next)
    if ((++n == 25)); then curl "${args[@]:0:${#args[@]}-1}"; args=() n=0; fi
  done
  ((n == 0)) || curl "${args[@]:0:${#args[@]}-1}"
}

# tally FIRED...: per key (descriptor key and value), from the "KEY VALUE STATUS" lines of the
# FIRED files together: "KEY VALUE REQUESTS ADMITTED", sorted.
tally() {
  awk '{ n[$1 " " $2]++; if ($3 == 200) ok[$1 " " $2]++ }
       END { for (k in n) print k, n[k], ok[k] + 0 }' "$@" | sort
}

# over_limit TALLY KEY LIMIT: the values of KEY that admitted more than LIMIT or more than they
# asked for ("zK: ADMITTED of REQUESTS"); empty when none did.
over_limit() {
  awk -v key="$2" -v limit="$3" '$1 == key && ($4 > limit || $4 > $3) { printf "%s: %d of %d; ", $2, $4, $3 }' "$1"
}

# not_exact TALLY KEY LIMIT MIN_REQUESTS MAX_REQUESTS: the values of KEY asked for MIN_REQUESTS
# to MAX_REQUESTS times that admitted other than min(REQUESTS, LIMIT); empty when none did.
not_exact() {
  awk -v key="$2" -v limit="$3" -v lo="$4" -v hi="$5" \
    '$1 == key && $3 >= lo && $3 <= hi && $4 != ($3 < limit ? $3 : limit) { printf "%s: %d of %d; ", $2, $4, $3 }' "$1"
}

# admitted TALLY [KEY [VALUE]]: the admissions of every key, of KEY (all its values), or of VALUE.
admitted() {
  awk -v key="${2:-}" -v value="${3:-}" \
    '(key == "" || $1 == key) && (value == "" || $2 == value) { n += $4 } END { print n + 0 }' "$1"
}

# lease_metric NAME[{LABELS}]: its value summed over the instances whose admin addresses are in
# `admins`.
lease_metric() {
  local i total=0 v
  for i in "${!admins[@]}"; do
    v=$(metric "${admins[$i]}" "$1" 0)
    total=$((total + ${v%.*}))
  done
  echo "$total"
}

# clear_of_midnight: the tests count in windows of a day (1d), which turn at UTC midnight; within
# 90 s of one, waits until it has passed, so that a test's windows never turn under it.
clear_of_midnight() {
  local left=$((86400 - $(date -u +%s) % 86400))
  ((left > 90)) || sleep $((left + 1))
}
