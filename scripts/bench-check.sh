#!/usr/bin/env bash
# The whole-process comparison of issue 13 (docs/benchmarks.md): `geodlq
# check -o jsonl` over the benchmark corpus (scripts/bench-corpus.sh), on
# every core and with --jobs 1, against the Python + shapely baseline run
# as a process of its own (scripts/shapely-baseline.py --verdicts), each
# timed by GNU time: wall seconds and peak RSS. The three take turns,
# ROUNDS times (default 3), so that a shared machine's load falls on all
# of them alike. Prints one line per run:
#   <what> <round> <seconds> s <peak RSS> KiB
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
corpus=$("$root/scripts/bench-corpus.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root/cmd/geodlq" && go build -o "$work/geodlq" .)
py=${GEODLQ_PYTHON:-/usr/bin/python3}
for round in $(seq "${ROUNDS:-3}"); do
  for what in geodlq geodlq-jobs1 python; do
    case $what in
      geodlq) cmd=("$work/geodlq" check -o jsonl "$corpus") ;;
      geodlq-jobs1) cmd=("$work/geodlq" check -o jsonl --jobs 1 "$corpus") ;;
      python) cmd=("$py" "$root/scripts/shapely-baseline.py" --verdicts "$corpus") ;;
    esac
    # Exit code 1 is expected: the corpus holds invalid events.
    /usr/bin/time -o "$work/time" -f "%e %M" "${cmd[@]}" >"$work/out" || [ $? -eq 1 ]
    # GNU time puts "Command exited with non-zero status 1" first.
    read -r secs rss < <(tail -n 1 "$work/time")
    echo "$what $round $secs s $rss KiB ($(wc -l <"$work/out") verdicts)"
  done
done
