#!/usr/bin/env bash
# The test run of make test: every package of every module (the package
# pattern spans go.work), against the real servers
# (GEODLQ_REQUIRE_SERVICES=1), through internal/testreport, which prints
# failures and skips, fails the run on any skip that
# scripts/skip-allowlist does not list, and prints each package's time
# (also written to $TEST_TIMES, default test-times.txt in the temporary
# directory).
#
# Packages run with the race detector, except those listed in
# scripts/test-plain: packages with no concurrency of their own, whose
# tests the detector only slows (the list says why for each).
set -euo pipefail
cd "$(dirname "$0")/.."
times=${TEST_TIMES:-${TMPDIR:-/tmp}/geodlq-test-times.txt}
timeout=${TEST_TIMEOUT:-30m}

mapfile -t plain < <(sed 's/#.*//' scripts/test-plain | awk 'NF {print $1}')
mapfile -t all < <(go list github.com/geodlq/geodlq/...)
race=()
for p in "${all[@]}"; do
  skip=
  for q in "${plain[@]}"; do [ "$p" = "$q" ] && skip=1 && break; done
  [ -z "$skip" ] && race+=("$p")
done
for q in "${plain[@]}"; do
  printf '%s\n' "${all[@]}" | grep -qx "$q" || { echo "test: scripts/test-plain names $q, which is not a package" >&2; exit 1; }
done

go build -o "${TMPDIR:-/tmp}/geodlq-testreport" ./internal/testreport
export GEODLQ_REQUIRE_SERVICES=1
{
  go test -json -race -count=1 -timeout "$timeout" "${race[@]}" || true
  if [ ${#plain[@]} -gt 0 ]; then go test -json -count=1 -timeout "$timeout" "${plain[@]}" || true; fi
} | "${TMPDIR:-/tmp}/geodlq-testreport" -allow scripts/skip-allowlist -times "$times"
