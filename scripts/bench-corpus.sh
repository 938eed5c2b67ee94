#!/usr/bin/env bash
# Generates the check-path benchmark corpus (internal/benchcorpus, issue 13)
# and prints its path. Natural Earth's polygons come from npm world-atlas
# at the version and integrity hash pinned in scripts/benchcorpus/
# (npm ci); nothing is committed. Both the install and the corpus are
# cached under $GEODLQ_CACHE (default ~/.cache/geodlq).
# Usage: scripts/bench-corpus.sh [OUT]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${GEODLQ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/geodlq}
atlas=$cache/world-atlas
version=$(sed -n 's/^const Version = "\(.*\)"$/\1/p' "$root/internal/benchcorpus/benchcorpus.go")
out=${1:-$cache/benchcorpus-$version.jsonl}
mkdir -p "$cache" "$(dirname "$out")"
if ! cmp -s "$root/scripts/benchcorpus/package-lock.json" "$atlas/package-lock.json" ||
   [ ! -f "$atlas/node_modules/world-atlas/countries-10m.json" ]; then
  command -v npm >/dev/null || { echo "bench-corpus: npm is needed (apt-get install npm)" >&2; exit 1; }
  rm -rf "$atlas" && mkdir -p "$atlas"
  cp "$root/scripts/benchcorpus/package.json" "$root/scripts/benchcorpus/package-lock.json" "$atlas/"
  (cd "$atlas" && npm ci --no-audit --no-fund --ignore-scripts >&2)
fi
if [ ! -s "$out" ]; then
  (cd "$root" && go run ./internal/benchcorpus/cmd/benchcorpus -atlas "$atlas/node_modules/world-atlas" -o "$out")
fi
echo "$out"
