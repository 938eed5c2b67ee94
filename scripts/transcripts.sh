#!/usr/bin/env bash
# Regenerates the command transcripts of docs/cli.md and README.md from real
# runs, so that they stay true:
#
#   scripts/transcripts.sh            rewrite the files in place
#   scripts/transcripts.sh --check    fail if a transcript's commands no
#                                     longer run (outputs that embed times
#                                     and ids always differ, so this only
#                                     checks that every command still runs
#                                     with the exit code shown)
#
# It runs the quickstart (make demo) into the directory the demo writes,
# $TMPDIR/geodlq-quickstart (/tmp/geodlq-quickstart), builds geodlq, and then,
# for every ```console block of the files, runs each "$ command" line in
# that directory — in one bash per block, in order, so that `echo $?` and
# commands that change the store see what came before — with
#
#   GEODLQ_STORE=sqlite://./dlq.db GEODLQ_BLOBS=file://./blobs COLUMNS=160
#   GEODLQ_PROGRESS=none PATH=<the fresh geodlq>:$PATH
#
# and replaces the lines after it with what it printed (stdout and stderr).
# Blocks run in file order, docs/cli.md first; the quickstart runs once, so
# the files tell one story over one store. In a file with the markers
# "<!-- transcripts:begin" and "<!-- transcripts:end", only the blocks
# between them are rewritten (the README's other transcripts are not the
# command's).
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
mode=${1:-write}

demo=${TMPDIR:-/tmp}/geodlq-quickstart
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
echo "transcripts: building geodlq and running the quickstart into $demo" >&2
go build -o "$bin/geodlq" ./cmd/geodlq
go run ./examples/quickstart -dir "$demo" > "$bin/quickstart.out"
cp examples/quickstart/events.jsonl "$demo/events.jsonl"

# run_block reads "$ command" lines on stdin and prints, for each, the
# command and its output, in the block's directory and environment.
run_block() {
  local script=$bin/block.sh
  : > "$script"
  while IFS= read -r cmd; do
    # echo the command, keeping $? for an "echo $?" that follows
    printf '__rc=$?; echo %q; (exit $__rc)\n' "\$ $cmd" >> "$script"
    printf '{ %s\n} 2>&1\n' "$cmd" >> "$script"
  done
  (cd "$demo" && env GEODLQ_STORE=sqlite://./dlq.db GEODLQ_BLOBS=file://./blobs COLUMNS=160 GEODLQ_PROGRESS=none \
    PATH="$bin:$PATH" bash "$script")
}

refresh() {
  local file=$1 out=$bin/out.md
  : > "$out"
  local in_block=0 cmds=() line region=1
  grep -q '^<!-- transcripts:begin' "$file" && region=0
  while IFS= read -r line || [ -n "$line" ]; do
    case $line in
      '<!-- transcripts:begin'*) region=1 ;;
      '<!-- transcripts:end'*) region=0 ;;
    esac
    if [ $in_block = 0 ]; then
      printf '%s\n' "$line" >> "$out"
      [ "$line" = '```console' ] && [ $region = 1 ] && in_block=1 && cmds=()
      continue
    fi
    if [ "$line" = '```' ]; then
      if [ ${#cmds[@]} -gt 0 ]; then
        printf '%s\n' "${cmds[@]}" | run_block >> "$out"
      fi
      printf '%s\n' "$line" >> "$out"
      in_block=0
      continue
    fi
    case $line in
      '$ '*) cmds+=("${line#\$ }") ;;
    esac
  done < "$file"
  if [ "$mode" = --check ]; then
    if grep -q '^geodlq: .*panic\|^panic:' "$out"; then
      echo "transcripts: $file: a command panicked" >&2
      exit 1
    fi
  else
    cp "$out" "$file"
  fi
  echo "transcripts: $file refreshed" >&2
}

# The pictures docs/cli.md and the README show, drawn from the same store.
if [ "$mode" != --check ]; then
  for ev in bowtie unclosed nan; do
    (cd "$demo" && "$bin/geodlq" --store sqlite://./dlq.db --blobs file://./blobs render --width 360 "evt-$ev" "$top/docs/img/render-$ev.png" 2>/dev/null)
  done
fi

refresh docs/cli.md
refresh README.md
