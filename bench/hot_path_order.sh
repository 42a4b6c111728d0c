#!/usr/bin/env bash
# Writes src/cli/hot_path.order: the functions of the `sluice` binary that forward-auth requests
# run, as the ELF sections that -ffunction-sections gives them. A release build links `sluice`
# with gold in that order (src/cli/CMakeLists.txt), so that the request path's code sits
# together: spread over the binary, its functions evicted each other from the L1 instruction
# cache on every request (docs/performance.md).
#
# Which order is best is not a matter of instructions alone: the simulated L1 instruction cache
# (64 KiB, 16-way, LRU: 64 sets of 64-byte lines, the set chosen by address bits 6-11) thrashes
# only in the sets that more than 16 of a request's lines fall into, and the request path's
# lines (sluice's and libc's, libstdc++'s) come close to filling it, so two lists of the same
# functions can differ several times over in misses. So the script
#   1. profiles the scenarios with callgrind (bench/callgrind.sh allow_100k allow_1key
#      deny_1key): instructions per function and scenario, calls between functions;
#   2. makes a few candidate orders of the functions run (CANDIDATES):
#        committed   the list as it is now (so that the script never picks a worse one)
#        sum         instructions summed over the scenarios, most first
#        allow_100k  allow_100k's instructions first, then the others' by their sum
#        density     summed instructions per byte of the function (nm -S, all its copies)
#        callgraph   chains of callers and callees, heaviest calls first (Pettis-Hansen), the
#                    chains by density
#   3. relinks `sluice` with each (only the link step reruns) and counts L1 instruction misses
#      per request in callgrind's cache simulation on each scenario (--cache-sim=yes);
#   4. keeps the candidate with the fewest misses per request summed over the scenarios, relinks
#      with it and prints the table of candidates x scenarios.
# A name that no longer exists is ignored by the linker, a function missing from the list is
# only placed farther away. Run it again when the request path changes much; it takes about
# 5 minutes (DURATION and SIM_DURATION make it shorter or steadier).
#
#   bench/hot_path_order.sh            (build/release, a release build with SLUICE_HOT_PATH_ORDER)
#
# Env: BUILD_DIR (build/release), DURATION (3s, the profile), SIM_DURATION (3s, each cache
#   simulation), CANDIDATES (all of the above), JOBS (2, for the relink's build).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$root/build/release}"
DURATION="${DURATION:-3s}"
SIM_DURATION="${SIM_DURATION:-3s}"
CANDIDATES="${CANDIDATES:-committed sum allow_100k density callgraph}"
JOBS="${JOBS:-2}"
scenarios=(allow_100k allow_1key deny_1key)
sluice="$BUILD_DIR/sluice"
order="$root/src/cli/hot_path.order"

log() { echo "hot_path_order: $*" >&2; }
die() { log "$*"; exit 1; }
for tool in python3 nm cmake valgrind; do
  command -v "$tool" >/dev/null || die "$tool is missing"
done
[ -x "$sluice" ] || die "no sluice binary at $sluice (cmake --build --preset release)"
for c in $CANDIDATES; do
  case "$c" in committed|sum|allow_100k|density|callgraph) ;; *) die "unknown candidate $c" ;; esac
done
work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-hot-path.XXXXXX")"
cp "$order" "$work/committed.order"
chosen=""
# On any exit before a candidate was chosen, the committed list goes back in place (the build
# is then relinked with it by the next build).
restore() { [ -n "$chosen" ] || cp "$work/committed.order" "$order"; }
trap restore EXIT

relink() {  # relink ORDER_FILE: sluice linked with that order
  cp "$1" "$order"
  cmake --build "$BUILD_DIR" --target sluice -j "$JOBS" >"$work/build.log" 2>&1 ||
    { cat "$work/build.log" >&2; die "the relink failed"; }
}

# analyze MODE ARGS...: the callgrind outputs' parsing, in Python.
#   analyze candidates WORK BINARY SCENARIO=OUT...   writes WORK/<candidate>.order
#   analyze misses BINARY OUT                        prints "I1 misses, of them in BINARY"
analyze() {
  python3 - "$@" <<'PY'
import collections, os, re, subprocess, sys

def parse(path, binary, event='Ir'):
    """EVENT's self cost per function of BINARY, its total over all objects, and the calls
    between BINARY's functions (callgrind's format: name compression, cob/cfn/calls lines)."""
    obs, fns = {}, {}
    ob = fn = cob = cfn = None
    ncalls = None
    ev = 0
    self_cost = collections.Counter()
    calls = collections.Counter()
    total = 0
    def name(table, val):
        m = re.match(r'\((\d+)\)(?: (.*))?$', val)
        if not m:
            return val
        if m.group(2) is not None:
            table[m.group(1)] = m.group(2)
        return table[m.group(1)]
    def strip(f):
        return re.sub(r"'\d+$", '', f)  # (callgrind's recursion levels: foo'2)
    with open(path, errors='replace') as f:
        for line in f:
            c = line[:1]
            if c.isdigit() or c in '+-*':
                if ncalls is not None:  # a call's inclusive cost: not the caller's own
                    if ob == binary and (cob or ob) == binary:
                        calls[(strip(fn), strip(cfn))] += ncalls
                    ncalls = None
                    cob = cfn = None
                    continue
                parts = line.split()
                if len(parts) > ev + 1:
                    n = int(parts[ev + 1])
                    total += n
                    if ob == binary:
                        self_cost[strip(fn)] += n
                continue
            key, _, val = line.rstrip('\n').partition('=')
            if key == 'ob':
                ob = name(obs, val)
            elif key == 'cob':
                cob = name(obs, val)
            elif key == 'fn':
                fn = name(fns, val)
            elif key == 'cfn':
                cfn = name(fns, val)
            elif key == 'calls':
                ncalls = int(val.split()[0])
            elif line.startswith('events:'):
                ev = line.split()[1:].index(event)
    return total, self_cost, calls

if sys.argv[1] == 'misses':
    total, own, _ = parse(sys.argv[3], sys.argv[2], 'I1mr')
    print(total, sum(own.values()))
    sys.exit(0)

work, binary = sys.argv[2], sys.argv[3]
per_scenario = {}
calls = collections.Counter()
for arg in sys.argv[4:]:
    scen, out = arg.split('=', 1)
    _, cost, c = parse(out, binary)
    per_scenario[scen] = cost
    calls.update(c)
total = collections.Counter()
for cost in per_scenario.values():
    total.update(cost)
run = [f for f, n in total.items() if n > 0]

# Sizes: every copy of a name takes room in the ordered block (a local function of a header,
# e.g. an .isra clone, has one copy per translation unit, and the list cannot tell them apart).
size = collections.Counter()
seen = set()
nm = subprocess.run(['nm', '-S', '--defined-only', binary], capture_output=True, text=True,
                    check=True).stdout
for line in nm.splitlines():
    p = line.split()
    if len(p) == 4 and p[2] in 'tTwW' and (p[0], p[1]) not in seen:
        seen.add((p[0], p[1]))
        if not p[3].endswith('.localalias'):
            size[p[3]] += int(p[1], 16)
def sz(f):
    return size.get(f) or 64

def by_sum(fs):
    return sorted(fs, key=lambda f: (-total[f], f))

orders = {}
orders['sum'] = by_sum(run)
a = per_scenario.get('allow_100k', collections.Counter())
first = sorted((f for f in run if a[f] > 0), key=lambda f: (-a[f], f))
orders['allow_100k'] = first + by_sum(f for f in run if a[f] == 0)
orders['density'] = sorted(run, key=lambda f: (-total[f] / sz(f), f))

# Pettis-Hansen: every function its own chain; for each pair of functions that call each other,
# heaviest first, join their chains so that the two end up as close as the chains' ends allow.
chain = {f: [f] for f in run}
weight = collections.Counter()
for (x, y), n in calls.items():
    if x != y and x in chain and y in chain:
        weight[tuple(sorted((x, y)))] += n
for (x, y), _ in sorted(weight.items(), key=lambda e: (-e[1], e[0])):
    cx, cy = chain[x], chain[y]
    if cx is cy:
        continue
    def gap(c1, c2):  # bytes between x (in c1) and y (in c2) when c2 follows c1
        i, j = c1.index(x), c2.index(y)
        return sum(sz(f) for f in c1[i + 1:]) + sum(sz(f) for f in c2[:j])
    best = min(((gap(p, q), n) for n, (p, q) in enumerate(
        [(cx, cy), (cx, cy[::-1]), (cx[::-1], cy), (cx[::-1], cy[::-1])])))
    p, q = [(cx, cy), (cx, cy[::-1]), (cx[::-1], cy), (cx[::-1], cy[::-1])][best[1]]
    merged = p + q
    for f in merged:
        chain[f] = merged
chains = {id(c): c for c in chain.values()}.values()
def density(c):
    return sum(total[f] for f in c) / sum(sz(f) for f in c)
orders['callgraph'] = [f for c in sorted(chains, key=lambda c: (-density(c), c[0])) for f in c]

for name, fs in orders.items():
    with open(os.path.join(work, name + '.order'), 'w') as out:
        for f in fs:
            # a function's cold part (foo.cold) is in foo's .text.unlikely section
            out.write('.text.unlikely.' + f[:-5] + '\n' if f.endswith('.cold')
                      else '.text.' + f + '\n')
hot = sum(sz(f) for f in run)
print(f'{len(run)} functions run, {hot} bytes with all copies', file=sys.stderr)
PY
}

# 1. The profile, with the binary as it is.
outputs=()
for scenario in "${scenarios[@]}"; do
  CALLGRIND_ARGS=--demangle=no SLUICE="$sluice" DURATION="$DURATION" \
    bash "$here/callgrind.sh" "$scenario" 2>"$work/$scenario.err" | tee -a "$work/runs.txt" >&2
  dir=$(sed -n 's/^callgrind: output in //p' "$work/$scenario.err")
  outputs+=("$scenario=$dir/callgrind.$scenario.out")
done
cp "$sluice" "$work/sluice.profiled"
analyze candidates "$work" "$sluice" "${outputs[@]}"

# 2. Each candidate linked and simulated.
printf '%-12s' candidate >"$work/table.txt"
for scenario in "${scenarios[@]}"; do printf ' %14s' "$scenario" >>"$work/table.txt"; done
printf ' %8s   (L1 instruction misses per request; in brackets those in sluice)\n' sum \
  >>"$work/table.txt"
best="" best_sum=""
for cand in $CANDIDATES; do
  relink "$work/$cand.order"
  cp "$sluice" "$work/sluice.$cand"
  row=$(printf '%-12s' "$cand") sum=0
  for scenario in "${scenarios[@]}"; do
    line=$(CALLGRIND_ARGS="--cache-sim=yes --demangle=no" SLUICE="$work/sluice.$cand" \
      DURATION="$SIM_DURATION" bash "$here/callgrind.sh" "$scenario" 2>"$work/$cand.$scenario.err")
    dir=$(sed -n 's/^callgrind: output in //p' "$work/$cand.$scenario.err")
    requests=$(awk '{print $2}' <<<"$line")
    read -r misses own < <(analyze misses "$work/sluice.$cand" "$dir/callgrind.$scenario.out")
    per=$(awk -v m="$misses" -v r="$requests" 'BEGIN { printf "%.1f", m / r }')
    own_per=$(awk -v m="$own" -v r="$requests" 'BEGIN { printf "%.1f", m / r }')
    sum=$(awk -v s="$sum" -v p="$per" 'BEGIN { printf "%.1f", s + p }')
    row+=$(printf ' %14s' "$per ($own_per)")
    log "$cand $scenario: $requests requests, $per I1 misses/request ($own_per in sluice)"
    rm -rf "$dir"
  done
  printf '%s %8s\n' "$row" "$sum" >>"$work/table.txt"
  if [ -z "$best" ] || awk -v a="$sum" -v b="$best_sum" 'BEGIN { exit !(a < b) }'; then
    best="$cand" best_sum="$sum"
  fi
done

# 3. The winner, in place and linked.
relink "$work/$best.order"
chosen="$best"
cat "$work/table.txt"
echo "chosen: $best ($best_sum misses per request summed), $(wc -l <"$order") functions in $order"
log "work files (orders, binaries, callgrind profiles) in $work"
