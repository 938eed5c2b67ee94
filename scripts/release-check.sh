#!/usr/bin/env bash
# make release-check: tries a release as an adopting team would, before
# any tag exists. On a scratch clone of HEAD it runs the release step
# (scripts/release.sh VERSION), serves every module at VERSION from a
# temporary file:// module proxy (internal/modproxy, zips made with
# golang.org/x/mod/zip from the release commit), and then, with no go.work
# and no replace, in fresh modules of their own:
#
#   1. runs every `go get` and `go install` line of the README's Install
#      section, each alone in a module of its own (two lines at a time,
#      RELEASE_CHECK_JOBS to choose): the module comes at VERSION, the user's
#      `go 1.25.0` line stays, and the module's packages build; before an
#      adapter's line, the user pins each client of the README's floor
#      table at its floor, and the pin must stay (and the adapter build
#      against it); the installed geodlq must say `geodlq VERSION`;
#   2. copies every example directory whole (tests included) into a module
#      of its own, requires the geodlq modules it imports at VERSION, and
#      runs go mod tidy, go build, go vet and its tests with every test
#      server unreachable: tests that need none must pass, the others may
#      only skip for an unreachable server.
#
# Our modules come from the temporary proxy, the rest from the module cache
# or your GOPROXY. The sum DB is not consulted for geodlq's modules
# (GONOSUMDB), which no sum DB knows yet. The version served is a
# pre-release of its own per run (v0.1.0-check.<time>), removed from the
# module cache (shared with your builds) when the run ends, so that no run
# sees an earlier run's zips. (A fixed version, which would let the build
# cache serve geodlq's unchanged packages, made go vet fail on a fully
# cached second run with "could not import os (open : no such file or
# directory)"; not yet understood. Should it happen again, the vet step
# below says so and vets again with a build cache of its own.) Runs take a
# lock: one at a time.
#
#   RELEASE_CHECK_VERSION   the version to serve (default v0.1.0-check.<UTC time>)
#   RELEASE_CHECK_KEEP=1    keep the scratch directory and print its path
#   RELEASE_CHECK_JOBS      install lines run at once (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
version=${RELEASE_CHECK_VERSION:-v0.1.0-check.$(date -u +%Y%m%d%H%M%S)}
start=$SECONDS
say() { printf 'release-check: [%3ds] %s\n' $((SECONDS - start)) "$*"; }
fail() {
  printf 'release-check: FAIL: %s\n' "$*" >&2
  local j; for j in $(jobs -p); do kill "$j" 2>/dev/null || true; done # this run's own install lines
  exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/geodlq-release-check.XXXXXX")
modcache=$(go env GOMODCACHE)
mkdir -p "$modcache/cache"
exec 9>"$modcache/cache/geodlq-release-check.lock"
flock 9 || fail "another release check holds $modcache/cache/geodlq-release-check.lock"
uncache() {
  # This run's version of geodlq's modules, in the shared module cache.
  if [ -d "$modcache/github.com/geodlq" ]; then
    find "$modcache/github.com/geodlq" -depth -type d -name "*@$version" -exec chmod -R u+w {} \; -exec rm -rf {} \; 2>/dev/null || true
  fi
  if [ -d "$modcache/cache/download/github.com/geodlq" ]; then
    find "$modcache/cache/download/github.com/geodlq" -path "*/@v/$version.*" -delete 2>/dev/null || true
  fi
}
cleanup() {
  uncache
  if [ "${RELEASE_CHECK_KEEP:-}" = 1 ]; then
    echo "release-check: kept $tmp"
  else
    chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"
  fi
}
uncache # an interrupted run's
trap cleanup EXIT

# --- The release step, on a scratch clone. --------------------------------
git clone -q --no-local "$top" "$tmp/repo"
(cd "$tmp/repo" && git checkout -q "$(git -C "$top" rev-parse HEAD)")
export GIT_AUTHOR_NAME=release-check GIT_AUTHOR_EMAIL=release-check@localhost
export GIT_COMMITTER_NAME=release-check GIT_COMMITTER_EMAIL=release-check@localhost
(cd "$tmp/repo" && scripts/release.sh "$version") >"$tmp/tags" || fail "scripts/release.sh $version"
mapfile -t dirs < <(cd "$tmp/repo" && scripts/gomod.sh list)
ntags=$(grep -vc '^#' "$tmp/tags")
nunpub=$(sed -n 's/^unpublished=" \(.*\) "$/\1/p' "$tmp/repo/scripts/release.sh" | wc -w)
[ "$ntags" -eq $((${#dirs[@]} - nunpub)) ] || fail "release.sh printed $ntags tags for ${#dirs[@]} modules ($nunpub unpublished)"
grep -qx "$version" "$tmp/tags" && grep -qx "broker/kafka/$version" "$tmp/tags" || fail "release.sh's tags: $(cat "$tmp/tags")"
for d in "${dirs[@]}"; do
  if grep -oE '^\s*(require )?github.com/geodlq/geodlq[^ ]* v[^ ]+' "$tmp/repo/$d/go.mod" | awk '{print $NF}' | grep -vx "$version"; then
    fail "$d/go.mod requires a sibling at another version than $version"
  fi
done
say "release commit $(git -C "$tmp/repo" rev-parse --short HEAD): $ntags tags"

(cd "$tmp/repo" && GOWORK=off GOFLAGS=-mod=mod go run ./internal/modproxy -version "$version" -out "$tmp/proxy" "${dirs[@]}") >"$tmp/proxy.log" ||
  fail "internal/modproxy: $(cat "$tmp/proxy.log")"
say "${#dirs[@]} modules served at $version from file://$tmp/proxy"

# --- The user's environment: no workspace, no replace. ---------------------
export GOPROXY="file://$tmp/proxy,$(go env GOPROXY)"
export GOBIN="$tmp/bin" GOWORK=off GOTOOLCHAIN=local
export GOFLAGS="-mod=mod -modcacherw"
export GONOSUMDB=github.com/geodlq/geodlq GONOSUMCHECK=1 GOPRIVATE= GONOPROXY=
unset GEODLQ_REQUIRE_SERVICES
# Every test server unreachable (port 1): tests needing one skip.
export GEODLQ_TEST_POSTGRES='postgres://postgres@127.0.0.1:1/geodlq_test?sslmode=disable'
export GEODLQ_TEST_REDIS=127.0.0.1:1 GEODLQ_TEST_NATS=nats://127.0.0.1:1
export GEODLQ_TEST_AMQP='amqp://guest:guest@127.0.0.1:1/' GEODLQ_TEST_SQS=http://127.0.0.1:1

newmod() { # newmod DIR PATH: a user's module PATH in DIR, go 1.25.0
  mkdir -p "$1"
  (cd "$1" && go mod init "$2" >/dev/null 2>&1 && go mod edit -go=1.25.0)
}
# Every module's path, longest first: the first that prefixes an import
# path is the module holding the package.
mapfile -t modpaths < <(for d in "${dirs[@]}"; do sed -n 's/^module //p' "$tmp/repo/$d/go.mod"; done | awk '{print length, $0}' | sort -rn | cut -d' ' -f2)
moduleof() {
  for m in "${modpaths[@]}"; do
    case "$1" in "$m" | "$m"/*) echo "$m"; return ;; esac
  done
}
goline() { sed -n 's/^go //p' "$1/go.mod"; }

# --- 1. The README's install lines, with the floors. -----------------------
readme=$tmp/repo/README.md
mapfile -t lines < <(awk '/^## Install/{f=1} f&&/^```sh/{b=1;next} b&&/^```/{exit} b' "$readme" | sed 's/ *#.*//' | grep -E '^go (get|install) ')
[ ${#lines[@]} -ge 15 ] || fail "found ${#lines[@]} install lines in the README"
# The floor table: | `module` | client | `floor` | rows.
floors() { # floors MODULE: the "client@floor" pins of MODULE's row(s)
  awk -F'|' -v m="\`$1\`" '$2 ~ "^ *"m" *$" {print $3, $4}' "$readme" |
    sed 's/`//g' | awk '{print $1"@"$2}'
}
# Each line runs in a module of its own, two at a time (the machine's go
# commands share the module and build caches, which lock what they write):
# a line's waits on the proxies and the module cache overlap another's
# compiling. Each writes its report to its own file; a failure stops the run.
installline() { # installline N LINE
  local n=$1 line=$2 dir=$tmp/install/$1
  newmod "$dir" example.com/user
  local words; read -r -a words <<<"$line"
  if [ "${words[1]}" = install ]; then
    (cd "$dir" && "${words[@]}") 2>"$dir/err" || { echo "$line: $(cat "$dir/err")" >"$dir/fail"; return 1; }
    local got; got=$("$tmp/bin/geodlq" version) || { echo "geodlq version" >"$dir/fail"; return 1; }
    head -1 <<<"$got" | grep -qx "geodlq $version" || { echo "geodlq version says: $got" >"$dir/fail"; return 1; }
    echo "$line → $(head -1 <<<"$got"), $(grep '^geos\|^proj' <<<"$got" | tr -s ' ' | paste -sd, -)" >"$dir/ok"
    return 0
  fi
  local mod=${words[2]} pins=() pin
  while read -r pin; do [ -n "$pin" ] && pins+=("$pin"); done < <(floors "$mod")
  if [ ${#pins[@]} -gt 0 ]; then
    (cd "$dir" && go get "${pins[@]}") 2>"$dir/err" || { echo "pinning ${pins[*]}: $(cat "$dir/err")" >"$dir/fail"; return 1; }
  fi
  (cd "$dir" && "${words[@]}") 2>"$dir/err" || { echo "$line: $(cat "$dir/err")" >"$dir/fail"; return 1; }
  local got; got=$(cd "$dir" && go list -m -f '{{.Version}}' "$mod")
  [ "$got" = "$version" ] || { echo "$line brought $mod $got" >"$dir/fail"; return 1; }
  [ "$(goline "$dir")" = 1.25.0 ] || { echo "$line raised the user's go line to $(goline "$dir")" >"$dir/fail"; return 1; }
  for pin in "${pins[@]}"; do
    local have; have=$(cd "$dir" && go list -m -f '{{.Version}}' "${pin%@*}")
    [ "$have" = "${pin#*@}" ] || { echo "$line moved the user's pin ${pin%@*} ${pin#*@} to $have" >"$dir/fail"; return 1; }
  done
  (cd "$dir" && go build "$mod/...") 2>"$dir/err" || { echo "building $mod/... in the user's module: $(cat "$dir/err")" >"$dir/fail"; return 1; }
  echo "$line: $version, go 1.25.0 kept${pins:+, pins kept: ${pins[*]}}" >"$dir/ok"
}
lanes=${RELEASE_CHECK_JOBS:-2}
report() { # report N: print line N's result; fail on a failure
  if [ -f "$tmp/install/$1/fail" ]; then fail "$(cat "$tmp/install/$1/fail")"; fi
  [ -f "$tmp/install/$1/ok" ] || fail "install line $1 ended without a result"
  say "$(cat "$tmp/install/$1/ok")"
}
declare -A pids=()
n=0
for line in "${lines[@]}"; do
  n=$((n + 1))
  while [ ${#pids[@]} -ge "$lanes" ]; do
    wait -n || true
    for k in "${!pids[@]}"; do
      if ! kill -0 "${pids[$k]}" 2>/dev/null; then wait "${pids[$k]}" || true; unset "pids[$k]"; report "$k"; fi
    done
  done
  installline "$n" "$line" &
  pids[$n]=$!
done
for k in "${!pids[@]}"; do wait "${pids[$k]}" || true; report "$k"; done

# --- 2. Every example directory, copied whole. ------------------------------
# Into one user module, each example a directory of it (a package main of
# its own): one go get, tidy, build, vet and test for all of them, so that
# the go command plans, compiles and runs them together.
dir=$tmp/examples
newmod "$dir" example.com/copy
names=()
mods=()
for ex in "$tmp"/repo/examples/*/; do
  name=$(basename "$ex")
  [ -f "$ex/main.go" ] || continue
  names+=("$name")
  mkdir -p "$dir/$name"
  cp -R "$ex"/. "$dir/$name"/
  exmods=()
  while read -r imp; do
    m=$(moduleof "$imp")
    [ "$m" = github.com/geodlq/geodlq/examples ] && fail "examples/$name imports $imp, a package of the examples module"
    [ -n "$m" ] && exmods+=("$m")
  done < <(grep -ho '"github.com/geodlq/geodlq[^"]*"' "$dir/$name"/*.go | tr -d '"' | sort -u)
  [ ${#exmods[@]} -gt 0 ] || fail "examples/$name: no geodlq module found in its imports"
  mods+=("${exmods[@]}")
done
[ ${#names[@]} -gt 0 ] || fail "no example directory found"
mapfile -t mods < <(printf '%s\n' "${mods[@]}" | sort -u)
gets=(); for m in "${mods[@]}"; do gets+=("$m@$version"); done
(cd "$dir" && go get "${gets[@]}" && go mod tidy && go build ./...) >"$dir/log" 2>&1 ||
  fail "the examples copied whole: $(tail -30 "$dir/log")"
# go vet once seen failing with "could not import os (open : no such file
# or directory)": the go command handed vet an empty export-data path for
# a standard package it took from the shared build cache (not reproduced;
# docs/releasing.md). That failure is the toolchain's, not the examples':
# it is reported as such and vet runs again with a build cache of its own,
# whose verdict stands. Any other vet failure fails the run.
if ! (cd "$dir" && go vet ./...) >"$dir/vet.log" 2>&1; then
  if grep -qE 'could not import [^ ]+ \(open : no such file or directory\)' "$dir/vet.log" &&
    ! grep -vE 'could not import [^ ]+ \(open : no such file or directory\)|^#' "$dir/vet.log" | grep -q .; then
    say "WARNING: go vet failed to import a package from the shared build cache (an empty export path, the go command's fault, not the code's):"
    sed 's/^/release-check:     /' "$dir/vet.log"
    say "go version $(go env GOVERSION), GOCACHE=$(go env GOCACHE), GOFLAGS=$GOFLAGS, GOTOOLCHAIN=$GOTOOLCHAIN; vetting again with a private GOCACHE"
    (cd "$dir" && GOCACHE="$tmp/gocache" go vet ./...) >"$dir/vet.log" 2>&1 ||
      fail "the examples copied whole, vetted with a private build cache: $(tail -30 "$dir/vet.log")"
  else
    fail "the examples copied whole, go vet: $(tail -30 "$dir/vet.log")"
  fi
fi
[ "$(goline "$dir")" = 1.25.0 ] || fail "the examples' copy needs go $(goline "$dir")"
say "${#names[@]} examples copied whole: tidy, built, vetted"
# -vet=off: go vet ./... above vetted these packages, test files included.
(cd "$dir" && go test -vet=off -count=1 -json ./... >"$dir/test.json" 2>"$dir/test.err") ||
  fail "the examples' tests: $(grep -h '"Action":"output"' "$dir/test.json" | sed 's/.*"Output":"//; s/"}$//' | tail -40)$(tail -5 "$dir/test.err")"
for name in "${names[@]}"; do
  pkg="\"Package\":\"example.com/copy/$name\""
  grep -q "\"Action\":\"pass\",$pkg,\"Elapsed\"" "$dir/test.json" || grep -q "\"Action\":\"pass\",$pkg" "$dir/test.json" ||
    fail "examples/$name: no passing test run"
  pass=$(grep -c "\"Action\":\"pass\",$pkg,\"Test\":\"[^/\"]*\"" "$dir/test.json" || true)
  skips=$(grep "\"Action\":\"skip\",$pkg,\"Test\"" "$dir/test.json" | sed 's/.*"Test":"\([^"]*\)".*/\1/' | grep -v / || true)
  for t in $skips; do
    grep -F "$pkg,\"Test\":\"$t\"" "$dir/test.json" | grep -q 'unreachable' ||
      fail "examples/$name: $t skipped for another reason than an unreachable server"
  done
  say "examples/$name: $pass tests passed, $(wc -w <<<"$skips") skipped (server unreachable)"
done
say "ok"
