#!/usr/bin/env bash
# The Grafana dashboard deploy/grafana/sluice.json against a real Prometheus (docs/grafana.md):
# every query of every panel is run on data scraped from a live `sluice serve`, and must come back
# with data.
#
# Usage: SLUICE=path/to/sluice tests/grafana_dashboard_e2e.sh [--dashboard FILE] [REPO_ROOT]
#        SLUICE=path/to/sluice tests/grafana_dashboard_e2e.sh --planted [REPO_ROOT]
#
# It starts a throwaway redis-server, `sluice serve` on it (a small rules directory: a domain that
# denies, a domain with `consistency: leased`, the over-limit cache on; every port picked by the
# kernel or free_port) and Debian's `prometheus` scraping sluice's admin /metrics every second
# into a temporary directory. It sends a bounded load (a few hundred POST /v1/check, some denied,
# a few bad requests), one configuration reload that applies and one that fails, then waits
# (polling Prometheus's HTTP API, bounded) until Prometheus holds all of it and has scraped once
# more (every series has two samples, so that rate() answers). Then it checks the dashboard:
#
#   - it is valid JSON, schemaVersion 36 or later;
#   - a `datasource` variable (type datasource, Prometheus) and a `domain` variable whose query
#     is label_values(sluice_decisions_total, domain), on ${datasource}, multi-value with
#     All = `.*`; that query answers with domains on the live data;
#   - panel ids are unique; every panel but a row has a title, at least one target with an
#     expression, and ${datasource} as its data source (and its targets' data source);
#   - every target's expression, with Grafana's variables put in ($domain: `.*`,
#     $__rate_interval: 1m, $__interval: 15s, $__range: 5m; any other variable fails), sent to
#     /api/v1/query, answers status success and a non-empty result; every {{label}} of its
#     legend is a label of each series that came back;
#   - every selector of a metric that carries a `domain` label (as the live data shows) filters
#     with domain=~"$domain";
#   - every sluice_ metric a panel uses is one docs/operations.md lists.
#
# --dashboard FILE checks FILE instead of deploy/grafana/sluice.json (a variant being tried).
# --planted also checks this checker: after the dashboard's own checks, on the same live data, it
# runs the checks on copies of the dashboard each holding one fault (a misspelt metric, a PromQL
# syntax error, a misspelt variable, a domain filter dropped, a legend label misspelt, a panel on
# a fixed data source, a panel without targets or without a title, the domain variable's query
# misspelt, a file that is not JSON): each copy must fail, and only on the checks its fault breaks.
#
# Prints `ok`/`FAIL` per check, then `N passed, M failed`; exits 1 on any failure. Every process
# it starts is stopped by pid on exit (tests/lib.sh). Bounded: about 10 s, 60 s at the very most.
set -u
here=$(cd "$(dirname "$0")" && pwd)
sluice=${SLUICE:?set SLUICE to the sluice binary}
source "$here/lib.sh"
need_tools curl prometheus redis-server redis-cli
python=/usr/bin/python3  # Debian's: the checker below needs nothing beyond the standard library
[[ -x $python ]] || fail_setup "$python is missing (Debian's python3 package)"

planted=0 dashboard=
root=$(dirname "$here")
while (($#)); do
  case $1 in
    --planted) planted=1 ;;
    --dashboard) dashboard=${2:?--dashboard needs a FILE}; shift ;;
    -*) fail_setup "unknown option $1 (usage: $0 [--planted] [--dashboard FILE] [REPO_ROOT])" ;;
    *) root=$1 ;;
  esac
  shift
done
dashboard=${dashboard:-$root/deploy/grafana/sluice.json}
docs=$root/docs/operations.md
[[ -f $dashboard ]] || fail_setup "no dashboard at $dashboard"
[[ -f $docs ]] || fail_setup "no $docs"
deadline=$((SECONDS + 50))  # the whole run, servers and waits included

# ------------------------------------------------------------------ the checker (python3)
cat >"$tmp/dashboard_check.py" <<'PY'
"""Checks a Grafana dashboard's panels against a Prometheus (see grafana_dashboard_e2e.sh).

  dashboard_check.py check DASHBOARD PROMETHEUS_URL DOCS
      prints one line per check: "ok<TAB>NAME" or "fail<TAB>NAME<TAB>WHY"
  dashboard_check.py plant KIND DASHBOARD OUT
      writes DASHBOARD with the fault KIND planted to OUT
"""
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

# What a Grafana variable becomes in a query sent straight to Prometheus.
VALUES = {"domain": ".*", "__rate_interval": "1m", "__interval": "15s", "__range": "5m",
          "__range_s": "300", "__interval_ms": "15000"}
VARIABLE = re.compile(r"\$\{(\w+)(?::[\w]+)?\}|\$(\w+)|\[\[(\w+)\]\]")
SELECTOR = re.compile(r"\b(sluice_[a-z0-9_]*[a-z0-9])\b(\s*\{[^}]*\})?")
DATASOURCE_UIDS = ("${datasource}", "$datasource")

def say(ok, name, why=""):
    name = " ".join(name.split())
    print("ok\t" + name if ok else "fail\t" + name + "\t" + " ".join(why.split()), flush=True)

def prom(base, path, params):
    url = base + path + "?" + urllib.parse.urlencode(params, doseq=True)
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:  # Prometheus answers a bad query with 400 and JSON
        try:
            return json.load(e)
        except ValueError:
            return {"status": "error", "error": "HTTP %d" % e.code}
    except (urllib.error.URLError, OSError, ValueError) as e:
        return {"status": "error", "error": str(e)}

def flatten(panels):
    for p in panels or []:
        yield p
        if p.get("type") == "row":
            yield from flatten(p.get("panels"))

def uses_variable(ds):
    return isinstance(ds, dict) and ds.get("uid") in DATASOURCE_UIDS or ds in DATASOURCE_UIDS

def substitute(expr):
    unknown = []
    def one(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in VALUES:
            unknown.append(name)
            return m.group(0)
        return VALUES[name]
    return VARIABLE.sub(one, expr), unknown

def metric_names(expr):
    return {re.sub(r"_(bucket|sum|count)$", "", m.group(1)) for m in SELECTOR.finditer(expr)}

def check(path, base, docs_path):
    try:
        with open(path, encoding="utf-8") as f:
            dash = json.load(f)
        say(isinstance(dash, dict), "dashboard is valid JSON (an object)", "not an object")
    except (OSError, ValueError) as e:
        say(False, "dashboard is valid JSON (an object)", str(e))
        return
    if not isinstance(dash, dict):
        return
    with open(docs_path, encoding="utf-8") as f:
        docs = f.read()
    schema = dash.get("schemaVersion")
    say(isinstance(schema, int) and schema >= 36, "schemaVersion 36 or later",
        "schemaVersion is %r" % (schema,))
    say(bool(dash.get("title")) and bool(dash.get("uid")), "the dashboard has a title and a uid",
        "title %r, uid %r" % (dash.get("title"), dash.get("uid")))

    # Template variables.
    variables = {v.get("name"): v for v in (dash.get("templating") or {}).get("list") or []}
    ds = variables.get("datasource") or {}
    say(ds.get("type") == "datasource" and ds.get("query") == "prometheus",
        "a datasource variable of Prometheus data sources",
        "templating has %r" % ({k: v.get("type") for k, v in variables.items()},))
    dom = variables.get("domain") or {}
    query = dom.get("query")
    query = query.get("query") if isinstance(query, dict) else query
    wanted = "label_values(sluice_decisions_total, domain)"
    say(dom.get("type") == "query" and query == wanted and dom.get("definition", wanted) == wanted
        and uses_variable(dom.get("datasource")) and dom.get("multi") is True
        and dom.get("includeAll") is True and dom.get("allValue") == ".*",
        "the domain variable: " + wanted + " on ${datasource}, multi-value, All = .*",
        "it is %s" % json.dumps(dom)[:400])
    m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query or "")
    if m:
        ans = prom(base, "/api/v1/label/%s/values" % m.group(2), {"match[]": m.group(1)})
        values = ans.get("data") or []
        say(ans.get("status") == "success" and len(values) > 0,
            "the domain variable's query finds domains on the live data (%s)" % ", ".join(values),
            "Prometheus answered %s" % json.dumps(ans)[:300])
    others = set(variables) - {"datasource", "domain"}
    say(not others, "no variables but datasource and domain", "also %s" % sorted(others))

    # Metrics that carry a domain label, from the live data.
    ans = prom(base, "/api/v1/query",
               {"query": 'group by (__name__) ({__name__=~"sluice_.+", domain!=""})'})
    with_domain = {r["metric"]["__name__"] for r in (ans.get("data") or {}).get("result", [])}
    say("sluice_decisions_total" in with_domain,
        "the live data shows which metrics carry a domain label (%s)" % ", ".join(sorted(with_domain)),
        "Prometheus answered %s" % json.dumps(ans)[:300])

    panels = list(flatten(dash.get("panels")))
    say(len([p for p in panels if p.get("type") != "row"]) > 0, "the dashboard has panels",
        "no panels")
    ids = [p.get("id") for p in panels]
    dupes = sorted({i for i in ids if ids.count(i) > 1}, key=str)
    say(not dupes and None not in ids, "panel ids are set and unique", "ids %r" % (dupes or ids,))

    for p in panels:
        if p.get("type") == "row":
            continue
        title = p.get("title") or ""
        label = "panel %s %r" % (p.get("id"), title)
        targets = p.get("targets") or []
        faults = []
        if not title.strip():
            faults.append("no title")
        if not targets:
            faults.append("no target")
        if not uses_variable(p.get("datasource")):
            faults.append("its datasource is %r, not ${datasource}" % (p.get("datasource"),))
        for t in targets:
            if not (t.get("expr") or "").strip():
                faults.append("target %s has no expression" % t.get("refId"))
            if "datasource" in t and not uses_variable(t["datasource"]):
                faults.append("target %s's datasource is %r" % (t.get("refId"), t["datasource"]))
        say(not faults, label + ": a title, targets, datasource ${datasource}", "; ".join(faults))

        for t in targets:
            expr = t.get("expr") or ""
            if not expr.strip():
                continue
            name = "%s %s" % (label, t.get("refId"))
            query, unknown = substitute(expr)
            if unknown:
                say(False, name + ": only known variables", "unknown variable(s) %s in %s"
                    % (", ".join("$" + u for u in unknown), expr))
                continue
            ans = prom(base, "/api/v1/query", {"query": query})
            result = (ans.get("data") or {}).get("result")
            if ans.get("status") != "success":
                say(False, name + ": the query returns data", "status %s: %s [%s]"
                    % (ans.get("status"), ans.get("error"), query))
                continue
            if not result:
                say(False, name + ": the query returns data", "an empty result for [%s]" % query)
                continue
            say(True, "%s: the query returns data (%d series)" % (name, len(result)))
            legend = t.get("legendFormat") or ""
            needed = re.findall(r"\{\{\s*([\w]+)\s*\}\}", legend)
            missing = sorted({l for l in needed for r in result if l not in r.get("metric", {})})
            if needed:
                say(not missing, name + ": its legend's labels are on every series",
                    "legend %r: no label %s on a series of [%s]" % (legend, ", ".join(missing), query))
            for m in SELECTOR.finditer(expr):
                metric = m.group(1)
                if metric in with_domain and 'domain=~"$domain"' not in (m.group(2) or ""):
                    say(False, name + ": filters " + metric + " by $domain",
                        '%s%s does not filter with domain=~"$domain"' % (metric, m.group(2) or ""))
            for metric in sorted(metric_names(expr)):
                say(re.search(r"`" + metric + r"[`{]", docs) is not None,
                    "%s: %s is listed in docs/operations.md" % (name, metric),
                    "docs/operations.md lists no %s" % metric)

def plant(kind, path, out):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if kind == "not_json":
        with open(out, "w", encoding="utf-8") as f:
            f.write(text[: len(text) // 2])
        return
    dash = json.loads(text)
    panels = [p for p in flatten(dash["panels"]) if p.get("type") != "row"]
    def first(needle):
        for p in panels:
            for t in p.get("targets") or []:
                if needle in t.get("expr", ""):
                    return p, t
        raise SystemExit("plant %s: no target holds %s" % (kind, needle))
    if kind == "misspelt_metric":
        p, t = first("sluice_store_entries")
        t["expr"] = t["expr"].replace("sluice_store_entries", "sluice_store_entires")
    elif kind == "syntax_error":
        p, t = first("sluice_http_open_connections")
        t["expr"] += ")"
    elif kind == "misspelt_variable":
        p, t = first('decision="denied"')
        t["expr"] = t["expr"].replace("$domain", "$domian", 1)
    elif kind == "domain_filter_dropped":
        p, t = first("sluice_near_limit_decisions_total")
        t["expr"] = t["expr"].replace('{domain=~"$domain"}', "")
    elif kind == "misspelt_legend":
        p, t = first("sluice_near_limit_decisions_total")
        t["legendFormat"] = t["legendFormat"].replace("{{limit}}", "{{limits}}")
    elif kind == "fixed_datasource":
        p, t = first("sluice_uptime_seconds")
        p["datasource"] = {"type": "prometheus", "uid": "prometheus-main"}
    elif kind == "no_targets":
        p, t = first("sluice_store_memory_bytes")
        p["targets"] = []
    elif kind == "no_title":
        p, t = first("sluice_http_requests_total")
        p["title"] = ""
    elif kind == "misspelt_variable_query":
        for v in dash["templating"]["list"]:
            if v.get("name") == "domain":
                v["definition"] = v["definition"].replace("decisions", "decision")
                v["query"]["query"] = v["query"]["query"].replace("decisions", "decision")
    else:
        raise SystemExit("unknown fault " + kind)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(dash, f, indent=2)

if __name__ == "__main__":
    if sys.argv[1] == "check":
        check(*sys.argv[2:5])
    else:
        plant(*sys.argv[2:5])
PY

# run_checker DASHBOARD: the checker's lines ("ok<TAB>NAME", "fail<TAB>NAME<TAB>WHY") on stdout.
run_checker() {
  timeout 60 "$python" "$tmp/dashboard_check.py" check "$1" "$prom_url" "$docs" 2>&1 ||
    printf 'fail\tthe checker ran to its end\tit exited %s\n' "$?"
}
# tally: the checker's lines, as passes and failures of this script.
tally() {
  local status name why
  while IFS=$'\t' read -r status name why; do
    case $status in
      ok) pass "$name" ;;
      fail) fail "$name" "$why" ;;
      *) fail "checker output" "an unexpected line: $status $name $why" ;;
    esac
  done
}

# ------------------------------------------------------------------ Redis, sluice, Prometheus
mkdir -p "$tmp/rules"
cat >"$tmp/rules/web.yaml" <<'YAML'
domain: web
descriptors:
  - key: user
    rate_limit: {name: per_user, requests: 10, window: 1h, algorithm: token_bucket}
YAML
cat >"$tmp/rules/leased.yaml" <<'YAML'
domain: leased
consistency: leased
descriptors:
  - key: tenant
    rate_limit: {name: per_tenant, requests: 1000, window: 1h}
YAML
cat >"$tmp/sluice.yaml" <<'YAML'
rules: rules
redis:
  timeout: 250ms
  over_limit_cache: 1024
  lease_interval: 200ms
YAML

start_redis_on || fail_setup "redis-server did not start"
start main --config "$tmp/sluice.yaml" --redis "redis://127.0.0.1:$RPORT" --threads 1 ||
  fail_setup "sluice serve did not start: $(tail -5 "$tmp/main.err")"
datas=("$DATA")

# Prometheus on a free port (another tries if one is taken between the look and the bind).
prom_url=
for attempt in 1 2 3; do
  free_port || break
  mkdir -p "$tmp/prometheus-$attempt"
  cat >"$tmp/prometheus.yml" <<YAML
global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: sluice
    static_configs: [{targets: ["$ADMIN"]}]
YAML
  prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/prometheus-$attempt" \
    --web.listen-address="127.0.0.1:$FREE_PORT" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
  prom_pid=$!
  pids+=("$prom_pid")
  for _ in $(seq 200); do  # (20 s at most)
    kill -0 "$prom_pid" 2>/dev/null || break
    if [[ $(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$FREE_PORT/-/ready") == 200 ]]; then
      prom_url=http://127.0.0.1:$FREE_PORT
      break 2
    fi
    sleep 0.1
  done
  stop "$prom_pid" 2
done
[[ -n $prom_url ]] || fail_setup "prometheus did not start: $(tail -5 "$tmp/prometheus.log")"

# query EXPR: the values of an instant query's result, one a line (nothing if it is empty).
query() {
  curl -s -m 5 -G "$prom_url/api/v1/query" --data-urlencode "query=$1" |
    "$python" -c 'import json, sys
for r in json.load(sys.stdin).get("data", {}).get("result", []): print(r["value"][1])' 2>/dev/null
}
# wait_for WHAT EXPR: polls Prometheus (every 0.2 s, until the deadline) until EXPR has a result.
wait_for() {
  while ((SECONDS < deadline)); do
    [[ -n $(query "$2") ]] && { pass "Prometheus has $1"; return 0; }
    sleep 0.2
  done
  fail "Prometheus has $1" "no result for [$2] before the deadline"
  return 1
}
wait_for "scraped sluice" 'up{job="sluice"} == 1' || { finish; exit; }

# ------------------------------------------------------------------ load, reloads
# A reload that applies (a descriptor added) and one that fails (a broken file; put right after).
cp "$tmp/rules/web.yaml" "$tmp/web.yaml.good"
printf '  - key: page\n    rate_limit: {name: per_page, requests: 100, window: 1h}\n' >>"$tmp/rules/web.yaml"
check "a reload that applies -> 200" 200 \
  "$(curl -s -o /dev/null -w '%{http_code}' -m 5 -X POST "http://$ADMIN/v1/reload")"
printf 'domain: web\ndescriptors: [\n' >"$tmp/rules/web.yaml"
check "a reload that fails -> 422" 422 \
  "$(curl -s -o /dev/null -w '%{http_code}' -m 5 -X POST "http://$ADMIN/v1/reload")"
cp "$tmp/web.yaml.good" "$tmp/rules/web.yaml"
curl -s -o /dev/null -m 5 -X POST "http://$ADMIN/v1/reload"

# 5 bad requests (400), 20 users x 15 checks against 10 an hour (100 denied, but for those a
# slow Redis may leave to failure_mode: open), 40 checks on a leased tenant.
for _ in 1 2 3 4 5; do
  curl -s -o /dev/null -m 5 -d '{"domain":' "http://$DATA/v1/check"
done
allowed=0
for i in $(seq 20); do
  allowed=$((allowed + $(fire web user "u$i" 15)))
done
check "web: 300 checks, 200 or a few more allowed, the others denied" yes \
  "$( ((allowed >= 200 && allowed < 280)) && echo yes || echo "no: $allowed allowed")"
check "leased: 40 of 40 allowed" 40 "$(fire leased tenant t1 40)"

# Wait until Prometheus holds all of it: its total of decisions is sluice's own; then one more
# scrape, so that every series has two samples and rate() has something to say.
total=$(metrics "$ADMIN" | awk '/^sluice_decisions_total\{/ {n += $2} END {print n + 0}')
check "sluice counted the decisions (at least 340)" yes "$( ((total >= 340)) && echo yes || echo "no: $total")"
if wait_for "every decision ($total)" "sum(sluice_decisions_total) == $total"; then
  scraped=$(query 'timestamp(up{job="sluice"})')
  wait_for "scraped once more" "timestamp(up{job=\"sluice\"}) > ${scraped:-0}"
fi

# ------------------------------------------------------------------ the dashboard
if ((planted == 0)); then
  echo "--- $dashboard"
  run_checker "$dashboard" >"$tmp/check.out"
  tally <"$tmp/check.out"
  finish
  exit
fi

# --planted: each fault, and the only checks it may fail (an extended regex of their names).
declare -A expect=(
  [misspelt_metric]="'Live states' A: the query returns data|sluice_store_entires is listed in docs"
  [syntax_error]="'Open connections' A: the query returns data"
  [misspelt_variable]="'Denials per second by domain and limit' A: (only known variables)"
  [domain_filter_dropped]="'Near-limit admissions per second' A: filters sluice_near_limit_decisions_total by"
  [misspelt_legend]="'Near-limit admissions per second' A: its legend's labels"
  [fixed_datasource]="'Uptime': a title, targets, datasource"
  [no_targets]="'Store memory': a title, targets, datasource"
  [no_title]="'': a title, targets, datasource"
  [misspelt_variable_query]="the domain variable"
  [not_json]="dashboard is valid JSON"
)
# The dashboard as it is first, each of its checks reported as without --planted (so that one
# run, on one start of Prometheus and sluice, does both).
echo "--- $dashboard (the base of the planted copies)"
run_checker "$dashboard" >"$tmp/check.out"
tally <"$tmp/check.out"
echo "--- planted faults"
for kind in misspelt_metric syntax_error misspelt_variable domain_filter_dropped misspelt_legend \
  fixed_datasource no_targets no_title misspelt_variable_query not_json; do
  copy=$tmp/planted-$kind.json
  "$python" "$tmp/dashboard_check.py" plant "$kind" "$dashboard" "$copy" ||
    { fail "planted $kind" "could not plant it"; continue; }
  run_checker "$copy" >"$tmp/planted.out"
  failures=$(grep $'^fail\t' "$tmp/planted.out" | cut -f2)
  unexpected=$(grep -vE -- "${expect[$kind]}" <<<"$failures" | grep -v '^$')
  if [[ -z $failures ]]; then
    fail "planted $kind is caught" "no check failed"
  elif [[ -n $unexpected ]]; then
    fail "planted $kind is caught, by its checks only" "other checks failed too" "$unexpected"
  else
    pass "planted $kind is caught: $(head -1 <<<"$failures")$( (($(wc -l <<<"$failures") > 1)) && echo " (+$(($(wc -l <<<"$failures") - 1)))")"
  fi
done
finish
