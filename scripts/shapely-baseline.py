#!/usr/bin/env python3
"""The Python + shapely baseline of geodlq's check-path benchmarks (issue 13).

It does, per event, what a Python port of the design seed does before
dead-lettering: json.loads of the event, shapely.geometry.shape() of its
"geometry", is_valid, and explain_validity when invalid. An event that
json.loads or shape() refuses counts as failed with the exception's text.
Debian's python3-shapely (1.8.5 on bookworm) links the system GEOS, the
same library package spatial uses.

Two modes:

  shapely-baseline.py --passes N CORPUS
      reads every line of CORPUS into memory, then times N passes of the
      work over them (time.perf_counter, nothing else inside the timer) and
      prints one JSON object: {"seconds": ..., "passes": N, "events": ...,
      "invalid": ..., "errors": ...}. spatial/geos's BenchmarkCorpus runs this.

  shapely-baseline.py --verdicts CORPUS
      the whole process a user would run: reads CORPUS line by line and
      writes one JSON verdict per event to standard output, like
      `geodlq check -o jsonl`. scripts/bench-check.sh times it.
"""

import json
import sys
import time

from shapely.geometry import shape
from shapely.validation import explain_validity


def check(line):
    """Returns None for a valid event, else the reason it is invalid."""
    try:
        event = json.loads(line)
        geom = shape(event["geometry"])
    except Exception as exc:  # noqa: BLE001 - a failure is a verdict here
        return "error: %s" % exc
    if geom.is_valid:
        return None
    return explain_validity(geom)


def passes(path, n):
    with open(path, "rb") as f:
        lines = [l for l in f.read().split(b"\n") if l.strip()]
    invalid = errors = 0
    start = time.perf_counter()
    for _ in range(n):
        invalid = errors = 0
        for line in lines:
            reason = check(line)
            if reason is not None:
                invalid += 1
                if reason.startswith("error: "):
                    errors += 1
    seconds = time.perf_counter() - start
    json.dump({"seconds": seconds, "passes": n, "events": len(lines), "invalid": invalid, "errors": errors}, sys.stdout)
    sys.stdout.write("\n")


def verdicts(path):
    out = sys.stdout
    with open(path, "rb") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            reason = check(line)
            v = {"input": "line %d" % i, "ok": reason is None}
            if reason is not None:
                v["reason"] = reason
            out.write(json.dumps(v))
            out.write("\n")


def main(argv):
    if len(argv) == 4 and argv[1] == "--passes":
        passes(argv[3], int(argv[2]))
    elif len(argv) == 3 and argv[1] == "--verdicts":
        verdicts(argv[2])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
