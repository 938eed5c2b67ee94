#!/usr/bin/env bash
# Installs the Debian packages geodlq's build and tests need, when missing.
# Usage: scripts/deps.sh   # C libraries for spatial/geos and spatial/proj (GEOS, PROJ), rsvg-convert for `geodlq render --png`,
#                          # python3 and python3-jsonschema for contrib/python's reader (internal/contracttest runs it),
#                          # npm for the benchmark corpus spatial/geos's engine test checks (scripts/bench-corpus.sh)
#        scripts/deps.sh PKG…  # and these packages too
# (scripts/services.sh installs and starts the integration-test servers.)
# Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail

want=(libgeos-dev libproj-dev proj-data pkg-config gcc librsvg2-bin python3 python3-jsonschema)
# npm: the machine's own Node.js and npm (NodeSource's nodejs package, say)
# serve; Debian's npm package conflicts with them, so it is asked for only
# when no npm is on the PATH.
command -v npm >/dev/null || want+=(npm)
# Extra packages a make target needs (make bench-corpus: python3-shapely).
want+=("$@")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq || true
  $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
