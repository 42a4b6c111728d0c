#!/usr/bin/env bash
# Checks the Prometheus alerting rules in deploy/prometheus/ (docs/operations.md):
#
#   bash tests/alert_rules_check.sh [REPO_ROOT]        (default: this script's parent directory)
#
#   - `promtool check rules deploy/prometheus/sluice.rules.yml` passes;
#   - `promtool test rules deploy/prometheus/sluice.rules.test.yml` passes (the unit tests);
#   - every alert has a test where it fires and one where it does not;
#   - every sluice_ metric named in the rules and their tests, every label a rule matches or
#     aggregates by, and every label value it matches exactly, is one the server exports: each
#     must appear quoted ("sluice_backend_up", "decision", "denied") in src/ outside the tests,
#     where the metrics are registered (src/metrics/server_metrics.cc, src/cli/serve.cc) and
#     counted. So a metric renamed in the code cannot leave a rule watching nothing. A name that
#     exists nowhere must be reported missing (the check's negative control).
#
# Prints `N passed, M failed`; exits 1 on any failure. A missing promtool is a failure, not a
# skip: scripts/bootstrap.sh installs Debian's `prometheus` package, which has it.

set -uo pipefail

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
source "$(dirname "$0")/lib.sh"  # pass, fail, finish
cd "$root" || exit 1
rules=deploy/prometheus/sluice.rules.yml
tests=deploy/prometheus/sluice.rules.test.yml

promtool=${PROMTOOL:-$(command -v promtool || true)}
if [[ -z $promtool || ! -x $promtool ]]; then
  fail promtool "promtool not found; scripts/bootstrap.sh should have installed Debian's" \
    "'prometheus' package (apt-get install prometheus)"
  finish
  exit
fi
for f in "$rules" "$tests"; do
  if [[ ! -s $f ]]; then
    fail files "$f is missing or empty"
    finish
    exit
  fi
done

# 1. promtool's own checks.
if out=$("$promtool" check rules "$rules" 2>&1); then
  pass "promtool check rules ($(printf '%s\n' "$out" | grep -o '[0-9]* rules found'))"
else
  fail check-rules "promtool check rules failed:"
  printf '%s\n' "$out" | sed 's/^/  | /'
fi
if out=$("$promtool" test rules "$tests" 2>&1); then
  pass "promtool test rules"
else
  fail test-rules "promtool test rules failed:"
  printf '%s\n' "$out" | sed 's/^/  | /'
fi

# 2. Every alert is tested firing and not firing. In the test file, `alertname: X` is followed by
# `exp_alerts: []` (not firing) or `exp_alerts:` and a list (firing).
alerts=$(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\) *$/\1/p' "$rules")
if [[ -z $alerts ]]; then
  fail alerts "no alert found in $rules"
fi
coverage=$(awk '
  /^ *alertname:/ { name = $2; next }
  /^ *exp_alerts: *\[\] *$/ { if (name != "") quiet[name] = 1; name = ""; next }
  /^ *exp_alerts: *$/ { if (name != "") fires[name] = 1; name = ""; next }
  END {
    for (n in fires) print n, "fires"
    for (n in quiet) print n, "quiet"
  }' "$tests")
for alert in $alerts; do
  missing=()
  grep -qx "$alert fires" <<<"$coverage" || missing+=("a test where it fires")
  grep -qx "$alert quiet" <<<"$coverage" || missing+=("a test where it does not fire")
  if ((${#missing[@]} == 0)); then
    pass "$alert tested firing and not firing"
  else
    fail "$alert" "no ${missing[*]} in $tests"
  fi
done

# 3. Names against the source. `exists NAME` is true when "NAME", quoted, appears in a source
# file under src/ that is not a test.
exists() {
  grep -rqF --include='*.cc' --include='*.h' --exclude='*_test.cc' "\"$1\"" src/
}
# Lines that are not comments (annotations included: they name metrics too).
body() { grep -v '^ *#' "$1"; }

# Metric names; a histogram's series are its name plus _bucket, _sum or _count.
metrics=$( (body "$rules"; body "$tests") | grep -oE 'sluice_[a-z0-9_]*[a-z0-9]' |
  sed -E 's/_(bucket|sum|count)$//' | sort -u)
for name in $metrics; do
  if exists "$name"; then
    pass "metric $name exists"
  else
    fail "$name" "no metric \"$name\" in src/ (renamed or removed?): the rules would watch nothing"
  fi
done

# Label matchers on sluice metrics in the rules: name{label="value", label=~"re", ...}.
matchers=$(body "$rules" | grep -oE 'sluice_[a-z0-9_]+\{[^}]*\}' | sed -E 's/^[^{]*\{//; s/\}$//' |
  tr ',' '\n' | sed -E 's/^ *//; s/ *$//' | grep -v '^$' | sort -u)
while IFS= read -r m; do
  [[ -z $m ]] && continue
  if [[ ! $m =~ ^([a-zA-Z_][a-zA-Z0-9_]*)[[:space:]]*(=~|!=|!~|=)[[:space:]]*\"([^\"]*)\"$ ]]; then
    fail "matcher $m" "cannot parse this label matcher"
    continue
  fi
  label=${BASH_REMATCH[1]} op=${BASH_REMATCH[2]} value=${BASH_REMATCH[3]}
  if ! exists "$label"; then
    fail "label $label" "no label \"$label\" in src/"
  elif [[ $op == "=" ]] && ! exists "$value"; then
    fail "matcher $m" "no label value \"$value\" in src/"
  else
    pass "matcher $m exists"
  fi
done <<<"$matchers"

# Labels aggregated by: `by (a, b)`. job and instance come from Prometheus, le from histograms.
by_labels=$(body "$rules" | grep -oE 'by \([^)]*\)' | sed -E 's/^by \(//; s/\)$//' | tr ',' '\n' |
  sed -E 's/^ *//; s/ *$//' | grep -vxE 'job|instance|le|' | sort -u)
for label in $by_labels; do
  if exists "$label"; then
    pass "label $label exists"
  else
    fail "label $label" "rules aggregate by \"$label\", which no sluice metric has"
  fi
done

# Negative control: the lookup must not find what is not there.
if exists sluice_no_such_metric_total; then
  fail negative-control "a metric that does not exist was found in src/: the name check is broken"
else
  pass "negative-control (a made-up metric name is reported missing)"
fi

finish
