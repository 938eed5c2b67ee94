"""Reading, validating and restoring dlq.v1 envelopes."""

import base64
import binascii
import errno
import hashlib
import itertools
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


class LimitError(EnvelopeError):
    """Reading or restoring needed more than a limit allows: the memory the
    process may have (a MemoryError, as under ulimit -v or a container's
    limit), or the interpreter's recursion limit. Nothing was read; the
    envelope may be valid. Reading takes two to three times the envelope's
    size (see the package README)."""


class BlobNotFound(EnvelopeError):
    """No blob is where an offload URI points. Go: offload.ErrNotFound."""


class NotRegular(BlobNotFound):
    """Something other than a regular file (a symbolic link, a FIFO, a
    directory) stands at a blob's key. Go: offload.ErrNotRegular."""


class OutsideStore(BlobNotFound):
    """A blob's path leads out of the blob directory through a symbolic
    link. Go: offload.ErrOutsideStore."""


def default_schema_path():
    return Path(os.environ.get("GEODLQ_SCHEMA") or _REPO_SCHEMA)


# The schema's patterns that repeat a group without bound, each with a test
# of the same strings whose memory does not grow with the string: Python's
# re keeps state for every repetition of a group until a match ends (a
# 20 MB base64 string costs 600 MB).
_B64_BODY = re.compile(r"[A-Za-z0-9+/]*\Z")
_B64_LAST = re.compile(r"(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)\Z")


def _base64_shape(s):
    """^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$:
    a multiple of four characters, all of the alphabet but the last four,
    which may end in padding."""
    n = len(s)
    return n == 0 or n % 4 == 0 and _B64_LAST.match(s, n - 4) is not None and _B64_BODY.match(s, 0, n - 4) is not None


_BOUNDED_PATTERNS = {
    "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$": _base64_shape,
}

try:
    from re import _constants as _sre_constants, _parser as _sre_parse
except ImportError:  # Python < 3.11
    import sre_constants as _sre_constants
    import sre_parse as _sre_parse


def _repeats_group_unbounded(pattern):
    """Reports whether pattern repeats more than one character without a
    bound (X* or X+ where X is a group, not a character or a class): each
    repetition costs memory in Python's re."""
    repeats = {_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT}

    def walk(sub):
        for op, av in sub:
            if op in repeats and av[1] == _sre_constants.MAXREPEAT:
                body = av[2]
                if not (len(body) == 1 and body.getwidth() == (1, 1) and body[0][0] != _sre_constants.SUBPATTERN):
                    return True
            for a in av if isinstance(av, (list, tuple)) else (av,):
                if isinstance(a, _sre_parse.SubPattern) and walk(a):
                    return True
                if isinstance(a, (list, tuple)) and any(isinstance(x, _sre_parse.SubPattern) and walk(x) for x in a):
                    return True
        return False

    return walk(_sre_parse.parse(pattern))


def _check_patterns(schema):
    """Raises ValueError for a pattern of the schema whose matching would
    cost memory per character and that the reader has no bounded test for."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            p = node.get("pattern")
            if isinstance(p, str) and p not in _BOUNDED_PATTERNS and _repeats_group_unbounded(p):
                raise ValueError("schema pattern %r repeats a group without bound, which costs memory per "
                                 "character in Python's re; the reader has no bounded test for it" % p)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _pattern(validator, pattern, instance, schema):
    # JSON Schema patterns are ECMA 262 regular expressions, where $ (with
    # no multiline flag) matches only at the end of the input; in Python's
    # re it also matches before a final newline. The format's patterns use
    # only syntax the two (and Go's RE2) share.
    if not validator.is_type(instance, "string"):
        return
    test = _patterns.get(pattern)
    if test is None:
        test = _BOUNDED_PATTERNS.get(pattern)
        if test is None:
            test = re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith("\\$") else pattern).search
        test = _patterns[pattern] = test
    if not test(instance):
        yield jsonschema.ValidationError("%s does not match %r" % (_short(instance), pattern))


_patterns = {}

_short = _jsontext.short

# jsonschema's own messages for these keywords hold repr(instance): a
# document's 20 MB string would be copied (and its escapes expanded) into
# every message. Long strings get the same verdicts with short messages.
_LONG = 256
_draft = validators.Draft202012Validator.VALIDATORS


def _bounded_type(validator, types, instance, schema):
    if not (isinstance(instance, str) and len(instance) > _LONG):
        yield from _draft["type"](validator, types, instance, schema)
        return
    types = [types] if isinstance(types, str) else types
    if "string" not in types:
        yield jsonschema.ValidationError("%s is not of type %s" % (_short(instance), ", ".join(map(repr, types))))


def _bounded_enum(validator, enums, instance, schema):
    if not (isinstance(instance, str) and len(instance) > _LONG):
        yield from _draft["enum"](validator, enums, instance, schema)
    elif not any(isinstance(e, str) and e == instance for e in enums):
        yield jsonschema.ValidationError("%s is not one of %r" % (_short(instance), enums))


def _bounded_const(validator, const, instance, schema):
    if not (isinstance(instance, str) and len(instance) > _LONG):
        yield from _draft["const"](validator, const, instance, schema)
    elif not (isinstance(const, str) and const == instance):
        yield jsonschema.ValidationError("%r was expected" % (const,))


def _bounded_max_length(validator, m, instance, schema):
    if isinstance(instance, str) and len(instance) > m:
        yield jsonschema.ValidationError("%s is too long" % _short(instance))


def _bounded_min_length(validator, m, instance, schema):
    if isinstance(instance, str) and len(instance) < m:
        yield jsonschema.ValidationError("%s is too short" % _short(instance))


# The format writes integers as integers: 1.0 and 1e2 are numbers, not
# integers (JSON Schema alone would take them by value).
_type_checker = validators.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda checker, x: isinstance(x, int) and not isinstance(x, bool))

_Validator = validators.extend(validators.Draft202012Validator, validators={
    "pattern": _pattern, "type": _bounded_type, "enum": _bounded_enum, "const": _bounded_const,
    "maxLength": _bounded_max_length, "minLength": _bounded_min_length}, type_checker=_type_checker)

# MAX_VIOLATIONS is the most schema violations reported for one envelope.
MAX_VIOLATIONS = 50


class Reader:
    """Validates dlq.v1 envelopes against the schema and the byte rules.

    schema_path defaults to $GEODLQ_SCHEMA, else the schema in the geodlq
    repository this package sits in.

    Reading takes memory linear in the envelope's size: the bytes given,
    one byte of text per byte, and the decoded strings of the members the
    schema constrains (a string-encoded raw_payload is decoded once more);
    nothing is built for the values of a payload or a geometry. A
    MemoryError or RecursionError on the way becomes a LimitError."""

    def __init__(self, schema_path=None):
        with open(schema_path or default_schema_path(), "rb") as f:
            self.schema = json.load(f)
        _Validator.check_schema(self.schema)
        _check_patterns(self.schema)
        self._validator = _Validator(self.schema)
        self._members = _members_of(self.schema)

    def read(self, data):
        """Parses and validates an envelope (bytes). Returns an Envelope, or
        raises VersionError, InvalidEnvelope or LimitError."""
        limit = None
        try:
            return self._read(bytes(data))
        except MemoryError:
            limit = "out of memory reading an envelope of %d bytes" % len(data)
        except RecursionError:
            limit = "the interpreter's recursion limit was reached reading the envelope"
        # Raised here, once the frames of the failed read are released.
        raise LimitError(limit)

    def _read(self, data):
        try:
            _jsontext.check_utf8(data)
        except _jsontext.JSONTextError as e:
            raise InvalidEnvelope(["the envelope is not UTF-8 JSON text: %s" % e]) from None
        try:
            doc, duplicates = _jsontext.parse(data, self._members)
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
            raise VersionError(version if len(version) <= _LONG else version[:_LONG] + "...")
        if duplicates:
            raise InvalidEnvelope(duplicates)

        errors = sorted(itertools.islice(self._validator.iter_errors(_plain(doc)), MAX_VIOLATIONS),
                        key=lambda e: [str(p) for p in e.absolute_path])
        if errors:
            raise InvalidEnvelope("%s: %s" % ("/".join(_path_part(p) for p in e.absolute_path) or "(envelope)", e.message)
                                  for e in errors)
        env = Envelope(doc)
        env._check_bytes()
        return env


def _resolve(schema, node):
    """node with its local $ref followed (None for any other $ref)."""
    for _ in range(32):
        ref = node.get("$ref") if isinstance(node, dict) else None
        if ref is None:
            return node
        if not ref.startswith("#/"):
            return None
        node = schema
        for part in ref[2:].split("/"):
            node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
    return None


def _names(node, names):
    """Adds the member names node (and its applicators) defines or
    requires to names; False if node constrains other members' values."""
    if not isinstance(node, dict):
        return True
    if any(k in node for k in ("additionalProperties", "patternProperties", "unevaluatedProperties",
                               "dependentSchemas", "dependentRequired", "minProperties", "maxProperties")):
        return False
    names.update(node.get("properties", {}))
    names.update(node.get("required", []))
    for k in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(k, []):
            if not _names(sub, names):
                return False
    return all(_names(node.get(k), names) for k in ("if", "then", "else", "not"))


def _members_of(schema):
    """What the schema says of the members of each of the envelope's
    objects (see _jsontext.parse): the names it defines, and the pattern
    its propertyNames sets, when that is all it says of other members."""
    out = {}
    for path in _jsontext.ENVELOPE_OBJECTS:
        node = schema
        for name in path:
            node = _resolve(schema, node)
            node = node.get("properties", {}).get(name) if isinstance(node, dict) else None
        node = _resolve(schema, node)
        if not isinstance(node, dict) or "$ref" in node:
            continue
        names = set()
        if not _names(node, names):
            continue
        name_ok = None
        pn = _resolve(schema, node.get("propertyNames"))
        if pn is None and "propertyNames" not in node:
            name_ok = lambda name: True  # noqa: E731 (any name)
        elif isinstance(pn, dict) and set(pn) <= {"pattern", "type", "description"} and "pattern" in pn:
            test = _BOUNDED_PATTERNS.get(pn["pattern"])
            if test is None:
                p = pn["pattern"]
                test = re.compile(p[:-1] + r"\Z" if p.endswith("$") and not p.endswith("\\$") else p).search
            name_ok = test
        out[path] = _jsontext.Members(names, name_ok)
    return out


def _path_part(p):
    s = str(p)
    return s if len(s) <= 80 else s[:80] + "..."


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
        return value.data
    if encoding == "string":
        return value.string.encode("utf-8")
    try:
        try:
            # Straight from the str: b64decode would copy it to bytes first.
            return binascii.a2b_base64(value.string, strict_mode=True)
        except TypeError:  # Python < 3.11: no strict_mode
            return base64.b64decode(value.string, validate=True)
    except ValueError as e:
        raise InvalidEnvelope(["%s: bad base64: %s" % (field, e)]) from None


def _len_of(value, encoding):
    """len(_bytes_of(value, encoding, ...)) without making the bytes; the
    schema has checked a base64 value's shape."""
    if encoding in (None, "json"):
        return len(value)
    if encoding == "string":
        return _jsontext.utf8_len(value.string)
    s = value.string
    return len(s) // 4 * 3 - (len(s) - len(s.rstrip("=")))


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
        d, g = self.doc, self.doc["geometry"]
        problems = []
        inline = g.get("inline")
        if inline is not None:
            n = _len_of(inline, g.get("inline_encoding"))
            if n != g["byte_size"]:
                problems.append("geometry.byte_size is %d but inline holds %d bytes" % (g["byte_size"], n))
        raw = d.get("raw_payload")
        size = d["payload_size"]
        if raw is not None:
            want = size
            if "offload_uri" in g:
                want = size - g["byte_size"] + len(_ref(g["offload_uri"]))
            n = _len_of(raw, d.get("raw_payload_encoding"))
            if n != want:
                problems.append("raw_payload holds %d bytes; payload_size says %d" % (n, want))
        if g["payload_offset"] > size:
            problems.append("geometry.payload_offset %d is beyond payload_size %d" % (g["payload_offset"], size))
        if problems:
            raise InvalidEnvelope(problems)

    def restore(self, fetcher=None):
        """Returns the original payload, byte for byte, verified against
        payload_size and payload_sha256 (IntegrityError otherwise). fetcher
        (a BlobDirFetcher) reads offloaded blobs; it may be None when
        nothing is offloaded. A MemoryError or RecursionError becomes a
        LimitError."""
        limit = None
        try:
            return self._restore(fetcher)
        except MemoryError:
            limit = "out of memory restoring a payload of %d bytes" % self.doc["payload_size"]
        except RecursionError:
            limit = "the interpreter's recursion limit was reached restoring the payload"
        raise LimitError(limit)

    def _restore(self, fetcher):
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
            out = b"".join((memoryview(raw)[:off], geom, memoryview(raw)[off + len(ref):]))
        else:
            out = self.raw_payload
        got = hashlib.sha256(out).hexdigest()
        if len(out) != size or got != digest:
            raise IntegrityError("restored payload has %d bytes and SHA-256 %s; the envelope records %d and %s"
                                 % (len(out), got, size, digest))
        return out


def _ref(uri):
    return b'{"$ref":"' + uri.encode("utf-8") + b'"}'


class BlobDirFetcher:
    """Reads offloaded blobs from a local directory written by Go's
    offload.DirStore (through an offload.Offloader), verifying each.

    URIs are untrusted input: as Go's Offloader.Resolve, fetch accepts only
    <base_uri>/<prefix>/<64 lower-case hex>.(geojson|json), byte for byte,
    whose hash is the one expected, and the same name under another
    well-formed file:// base (a blob directory copied or moved since the
    envelope was written): that one is read from this directory, under
    <prefix>/<name>, never from the path the URI names, and verified by
    hash like any other. The file is found as DirStore finds it
    through Go's os.Root: a directory on the way (the prefix's, or any
    below the blob directory) may be a symbolic link that resolves inside
    the blob directory by a relative path; one that leads out of it (an
    absolute target, too many "..", more than 8 links) is refused with
    OutsideStore. The blob itself must be a regular file (NotRegular for a
    symbolic link, FIFO or directory, opened without blocking) of exactly
    the expected size, checked before anything is read; BlobNotFound when
    nothing is there. It needs os.open with dir_fd (POSIX); elsewhere any
    symbolic link on the way is refused."""

    def __init__(self, directory, base_uri=None, prefix="geodlq", max_size=1 << 30):
        self.directory = os.path.abspath(directory)
        self.base_uri = (base_uri or "file://" + urllib.parse.quote(self.directory)).rstrip("/")
        self.prefix = prefix
        self.max_size = max_size

    def key_for(self, uri):
        rest = uri[len(self.base_uri) + 1:] if uri.startswith(self.base_uri + "/") else None
        if rest is None:
            moved = self._moved_key(uri)
            if moved is not None:
                return moved
            raise IntegrityError("offload URI %r is not under %s" % (uri, self.base_uri))
        if not _SAFE.match(rest) or "%" in rest or "?" in rest or "#" in rest or "\\" in rest:
            raise IntegrityError("offload URI %r has a forbidden character" % uri)
        if not rest.startswith(self.prefix + "/"):
            raise IntegrityError("offload URI %r is not under the prefix %s" % (uri, self.prefix))
        name = rest[len(self.prefix) + 1:]
        digest, _, ext = name.partition(".")
        if not _HEX64.match(digest) or ext not in ("geojson", "json"):
            raise IntegrityError("offload URI %r does not name <sha256>.geojson or <sha256>.json" % uri)
        if any(p in ("", ".", "..") for p in rest.split("/")):
            raise IntegrityError("offload URI %r has an empty, '.' or '..' path segment" % uri)
        return rest

    def _moved_key(self, uri):
        """The key of a file:// URI under another base whose last two
        segments are <prefix>/<64 lower-case hex>.(geojson|json), as Go's
        Offloader.Resolve reads it; None for anything else."""
        if len(uri) > 2048 or not uri.startswith("file://"):
            return None
        name = uri[uri.rfind("/") + 1:]
        tail = "/" + self.prefix + "/" + name
        if not uri.endswith(tail) or len(uri) == len(tail):
            return None
        if not _SAFE.match(name) or any(c in name for c in "%?#\\"):
            return None
        digest, _, ext = name.partition(".")
        if not _HEX64.match(digest) or ext not in ("geojson", "json"):
            return None
        if not _good_base(uri[:-len(tail)]):
            return None
        return self.prefix + "/" + name

    def fetch(self, uri, size, sha256):
        key = self.key_for(uri)
        if not key.split("/")[-1].startswith(sha256 + "."):
            raise IntegrityError("offload URI %r names another hash than %s" % (uri, sha256))
        if size < 0 or size > self.max_size:
            raise IntegrityError("blob size %d outside [0, %d]" % (size, self.max_size))
        fd = _open_blob(self.directory, key)
        with os.fdopen(fd, "rb", buffering=0) as f:
            got_size = os.fstat(f.fileno()).st_size
            if got_size != size:
                raise IntegrityError("blob %s has %d bytes; want %d" % (uri, got_size, size))
            data = f.read(size + 1)
        got = hashlib.sha256(data).hexdigest()
        if len(data) != size or got != sha256:
            raise IntegrityError("blob %s has %d bytes and SHA-256 %s; want %d and %s" % (uri, len(data), got, size, sha256))
        return data


def _good_base(base):
    """Go's offload checkBaseURI: scheme "://" location, printable ASCII
    without '?', '#', '\\' or space, percent escapes but of '.', '/', '\\'
    and NUL, no "//", "." or ".." segment."""
    scheme, sep, rest = base.partition("://")
    if not sep or not _SCHEME.match(scheme) or (rest == "" and scheme != "file"):
        return False
    i = 0
    while i < len(rest):
        c = rest[i]
        if c == "%":
            esc = rest[i + 1:i + 3]
            if len(esc) < 2 or not all(h in "0123456789abcdefABCDEF" for h in esc) or esc.lower() in ("2e", "2f", "5c", "00"):
                return False
            i += 3
            continue
        if c <= " " or c >= "\x7f" or c in "?#\\":
            return False
        i += 1
    return "//" not in rest and not any(seg in (".", "..") for seg in rest.split("/"))


_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*\Z")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_SAFE = re.compile(r"[!-~]*\Z")

# As Go's os.Root: at most 8 symbolic links per path, and a bound on the
# steps and restarts a path of ".." may cause.
_MAX_SYMLINKS = 8
_MAX_STEPS = 255
_MAX_RESTARTS = 8
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _split_link(target, prefix, suffix):
    """The path components of a symbolic link's target spliced between
    prefix and suffix, as Go's os.splitPathInRoot: "." dropped but at the
    end, an absolute target refused."""
    if target.startswith("/"):
        raise OutsideStore("a symbolic link on the way points to the absolute path %r" % target)
    if target == "":
        raise BlobNotFound("a symbolic link on the way is empty")
    parts = list(prefix)
    comps = [c for c in target.split("/") if c != ""]
    for k, c in enumerate(comps):
        if c != "." or (k == len(comps) - 1 and not suffix):
            parts.append(c)
    return parts + list(suffix)


def _open_blob(directory, key):
    """Opens the regular file at key under directory for reading, as Go's
    DirStore.open through os.Root. Returns a file descriptor."""
    if os.open not in os.supports_dir_fd or os.stat not in os.supports_dir_fd:
        return _open_blob_no_dir_fd(directory, key)
    try:
        root = os.open(directory, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except FileNotFoundError:
        raise BlobNotFound("blob directory %s does not exist" % directory) from None
    dirfd = root
    try:
        parts = key.split("/")
        i = steps = restarts = symlinks = 0
        while True:
            steps += 1
            if steps > _MAX_STEPS and restarts > _MAX_RESTARTS:
                raise OutsideStore("blob %s: the path takes too many steps" % key)
            if parts[i] == "..":
                restarts += 1
                end = i + 1
                while end < len(parts) and parts[end] == "..":
                    end += 1
                count = end - i
                if count > i:
                    raise OutsideStore("blob %s: a symbolic link on the way leads out of %s" % (key, directory))
                del parts[i - count:end]
                parts = parts or ["."]
                i = 0
                if dirfd != root:
                    os.close(dirfd)
                dirfd = root
                continue
            if i == len(parts) - 1:
                return _open_final(dirfd, parts[i], key)
            try:
                fd = os.open(parts[i], os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dirfd)
            except FileNotFoundError:
                raise BlobNotFound("blob %s: %s does not exist" % (key, "/".join(parts[:i + 1]))) from None
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                try:
                    target = os.readlink(parts[i], dir_fd=dirfd)
                except OSError:
                    raise e from None
                symlinks += 1
                if symlinks > _MAX_SYMLINKS:
                    raise OutsideStore("blob %s: more than %d symbolic links on the way" % (key, _MAX_SYMLINKS)) from None
                new = _split_link(target, parts[:i], parts[i + 1:])
                if len(new) < i or new[:i] != parts[:i]:
                    i = 0
                    if dirfd != root:
                        os.close(dirfd)
                    dirfd = root
                parts = new
                continue
            if dirfd != root:
                os.close(dirfd)
            dirfd = fd
            i += 1
    finally:
        if dirfd != root:
            os.close(dirfd)
        os.close(root)


def _open_final(dirfd, name, key):
    # As DirStore.open: lstat, open without following a link or blocking
    # on a FIFO, and the same regular file once open.
    for attempt in range(4):
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            raise BlobNotFound("blob %s does not exist" % key) from None
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular("blob %s is not a regular file (%s)" % (key, _kind(st.st_mode)))
        try:
            fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=dirfd)
        except FileNotFoundError:
            if attempt < 3:
                continue  # replaced between stat and open
            raise BlobNotFound("blob %s does not exist" % key) from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise NotRegular("blob %s is not a regular file (a symbolic link)" % key) from None
            raise
        fst = os.fstat(fd)
        if stat.S_ISREG(fst.st_mode) and (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino):
            return fd
        os.close(fd)
        if attempt >= 3:
            raise NotRegular("blob %s is not a regular file (%s)" % (key, _kind(fst.st_mode)))
    raise BlobNotFound("blob %s does not exist" % key)


def _kind(mode):
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return kind
    return "mode %o" % mode


def _open_blob_no_dir_fd(directory, key):
    """_open_blob where os.open takes no dir_fd: no symbolic link at all is
    followed on the way (stricter than Go)."""
    path = directory
    for part in key.split("/"):
        path = os.path.join(path, part)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise BlobNotFound("blob %s does not exist" % key) from None
        if stat.S_ISLNK(st.st_mode):
            raise OutsideStore("blob %s: %s is a symbolic link" % (key, path))
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular("blob %s is not a regular file (%s)" % (key, _kind(st.st_mode)))
    fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK)
    fst = os.fstat(fd)
    if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise NotRegular("blob %s changed while it was opened" % key)
    return fd
