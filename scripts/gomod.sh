#!/usr/bin/env bash
# Keeps the go.mod files of geodlq's modules tidy.
#
# geodlq is several modules (the core at the root, one per heavy adapter,
# cmd/geodlq, examples); go.work ties them together for development. None of
# their go.mod files has a replace directive, so that each stays installable
# and importable with `go get …@version` once tagged. That means `go mod tidy`
# cannot run in a module on its own while its siblings are unpublished: this
# script runs it with a temporary modfile that replaces every sibling with
# its directory, then drops those replaces again.
#
#   scripts/gomod.sh tidy     rewrite every module's go.mod/go.sum
#   scripts/gomod.sh check    fail if any module is not tidy (CI)
#   scripts/gomod.sh list     print the module directories
#   scripts/gomod.sh go DIR ARGS…
#                             run `go ARGS…` in module DIR the same way
#                             (e.g. `go DIR get pkg@version` to move a
#                             requirement), then drop the replaces again
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
cmd=${1:-check}

mapfile -t dirs < <(go work edit -json | sed -n 's/.*"DiskPath": "\(.*\)".*/\1/p' | sed 's#^\./##; s#^\.$##' | sort)
[ ${#dirs[@]} -gt 0 ] || { echo "gomod: no modules in go.work" >&2; exit 1; }

if [ "$cmd" = list ]; then
  for d in "${dirs[@]}"; do echo "${d:-.}"; done
  exit 0
fi

paths=()
for d in "${dirs[@]}"; do
  paths+=("$(cd "$top/${d:-.}" && go mod edit -json | sed -n 's/^\t\t"Path": "\(.*\)",\{0,1\}$/\1/p' | head -1)")
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ "$cmd" = go ]; then
  [ $# -ge 3 ] || { echo "usage: $0 go DIR SUBCOMMAND [ARGS…]" >&2; exit 2; }
  d=${2%/}; d=${d#./}; [ "$d" = . ] && d=
  sub=($3); shift 3
  if [ "${sub[0]}" = mod ] && [ $# -gt 0 ]; then sub+=("$1"); shift; fi
  found=
  reps=(); drops=()
  for j in "${!dirs[@]}"; do
    if [ "${dirs[$j]}" = "$d" ]; then found=1; continue; fi
    reps+=("-replace=${paths[$j]}=$top/${dirs[$j]:-.}")
    drops+=("-dropreplace=${paths[$j]}")
  done
  [ -n "$found" ] || { echo "gomod: ${d:-.} is not a module of go.work" >&2; exit 2; }
  cp "$top/${d:-.}/go.mod" "$tmp/go.mod"
  [ -f "$top/${d:-.}/go.sum" ] && cp "$top/${d:-.}/go.sum" "$tmp/go.sum" || : > "$tmp/go.sum"
  (cd "$top/${d:-.}" && go mod edit -modfile="$tmp/go.mod" "${reps[@]}" &&
    GOWORK=off GOFLAGS=-mod=mod go "${sub[@]}" -modfile="$tmp/go.mod" "$@")
  (cd "$top/${d:-.}" && go mod edit -modfile="$tmp/go.mod" "${drops[@]}")
  cp "$tmp/go.mod" "$top/${d:-.}/go.mod"
  if [ -s "$tmp/go.sum" ]; then cp "$tmp/go.sum" "$top/${d:-.}/go.sum"; fi
  exit 0
fi
# Each module is tidied in a temporary modfile; GOMOD_JOBS (default 2)
# modules at a time, since each go mod tidy waits on the module cache and
# the file system as much as it computes. Then, in order, each result is
# compared (check) or copied (tidy).
tidyone() { # tidyone I: module I tidied into $tmp/I.mod and $tmp/I.sum
  local i=$1 d=${dirs[$1]:-.} j
  local mf=$tmp/$i.mod
  cp "$top/$d/go.mod" "$mf"
  [ -f "$top/$d/go.sum" ] && cp "$top/$d/go.sum" "$tmp/$i.sum" || : > "$tmp/$i.sum"
  local reps=() drops=()
  for j in "${!dirs[@]}"; do
    [ "$j" = "$i" ] && continue
    reps+=("-replace=${paths[$j]}=$top/${dirs[$j]:-.}")
    drops+=("-dropreplace=${paths[$j]}")
  done
  (cd "$top/$d" && go mod edit -modfile="$mf" "${reps[@]}" &&
    GOWORK=off GOFLAGS=-mod=mod go mod tidy -modfile="$mf" 2>"$tmp/$i.err") || return 1
  (cd "$top/$d" && go mod edit -modfile="$mf" "${drops[@]}")
}
case "$cmd" in tidy | check) ;; *) echo "usage: $0 tidy|check|list|go DIR ARGS…" >&2; exit 2 ;; esac
jobs_max=${GOMOD_JOBS:-2}
for i in "${!dirs[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  { tidyone "$i" && touch "$tmp/$i.ok"; } &
done
wait
bad=0 changed=
for i in "${!dirs[@]}"; do
  d=${dirs[$i]:-.}
  mf=$tmp/$i.mod
  [ -f "$tmp/$i.ok" ] || { echo "gomod: go mod tidy failed in $d:" >&2; cat "$tmp/$i.err" >&2; exit 1; }
  case "$cmd" in
  tidy)
    if ! cmp -s "$mf" "$top/$d/go.mod" || ! cmp -s "$tmp/$i.sum" <(cat "$top/$d/go.sum" 2>/dev/null); then changed=1; fi
    cp "$mf" "$top/$d/go.mod"
    if [ -s "$tmp/$i.sum" ]; then cp "$tmp/$i.sum" "$top/$d/go.sum"; else rm -f "$top/$d/go.sum"; fi
    ;;
  check)
    if ! diff -u "$top/$d/go.mod" "$mf" >"$tmp/$i.diff"; then
      echo "gomod: $d/go.mod is not tidy:" >&2; cat "$tmp/$i.diff" >&2; bad=1
    fi
    if ! diff -q <(cat "$top/$d/go.sum" 2>/dev/null) "$tmp/$i.sum" >/dev/null; then
      echo "gomod: $d/go.sum is not tidy" >&2; bad=1
    fi
    ;;
  *) echo "usage: $0 tidy|check|list|go DIR ARGS…" >&2; exit 2 ;;
  esac
done
[ "$bad" = 0 ] || { echo "gomod: run scripts/gomod.sh tidy" >&2; exit 1; }
# The modules were tidied at once, each against its siblings' go.mod as
# it was: when one changed, a module requiring it may need another pass.
if [ "$cmd" = tidy ] && [ -n "$changed" ]; then
  pass=${GOMOD_PASS:-1}
  [ "$pass" -lt 4 ] || { echo "gomod: still changing after $pass passes" >&2; exit 1; }
  GOMOD_PASS=$((pass + 1)) exec "$0" tidy
fi
[ "$cmd" = check ] && echo "gomod: ${#dirs[@]} modules tidy" >&2
exit 0
