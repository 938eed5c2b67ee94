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
# tests the detector only slows (the list says why for each). The two
# sets run at once, each its own go command.
#
# The go command starts test binaries in the order it is given them, so
# the slowest packages go first (the previous run's $TEST_TIMES, or
# scripts/test-first on a clean machine): a slow package started last
# would run alone at the end. TEST_P (default 3) test binaries run at once
# in the race set, and TEST_PARALLEL (default 4) parallel tests at once in
# each: most packages wait on servers, lease expiries and child processes
# more than they compute (docs/testing.md has the measured times).
#
# The packages scripts/race-uninstrumented lists (third-party servers and
# engines) are compiled without instrumentation (-gcflags=P=-race=false in
# GOFLAGS, as the Makefile exports it; added here when it is not there).
set -euo pipefail
cd "$(dirname "$0")/.."
for p in $(sed 's/#.*//' scripts/race-uninstrumented); do
  case " ${GOFLAGS:-} " in *" -gcflags=$p=-race=false "*) ;; *) GOFLAGS="${GOFLAGS:+$GOFLAGS }-gcflags=$p=-race=false" ;; esac
done
export GOFLAGS
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
# (grep reads the whole list: with pipefail, grep -q quitting at the first
# match could fail the check on printf's SIGPIPE, as it once did.)
for q in "${plain[@]}"; do
  printf '%s\n' "${all[@]}" | grep -x "$q" >/dev/null || { echo "test: scripts/test-plain names $q, which is not a package" >&2; exit 1; }
done
# Slowest first: the previous run's times ("SECONDS RESULT PACKAGE" lines,
# slowest first) when there are any, then scripts/test-first, then the rest
# in go list's order.
mapfile -t first < <({
  [ -f "$times" ] && awk '$1 ~ /^[0-9.]+$/ && NF == 3 {print $3}' "$times"
  sed 's/#.*//' scripts/test-first | awk 'NF {print $1}'
} | awk '!seen[$0]++')
for q in $(sed 's/#.*//' scripts/test-first | awk 'NF {print $1}'); do
  printf '%s\n' "${all[@]}" | grep -x "$q" >/dev/null || { echo "test: scripts/test-first names $q, which is not a package" >&2; exit 1; }
done
order() { # order PKG...: the packages given, those in $first first, in its order
  local p f
  for f in "${first[@]}"; do for p in "$@"; do [ "$p" = "$f" ] && echo "$p"; done; done
  for p in "$@"; do
    f=; for q in "${first[@]}"; do [ "$p" = "$q" ] && f=1 && break; done
    [ -z "$f" ] && echo "$p"
  done
  return 0
}
mapfile -t race < <(order "${race[@]}")
mapfile -t plain < <(order "${plain[@]}")

go build -o "${TMPDIR:-/tmp}/geodlq-testreport" ./internal/testreport
export GEODLQ_REQUIRE_SERVICES=1
out=$(mktemp -d "${TMPDIR:-/tmp}/geodlq-test.XXXXXX")
trap 'rm -rf "$out"' EXIT
# The plain set runs alongside into a file (two writers on one pipe could
# interleave long lines), which follows the race set's stream.
: >"$out/plain.json"
if [ ${#plain[@]} -gt 0 ]; then
  { go test -json -parallel "${TEST_PARALLEL:-4}" -count=1 -timeout "$timeout" "${plain[@]}" >"$out/plain.json" || true; touch "$out/plain.done"; } &
else
  touch "$out/plain.done"
fi
{
  go test -json -race -p "${TEST_P:-3}" -parallel "${TEST_PARALLEL:-4}" -count=1 -timeout "$timeout" "${race[@]}" || true
  until [ -e "$out/plain.done" ]; do sleep 1; done
  cat "$out/plain.json"
} | "${TMPDIR:-/tmp}/geodlq-testreport" -allow scripts/skip-allowlist -times "$times"
