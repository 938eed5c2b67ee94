#!/usr/bin/env bash
# Cuts a release of geodlq's modules (docs/releasing.md says how to check
# and publish one).
#
#   scripts/release.sh VERSION
#
# VERSION is a semantic version (v0.1.0, v0.2.0-rc.1). Every module of
# go.work requires its siblings at VERSION in one commit, "release
# VERSION", on the current branch; the script then prints the tags to
# create on that commit and push, one per published module: VERSION for
# the root module, DIR/VERSION for the module in DIR (the form the go
# command looks for). internal/contracttest, internal/enginebench and
# warehouse/enginetest hold tests and benchmarks only and are not published. Nothing is tagged or pushed here.
# The work tree must have no uncommitted changes. make release-check runs
# the script in a scratch clone (scripts/release-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -eq 1 ] || { echo "usage: $0 VERSION" >&2; exit 2; }
version=$1
if ! [[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release: $version is not a semantic version like v0.1.0" >&2; exit 2
fi
if [ "${BASH_REMATCH[1]}" -gt 1 ]; then
  echo "release: $version: a major version above 1 needs /v${BASH_REMATCH[1]} module paths first" >&2; exit 2
fi
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "release: the work tree has uncommitted changes" >&2; exit 1
fi

# Modules that hold only tests: released with their siblings' versions
# updated, but never tagged.
unpublished=" internal/contracttest internal/enginebench warehouse/enginetest "

mapfile -t dirs < <(scripts/gomod.sh list)
tags=()
for d in "${dirs[@]}"; do
  reqs=$(cd "$d" && go mod edit -json | sed -n 's/^\t\t\t"Path": "\(github.com\/geodlq\/geodlq[^"]*\)",\{0,1\}$/\1/p')
  args=()
  for p in $reqs; do args+=("-require=$p@$version"); done
  if [ ${#args[@]} -gt 0 ]; then (cd "$d" && go mod edit "${args[@]}"); fi
  case "$unpublished" in *" $d "*) continue ;; esac
  if [ "$d" = . ]; then tags+=("$version"); else tags+=("$d/$version"); fi
done

scripts/gomod.sh check >/dev/null || { echo "release: go.mod files are not tidy after the change" >&2; exit 1; }
if git diff --quiet; then
  echo "release: every module already requires its siblings at $version" >&2
else
  git commit -q -a -m "release $version: every module requires its siblings at $version"
fi
echo "# on $(git rev-parse --short HEAD): git tag each, then git push origin main and the tags"
printf '%s\n' "${tags[@]}"
