#!/usr/bin/env bash
# Checks sluice's Prometheus exposition with the real linter: `promtool check metrics` (Debian
# package `prometheus`, installed by scripts/bootstrap.sh) must exit 0 and print nothing.
#
#   bash tests/promtool_check.sh build/release/metrics_test
#
# The expositions come from metrics_test's ServerMetrics.RealisticExpositionHasUniqueSeries,
# which writes them to $SLUICE_METRICS_DUMP_DIR:
#   busy.prom   every server family with data, awkward label values (quotes, backslashes, line
#               feeds, non-ASCII), an overflowed family (`other` series), labelled histograms
#   fresh.prom  the server families right after startup
# Each is also checked for duplicate series. A known-bad exposition must make promtool complain
# (so a promtool that silently accepts everything cannot pass this test).
#
# Prints `N passed, M failed`; exits 1 on any failure. A missing promtool is a failure, not a
# skip: bootstrap should have installed it.

set -uo pipefail

metrics_test=${1:?usage: $0 path/to/metrics_test}
if [[ ! -x $metrics_test ]]; then
  echo "promtool_check: $metrics_test is not an executable" >&2
  exit 1
fi
promtool=${PROMTOOL:-$(command -v promtool || true)}
if [[ -z $promtool || ! -x $promtool ]]; then
  echo "promtool_check: FAIL: promtool not found; scripts/bootstrap.sh should have installed" \
    "Debian's 'prometheus' package (apt-get install prometheus)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
failed_names=()

pass() {
  passed=$((passed + 1))
  echo "ok   $1"
}
fail() {
  failed=$((failed + 1))
  failed_names+=("$1")
  echo "FAIL $1: $2"
}

# Generate the expositions.
if ! SLUICE_METRICS_DUMP_DIR=$work "$metrics_test" \
  --gtest_filter='ServerMetrics.RealisticExpositionHasUniqueSeries' >"$work/gtest.log" 2>&1; then
  fail generate "metrics_test failed:"
  sed 's/^/  | /' "$work/gtest.log"
fi

# Runs promtool on $1; sets `status` and `lint` (its whole output).
run_promtool() {
  lint=$("$promtool" check metrics <"$1" 2>&1)
  status=$?
}

for name in busy fresh; do
  file=$work/$name.prom
  if [[ ! -s $file ]]; then
    fail "$name" "metrics_test wrote no $name.prom"
    continue
  fi
  run_promtool "$file"
  if ((status != 0)) || [[ -n $lint ]]; then
    fail "$name" "promtool check metrics exited $status"
    printf '%s\n' "$lint" | sed 's/^/  | /'
    continue
  fi
  # Series: a sample line without its value (values never hold spaces; no timestamps).
  dups=$(grep -v '^#' "$file" | sed 's/ [^ ]*$//' | sort | uniq -d)
  if [[ -n $dups ]]; then
    fail "$name" "duplicate series:"
    printf '%s\n' "$dups" | sed 's/^/  | /'
    continue
  fi
  pass "$name ($(grep -vc '^#' "$file") series, promtool clean)"
done

# Negative control: promtool must flag a counter without _total and a family without help.
cat >"$work/bad.prom" <<'EOF'
# TYPE bad_requests counter
bad_requests 1
EOF
run_promtool "$work/bad.prom"
if ((status != 0)) && [[ $lint == *'_total'* && $lint == *'no help text'* ]]; then
  pass "negative-control (promtool flags a bad exposition)"
else
  fail negative-control "promtool accepted a counter without _total and help (exit $status)"
  printf '%s\n' "$lint" | sed 's/^/  | /'
fi

if ((failed > 0)); then
  echo "failed: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed"
((failed == 0))
