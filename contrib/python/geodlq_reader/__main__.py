"""Command line: python3 -m geodlq_reader (validate|restore|batch) ...

  validate ENVELOPE...            check each file; exit 1 if any is not a valid dlq.v1 envelope
  restore ENVELOPE [-o OUT]       write the original payload, verified, to OUT (default: standard output)
  batch MANIFEST                  for tests: each line of MANIFEST is {"name", "path"}; prints one JSON line
                                  per envelope: {"name", "verdict", "error", "restored", "sha256", "restore_error", "seconds"},
                                  verdict ok | invalid | version | limit; a valid envelope's payload goes to path + ".restored"

Every error is reported in one line (exit status 1), never as a traceback:
running out of memory (ulimit -v, a container's limit) is a LimitError.

Offloaded blobs are read with --blob-dir DIR [--base-uri URI] [--prefix P] (an offload.DirStore).
"""

import argparse
import hashlib
import json
import sys
import time

from . import envelope as dlq


def _fetcher(args):
    if not args.blob_dir:
        return None
    return dlq.BlobDirFetcher(args.blob_dir, base_uri=args.base_uri, prefix=args.prefix)


def _verdict(err):
    if isinstance(err, dlq.VersionError):
        return "version"
    if isinstance(err, dlq.InvalidEnvelope):
        return "invalid"
    if isinstance(err, dlq.LimitError):
        return "limit"
    return "integrity"


def _read_file(path):
    """The file's bytes; a MemoryError becomes a LimitError."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except MemoryError:
        pass
    raise dlq.LimitError("out of memory reading %s" % path)


def main(argv=None):
    """Runs the command; every error, a MemoryError included, ends in a
    one-line message and exit status 1."""
    failed = None
    try:
        return _main(argv)
    except MemoryError:
        failed = "out of memory"
    except RecursionError:
        failed = "the interpreter's recursion limit was reached"
    print("python3 -m geodlq_reader: %s" % failed, file=sys.stderr)
    return 1


def _main(argv):
    p = argparse.ArgumentParser(prog="python3 -m geodlq_reader", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["validate", "restore", "batch"])
    p.add_argument("files", nargs="+")
    p.add_argument("--schema", help="the dlq.v1 JSON Schema (default: $GEODLQ_SCHEMA, else the repository's)")
    p.add_argument("--blob-dir", help="directory of an offload.DirStore holding offloaded blobs")
    p.add_argument("--base-uri", help="the blob store's base URI (default: file://<blob-dir>)")
    p.add_argument("--prefix", default="geodlq", help="the offloader's key prefix (default geodlq)")
    p.add_argument("-o", "--output", help="restore: write the payload here")
    args = p.parse_args(argv)
    reader = dlq.Reader(args.schema)

    if args.command == "validate":
        bad = 0
        for path in args.files:
            try:
                reader.read(_read_file(path))
                print("%s: ok" % path)
            except (dlq.EnvelopeError, OSError) as e:
                bad += 1
                print("%s: %s" % (path, e))
        return 1 if bad else 0

    if args.command == "restore":
        if len(args.files) != 1:
            p.error("restore takes one envelope")
        try:
            payload = reader.read(_read_file(args.files[0])).restore(_fetcher(args))
        except (dlq.EnvelopeError, OSError) as e:
            print("%s: %s" % (args.files[0], e), file=sys.stderr)
            return 1
        if args.output:
            with open(args.output, "wb") as out:
                out.write(payload)
        else:
            sys.stdout.buffer.write(payload)
        return 0

    fetcher = _fetcher(args)
    for manifest in args.files:
        with open(manifest, encoding="utf-8") as lines:
            for line in lines:
                item = json.loads(line)
                start = time.monotonic()
                result = {"name": item["name"], "verdict": "ok", "error": "", "restored": "", "sha256": "",
                          "restore_error": ""}
                try:
                    env = reader.read(_read_file(item["path"]))
                except dlq.EnvelopeError as e:
                    result["verdict"] = _verdict(e)
                    result["error"] = str(e)[:2000]
                else:
                    try:
                        payload = env.restore(fetcher)
                    except (dlq.EnvelopeError, OSError) as e:
                        result["restore_error"] = "%s: %s" % (type(e).__name__, str(e)[:2000])
                    else:
                        result["restored"] = item["path"] + ".restored"
                        with open(result["restored"], "wb") as out:
                            out.write(payload)
                        result["sha256"] = hashlib.sha256(payload).hexdigest()
                result["seconds"] = round(time.monotonic() - start, 4)
                print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
