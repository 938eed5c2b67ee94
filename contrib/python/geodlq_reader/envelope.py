"""Reading, validating and restoring dlq.v1 envelopes."""

import base64
import hashlib
import json
import os
import re
import stat
import urllib.parse
from pathlib import Path

import jsonschema
from jsonschema import validators

from . import _jsontext

SCHEMA_VERSION = "dlq.v1"

# Where the schema lives in the geodlq repository, relative to this file.
_REPO_SCHEMA = Path(__file__).resolve().parents[3] / "envelope" / "dlq.v1.schema.json"

MISSING_GEOMETRY = b'{"type":"GeometryCollection","geometries":[]}'


class EnvelopeError(Exception):
    """Base class of the reader's errors."""


class VersionError(EnvelopeError):
    """The document is a JSON object whose schema_version this reader does
    not read (missing, or not "dlq.v1"). Go: *envelope.VersionError."""

    def __init__(self, version):
        self.version = version
        super().__init__("unsupported schema version %r, want %r" % (version, SCHEMA_VERSION)
                         if version is not None else "schema_version missing, want %r" % SCHEMA_VERSION)


class InvalidEnvelope(EnvelopeError):
    """The document breaks the dlq.v1 contract. Go: *envelope.ValidationError.
    violations lists what was found."""

    def __init__(self, violations):
        self.violations = list(violations)
        super().__init__("invalid envelope: " + "; ".join(self.violations))


class IntegrityError(EnvelopeError):
    """Restored bytes, or a fetched blob, do not match their recorded size
    and SHA-256. Go: *offload.IntegrityError."""


def default_schema_path():
    return Path(os.environ.get("GEODLQ_SCHEMA") or _REPO_SCHEMA)


def _pattern(validator, pattern, instance, schema):
    # JSON Schema patterns are ECMA 262 regular expressions, where $ (with
    # no multiline flag) matches only at the end of the input; in Python's
    # re it also matches before a final newline. The format's patterns use
    # only syntax the two (and Go's RE2) share.
    if not validator.is_type(instance, "string"):
        return
    regex = _patterns.get(pattern)
    if regex is None:
        regex = _patterns[pattern] = re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith("\\$") else pattern)
    if not regex.search(instance):
        yield jsonschema.ValidationError("%r does not match %r" % (instance, pattern))


_patterns = {}

# The format writes integers as integers: 1.0 and 1e2 are numbers, not
# integers (JSON Schema alone would take them by value).
_type_checker = validators.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda checker, x: isinstance(x, int) and not isinstance(x, bool))

_Validator = validators.extend(validators.Draft202012Validator, validators={"pattern": _pattern},
                               type_checker=_type_checker)


class Reader:
    """Validates dlq.v1 envelopes against the schema and the byte rules.

    schema_path defaults to $GEODLQ_SCHEMA, else the schema in the geodlq
    repository this package sits in."""

    def __init__(self, schema_path=None):
        with open(schema_path or default_schema_path(), "rb") as f:
            self.schema = json.load(f)
        _Validator.check_schema(self.schema)
        self._validator = _Validator(self.schema)

    def read(self, data):
        """Parses and validates an envelope (bytes). Returns an Envelope, or
        raises VersionError or InvalidEnvelope."""
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidEnvelope(["the envelope is not UTF-8 JSON text: %s" % e]) from None
        try:
            doc, duplicates = _jsontext.parse(text)
        except _jsontext.JSONTextError as e:
            raise InvalidEnvelope(["not JSON text: %s" % e]) from None
        if not isinstance(doc, dict):
            raise InvalidEnvelope(["not a JSON object"])
        version = doc.get("schema_version")
        if version is None and "schema_version" not in doc:
            raise VersionError(None)
        if not isinstance(version, str):
            raise InvalidEnvelope(["schema_version is not a string"])
        if version != SCHEMA_VERSION:
            raise VersionError(version)
        if duplicates:
            raise InvalidEnvelope(duplicates)

        errors = sorted(self._validator.iter_errors(_plain(doc)), key=lambda e: list(e.absolute_path))
        if errors:
            raise InvalidEnvelope("%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "(envelope)", e.message)
                                  for e in errors)
        env = Envelope(doc)
        env._check_bytes()
        return env


def _plain(doc):
    """The document with its verbatim members replaced by values of their
    type (shallow copies of the two objects that hold them)."""
    doc = dict(doc)
    for obj, name in ((doc, "raw_payload"), (doc.get("geometry"), "inline")):
        if isinstance(obj, dict) and isinstance(obj.get(name), _jsontext.Verbatim):
            if obj is not doc:
                obj = doc["geometry"] = dict(obj)
            obj[name] = obj[name].placeholder()
    return doc


def _bytes_of(value, encoding, field):
    """The bytes a verbatim value carries in the named encoding."""
    if encoding in (None, "json"):
        return value.text.encode("utf-8")
    if encoding == "string":
        return value.string.encode("utf-8")
    try:
        return base64.b64decode(value.string, validate=True)
    except ValueError as e:
        raise InvalidEnvelope(["%s: bad base64: %s" % (field, e)]) from None


class Envelope:
    """A valid dlq.v1 envelope. doc is the parsed document; raw_payload and
    geometry["inline"] are _jsontext.Verbatim values (use the properties
    below for their bytes)."""

    def __init__(self, doc):
        self.doc = doc

    def __getitem__(self, name):
        return self.doc[name]

    def get(self, name, default=None):
        return self.doc.get(name, default)

    @property
    def raw_payload(self):
        """The persisted payload's bytes, or None when it is offloaded."""
        v = self.doc.get("raw_payload")
        return None if v is None else _bytes_of(v, self.doc.get("raw_payload_encoding"), "raw_payload")

    @property
    def inline_geometry(self):
        """The geometry's exact bytes when inline, else None."""
        g = self.doc["geometry"]
        v = g.get("inline")
        return None if v is None else _bytes_of(v, g.get("inline_encoding"), "geometry.inline")

    def _check_bytes(self):
        # The rules no JSON Schema can state: lengths and offsets of the
        # verbatim values.
        g = self.doc["geometry"]
        problems = []
        inline = self.inline_geometry
        if inline is not None and len(inline) != g["byte_size"]:
            problems.append("geometry.byte_size is %d but inline holds %d bytes" % (g["byte_size"], len(inline)))
        raw = self.raw_payload
        size = self.doc["payload_size"]
        if raw is not None:
            want = size
            if "offload_uri" in g:
                want = size - g["byte_size"] + len(_ref(g["offload_uri"]))
            if len(raw) != want:
                problems.append("raw_payload holds %d bytes; payload_size says %d" % (len(raw), want))
        if g["payload_offset"] > size:
            problems.append("geometry.payload_offset %d is beyond payload_size %d" % (g["payload_offset"], size))
        if problems:
            raise InvalidEnvelope(problems)

    def restore(self, fetcher=None):
        """Returns the original payload, byte for byte, verified against
        payload_size and payload_sha256 (IntegrityError otherwise). fetcher
        (a BlobDirFetcher) reads offloaded blobs; it may be None when
        nothing is offloaded."""
        d, g = self.doc, self.doc["geometry"]
        size, digest = d["payload_size"], d["payload_sha256"]
        if "raw_payload_offload_uri" in d:
            if fetcher is None:
                raise EnvelopeError("the raw payload is offloaded and no fetcher was given")
            out = fetcher.fetch(d["raw_payload_offload_uri"], size, digest)
        elif "offload_uri" in g:
            raw = self.raw_payload
            ref = _ref(g["offload_uri"])
            off = g["payload_offset"]
            if off < 0 or raw[off:off + len(ref)] != ref:
                raise IntegrityError("raw_payload does not hold the geometry's $ref at payload_offset %d" % off)
            if len(raw) - len(ref) + g["byte_size"] != size:
                raise IntegrityError("raw_payload, byte_size and payload_size disagree")
            if fetcher is None:
                raise EnvelopeError("the geometry is offloaded and no fetcher was given")
            geom = fetcher.fetch(g["offload_uri"], g["byte_size"], g["content_sha256"])
            out = raw[:off] + geom + raw[off + len(ref):]
        else:
            out = self.raw_payload
        got = hashlib.sha256(out).hexdigest()
        if len(out) != size or got != digest:
            raise IntegrityError("restored payload has %d bytes and SHA-256 %s; the envelope records %d and %s"
                                 % (len(out), got, size, digest))
        return out


def _ref(uri):
    return b'{"$ref":"' + uri.encode("utf-8") + b'"}'


_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_SAFE = re.compile(r"[!-~]*\Z")


class BlobDirFetcher:
    """Reads offloaded blobs from a local directory written by Go's
    offload.DirStore (through an offload.Offloader), verifying each.

    URIs are untrusted input: as Go's Offloader.KeyFor, fetch accepts only
    <base_uri>/<prefix>/<64 lower-case hex>.(geojson|json), byte for byte,
    whose hash is the one expected, and reads a regular file (no symbolic
    link as its last component) of exactly the expected size."""

    def __init__(self, directory, base_uri=None, prefix="geodlq", max_size=1 << 30):
        self.directory = os.path.abspath(directory)
        self.base_uri = (base_uri or "file://" + urllib.parse.quote(self.directory)).rstrip("/")
        self.prefix = prefix
        self.max_size = max_size

    def key_for(self, uri):
        rest = uri[len(self.base_uri) + 1:] if uri.startswith(self.base_uri + "/") else None
        if rest is None:
            raise IntegrityError("offload URI %r is not under %s" % (uri, self.base_uri))
        if not _SAFE.match(rest) or "%" in rest or "?" in rest or "#" in rest or "\\" in rest:
            raise IntegrityError("offload URI %r has a forbidden character" % uri)
        if not rest.startswith(self.prefix + "/"):
            raise IntegrityError("offload URI %r is not under the prefix %s" % (uri, self.prefix))
        name = rest[len(self.prefix) + 1:]
        digest, _, ext = name.partition(".")
        if not _HEX64.match(digest) or ext not in ("geojson", "json"):
            raise IntegrityError("offload URI %r does not name <sha256>.geojson or <sha256>.json" % uri)
        return rest

    def fetch(self, uri, size, sha256):
        key = self.key_for(uri)
        if not key.split("/")[-1].startswith(sha256 + "."):
            raise IntegrityError("offload URI %r names another hash than %s" % (uri, sha256))
        if size < 0 or size > self.max_size:
            raise IntegrityError("blob size %d outside [0, %d]" % (size, self.max_size))
        path = os.path.join(self.directory, *key.split("/"))
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise IntegrityError("blob %s is not a regular file" % path)
            data = f.read(size + 1)
        got = hashlib.sha256(data).hexdigest()
        if len(data) != size or got != sha256:
            raise IntegrityError("blob %s has %d bytes and SHA-256 %s; want %d and %s" % (uri, len(data), got, size, sha256))
        return data
