#!/bin/sh
# Regenerates the console's screenshots in docs/img from the browser test
# TestBrowserOperator (the rich corpus: Natural Earth countries, every
# failure kind), at 1440×900 in headless Chromium. With pngquant on the
# PATH (apt-get install pngquant) they are reduced to 256 colours, about
# 100 KB each (about 300 KB otherwise). Needs what make test needs:
# scripts/deps.sh.
# Usage: scripts/screenshots.sh  (or make screenshots)
set -eu
cd "$(dirname "$0")/.."
art=$(mktemp -d)
trap 'rm -rf "$art"' EXIT
GEODLQ_ARTIFACTS="$art" GEODLQ_REQUIRE_SERVICES=1 go test -count=1 -run '^TestBrowserOperator$' ./cmd/geodlq/internal/console/
for pair in op-01-overview:console op-02-record-sudan:console-record op-03-sorted-by-vertices:console-sorted \
	op-04-zoom-to-fault:console-zoom-to-fault op-05-repair-preview:console-repair-preview \
	op-06-shapes-zoomed-in:console-shapes op-07-bulk-dry-run:console-bulk-dry-run; do
	src="$art/TestBrowserOperator/${pair%%:*}.png"
	dst="docs/img/${pair#*:}.png"
	if command -v pngquant >/dev/null 2>&1; then
		pngquant --force --strip --output "$dst" 256 "$src"
	else
		cp "$src" "$dst"
	fi
	echo "$dst $(wc -c <"$dst") bytes"
done
