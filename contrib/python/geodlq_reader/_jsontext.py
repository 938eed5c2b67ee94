"""Strict JSON text scanning for dlq.v1 envelopes, in memory linear in the
input with a small constant.

The standard library's json module cannot read an envelope as the contract
requires on its own: it accepts NaN and Infinity, keeps only the last of
duplicate member names, re-serialises values (so the exact bytes of
raw_payload and geometry.inline are lost), recurses (a payload nested a few
thousand levels deep raises RecursionError), and builds a Python object for
every value (a list of a million coordinate pairs costs some 120 bytes per
pair of numbers, an array of empty arrays 20 times its text).

This module walks the envelope's own objects itself and skips every other
value without building it: a scanner that keeps one stack entry per open
container, and consumes runs of up to 256 scalars or small flat arrays per
regular-expression match (each repetition of a group in Python's re costs
memory until the match ends, so no pattern here repeats a group without a
small bound). The values the schema constrains are then decoded from their
span, a container only when its text is at most SMALL_CONTAINER bytes. The
document is scanned as ISO-8859-1 text, one character per byte, after its
UTF-8 has been checked in chunks: every offset is a byte offset into the
document, a verbatim member's bytes are a slice of it, and the text costs
one byte per byte of input whatever characters it holds.
"""

import codecs
import json
import re
from array import array

# MAX_DEPTH is the deepest nesting of arrays and objects in a document,
# the envelope's own object included: Go's encoding/json limit.
MAX_DEPTH = 10000

# SMALL_CONTAINER is the largest text of an array or object outside the
# envelope's objects and verbatim members that is decoded whole (by the C
# decoder, whose objects may cost 25 times their text). A larger one is
# replaced by a value of its type: an object by {}, an array by its first
# KEPT_ITEMS elements (a larger container among them by an empty one). The
# dlq.v1 schema constrains such values by their type only, except
# geometry_error.location, an array of at most 2 numbers: the replacement
# keeps every verdict.
SMALL_CONTAINER = 64 << 10
KEPT_ITEMS = 3

# The objects of the envelope itself, by path. Their member names must be
# unique; their members are walked here rather than decoded whole.
ENVELOPE_OBJECTS = {(), ("geometry",), ("geometry_error",), ("geometry_error", "fault"), ("source",)}

# The members whose exact bytes are kept: path of the object, name.
VERBATIM = {((), "raw_payload"), (("geometry",), "inline")}

# MAX_DUPLICATES is the most duplicate member names reported one by one.
MAX_DUPLICATES = 20


class JSONTextError(ValueError):
    """The document is not JSON text: not UTF-8, malformed JSON, a NaN or
    Infinity token, or nesting deeper than MAX_DEPTH."""


def short(s, limit=80):
    """repr(s), cut to about limit characters: messages never hold a
    document's long strings."""
    if len(s) <= limit:
        return repr(s)
    return repr(s[:limit]) + "... (%d characters)" % len(s)


class Verbatim:
    """A verbatim member's value: the span [start, end) of its exact bytes
    in the document, and the decoded value when it is a JSON string (else
    None)."""

    __slots__ = ("_doc", "start", "end", "string")

    def __init__(self, doc, start, end, string):
        self._doc = doc
        self.start = start
        self.end = end
        self.string = string

    @property
    def data(self):
        """The value's exact bytes (a copy)."""
        return self._doc[self.start:self.end]

    @property
    def text(self):
        """The value's exact source text (a copy)."""
        return self.data.decode("utf-8")

    def __len__(self):
        return self.end - self.start

    def placeholder(self):
        """A value of the same JSON type, for schema validation: the
        schema constrains a verbatim value only by its type (and a string's
        content)."""
        if self.string is not None:
            return self.string
        c = self._doc[self.start:self.start + 1]
        return {b"{": {}, b"[": []}.get(c, None if c == b"n" else (c == b"t") if c in (b"t", b"f") else 0)


_WS = r"[ \t\n\r]*"
_NUM = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
_PLAIN_STRING = r'"[^"\\\x00-\x1f]*"'
_SCALAR = r"(?:%s|%s|true|false|null)" % (_PLAIN_STRING, _NUM)
_FLAT = r"\[{ws}(?:{s}(?:{ws},{ws}{s}){{0,32}})?{ws}\]".format(ws=_WS, s=_SCALAR)


def _run(elem, member):
    # A run of up to 256 ", element" (or ", name: element") in a container.
    return re.compile(r"(?:{ws},{ws}{m}{e}){{0,256}}".format(
        ws=_WS, e=elem, m=(_PLAIN_STRING + _WS + ":" + _WS) if member else ""))


_WS_RE = re.compile(_WS)
_NUM_RE = re.compile(_NUM)
_LITERAL_RE = re.compile(r"true|false|null")
_PLAIN_STRING_RE = re.compile(_PLAIN_STRING)
# A string's content up to 1024 escapes at a time.
_STRING_CHUNK = re.compile(r'[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*){0,1024}')
_ESCAPE = re.compile(r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')
# Runs in arrays (False) and objects (True); with small flat arrays as
# elements, or (at the depth limit) scalars only.
_RUNS = {(m, f): _run("(?:%s|%s)" % (_SCALAR, _FLAT) if f else _SCALAR, m) for m in (False, True) for f in (False, True)}
_SURROGATE = re.compile("[\ud800-\udfff]")
_NON_ASCII = re.compile("[\x80-\xff]")
# The characters of a run of numbers in an array, and the shortest run
# checked a chunk at a time by the C decoder rather than by _RUNS.
_NUMBER_RUN = re.compile(r"[-+0-9.eE, \t\n\r]*")
_NUMBER_RUN_MIN = 4096
_NUMBER_CHUNK = 64 << 10


def go_string(s):
    """Returns s as Go's encoding/json decodes the same JSON string: an
    unpaired surrogate escape becomes U+FFFD."""
    return _SURROGATE.sub("\ufffd", s)


def _reject_constant(name):
    raise JSONTextError("%s is not JSON" % name)


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, strict=True)
# Checks runs of numbers: parse_int=len leaves integers unconverted (Python
# refuses those of more than 4300 digits, which JSON allows).
_NUMBERS = json.JSONDecoder(parse_int=len, parse_constant=_reject_constant, strict=True)


def check_utf8(data, chunk=1 << 20):
    """Raises JSONTextError unless data is valid UTF-8, decoding it a chunk
    at a time and keeping nothing."""
    dec = codecs.getincrementaldecoder("utf-8")("strict")
    view = memoryview(data)
    try:
        for i in range(0, len(view), chunk):
            dec.decode(view[i:i + chunk])
        dec.decode(b"", True)
    except UnicodeDecodeError as e:
        raise JSONTextError("not UTF-8: %s near byte %d" % (e.reason, i + e.start)) from None


def utf8_len(s, chunk=1 << 20):
    """len(s.encode("utf-8")), a chunk at a time."""
    return sum(len(s[i:i + chunk].encode("utf-8", "surrogatepass")) for i in range(0, len(s), chunk))


class Members:
    """What the schema says of the members of one of the envelope's
    objects: the names it defines, and a test of other names (None: every
    other member is kept for the schema to judge)."""

    __slots__ = ("known", "name_ok")

    def __init__(self, known, name_ok):
        self.known = frozenset(known)
        self.name_ok = name_ok


def parse(data, members=None):
    """Parses an envelope document (bytes that are valid UTF-8; see
    check_utf8).

    Returns its top-level value and the duplicate member names found in
    the envelope's objects (as messages, at most MAX_DUPLICATES and a
    count; the last occurrence wins, as in Go, so that a reader can report
    the version before the duplicates). The envelope's objects are dicts,
    verbatim members are Verbatim spans of data; other values are decoded,
    containers as SMALL_CONTAINER says, and values nested deeper than the
    interpreter's recursion limit replaced by an empty value of their type.

    members maps a path of ENVELOPE_OBJECTS to its Members. A member the
    schema does not define there is checked (syntax, duplicate name) but
    not kept, unless name_ok refuses its name: it is then kept, with the
    value None, for the schema to report. Without an entry, every member is
    kept. Raises JSONTextError for anything that is not JSON text."""
    p = _Parser(data, members or {})
    i = p.ws(0)
    value, i = p.value(i, 1, (), None)
    i = p.ws(i)
    if i != len(p.text):
        raise JSONTextError("data after the document at offset %d" % i)
    if p.more_duplicates:
        p.duplicates.append("and %d more duplicate members" % p.more_duplicates)
    return value, p.duplicates


# An array type of 32-bit unsigned integers.
_U32 = next(t for t in "ILH" if array(t).itemsize == 4)


class _NameSet:
    """The names of the members an object does not keep, for finding
    duplicates in about 11 bytes a name: an open-addressing table of 32
    bits of the names' hashes (str hashes are keyed per process) and the
    offsets of the names, equal hashes told apart by the names themselves."""

    def __init__(self, parser):
        self.parser = parser
        self.hashes = array(_U32, [0]) * 16
        self.offsets = array("Q" if len(parser.data) >= 1 << 32 else _U32, [0]) * 16
        self.n = 0

    def seen(self, name, offset):
        """Reports whether name was seen before; records it at offset."""
        h = (hash(name) & 0xFFFFFFFF) or 1  # 0 marks a free slot
        hashes = self.hashes
        mask = len(hashes) - 1
        k = h & mask
        while True:
            got = hashes[k]
            if got == 0:
                break
            if got == h and self.parser.string(self.offsets[k])[0] == name:
                return True
            k = (k + 1) & mask
        hashes[k], self.offsets[k] = h, offset
        self.n += 1
        if 4 * self.n > 3 * len(hashes):
            self._grow()
        return False

    def _grow(self):
        hashes, offsets = self.hashes, self.offsets
        self.hashes = array(hashes.typecode, [0]) * (2 * len(hashes))
        self.offsets = array(offsets.typecode, [0]) * (2 * len(offsets))
        mask = len(self.hashes) - 1
        for h, o in zip(hashes, offsets):
            if h:
                k = h & mask
                while self.hashes[k]:
                    k = (k + 1) & mask
                self.hashes[k], self.offsets[k] = h, o


class _Parser:
    def __init__(self, data, members):
        self.data = data
        self.members = members
        # One character per byte: structure is ASCII, and a multi-byte
        # character only ever stands inside a string, whose value is
        # decoded from data.
        self.text = data.decode("latin-1")
        # In an ASCII document, text holds the very characters.
        self.ascii = data.isascii()
        self.duplicates = []
        self.more_duplicates = 0
        self.refused = 0

    def ws(self, i):
        return _WS_RE.match(self.text, i).end()

    def string(self, i):
        """The decoded JSON string at text[i], and its end."""
        end = self.string_end(i)
        if self.ascii or not _NON_ASCII.search(self.text, i, end):
            return go_string(json.decoder.scanstring(self.text, i + 1, True)[0]), end
        return go_string(json.decoder.scanstring(self.data[i:end].decode("utf-8"), 1, True)[0]), end

    def string_end(self, i):
        """The end of the JSON string at text[i] (a quote), checked."""
        text = self.text
        m = _PLAIN_STRING_RE.match(text, i)
        if m:
            return m.end()
        j = i + 1
        while True:
            j = _STRING_CHUNK.match(text, j).end()
            c = text[j:j + 1]
            if c == '"':
                return j + 1
            if c == "\\" and _ESCAPE.match(text, j):
                continue  # 1024 escapes consumed; more follow
            if c == "":
                raise JSONTextError("unterminated string starting at offset %d" % i)
            if c == "\\":
                raise JSONTextError("invalid escape at offset %d" % j)
            raise JSONTextError("control character in a string at offset %d" % j)

    def value(self, i, depth, path, name):
        """Parses the value at text[i] (no leading whitespace), nested in
        depth-1 containers; path is the path of the object holding it and
        name its member name (None at the top). Returns (value, end)."""
        text = self.text
        if i >= len(text):
            raise JSONTextError("unexpected end of input")
        here = path + (name,) if name is not None else path
        c = text[i]
        if c == "{" and here in ENVELOPE_OBJECTS and (name is not None or path == ()):
            return self.object(i, depth, here)
        if (path, name) in VERBATIM:
            end = self.skip(i, depth)
            return Verbatim(self.data, i, end, self.string(i)[0] if c == '"' else None), end
        return self.decode(i, depth, KEPT_ITEMS)

    def decode(self, i, depth, keep):
        """Decodes the value at text[i] as SMALL_CONTAINER says, keeping
        at most keep elements of a large array. Returns (value, end)."""
        text = self.text
        c = text[i]
        if c == '"':
            return self.string(i)
        if c not in "[{":
            m = _NUM_RE.match(text, i)
            if m:
                s = m.group()
                try:
                    return (float(s) if ("." in s or "e" in s or "E" in s) else int(s)), m.end()
                except ValueError:
                    # An integer of more than 4300 digits, which Python
                    # refuses to convert: no field of the format takes it.
                    return float("inf"), m.end()
            m = _LITERAL_RE.match(text, i)
            if m:
                return {"true": True, "false": False, "null": None}[m.group()], m.end()
            if text.startswith(("NaN", "Infinity", "-Infinity"), i):
                raise JSONTextError("%s is not JSON (offset %d)" % (text[i:i + 9].split(",")[0], i))
            raise JSONTextError("invalid value at offset %d" % i)
        end = self.skip(i, depth)
        if end - i <= SMALL_CONTAINER:
            try:
                return _DECODER.decode(self.data[i:end].decode("utf-8")), end
            except (RecursionError, ValueError):
                pass  # nested beyond the recursion limit, or a huge integer
            return ({} if c == "{" else []), end
        if c == "{" or keep == 0:
            return ({} if c == "{" else []), end
        items = []
        j = self.ws(i + 1)
        while text[j] != "]" and len(items) < keep:
            v, j = self.decode(j, depth + 1, 0)
            items.append(v)
            j = self.ws(j)
            if text[j] == ",":
                j = self.ws(j + 1)
        return items, end

    def duplicate(self, name, path):
        if len(self.duplicates) < MAX_DUPLICATES:
            self.duplicates.append("member %s appears more than once in %s" % (short(name), "/".join(path) or "the envelope"))
        else:
            self.more_duplicates += 1

    def object(self, i, depth, path):
        if depth > MAX_DEPTH:
            raise JSONTextError("nested deeper than %d" % MAX_DEPTH)
        text = self.text
        members = self.members.get(path)
        others = _NameSet(self) if members is not None else None
        out = {}
        i = self.ws(i + 1)
        if text.startswith("}", i):
            return out, i + 1
        while True:
            if not text.startswith('"', i):
                raise JSONTextError("expected a member name at offset %d" % i)
            start = i
            name, i = self.string(i)
            i = self.ws(i)
            if not text.startswith(":", i):
                raise JSONTextError("expected ':' at offset %d" % i)
            i = self.ws(i + 1)
            if members is not None and name not in members.known:
                # A member this revision does not define: checked, not kept.
                if others.seen(name, start):
                    self.duplicate(name, path)
                i = self.skip(i, depth + 1)
                if members.name_ok is not None and members.name_ok(name):
                    pass
                elif name in out:
                    del out[name]
                    out[name] = None
                elif self.refused < MAX_DUPLICATES:
                    # Enough for the schema to report: the envelope is
                    # invalid whatever the others are.
                    self.refused += 1
                    out[name] = None
            else:
                if name in out:
                    self.duplicate(name, path)
                    del out[name]  # the last occurrence wins, in its place
                out[name], i = self.value(i, depth + 1, path, name)
            i = self.ws(i)
            if text.startswith("}", i):
                return out, i + 1
            if not text.startswith(",", i):
                raise JSONTextError("expected ',' or '}' at offset %d" % i)
            i = self.ws(i + 1)

    def scalar_end(self, i):
        text = self.text
        if text.startswith('"', i):
            return self.string_end(i)
        m = _NUM_RE.match(text, i) or _LITERAL_RE.match(text, i)
        if not m:
            if text.startswith(("NaN", "Infinity", "-Infinity"), i):
                raise JSONTextError("NaN and Infinity are not JSON (offset %d)" % i)
            if i >= len(text):
                raise JSONTextError("unexpected end of input")
            raise JSONTextError("invalid value at offset %d" % i)
        return m.end()

    def member_name(self, i):
        """Skips a member name and its colon at text[i]; returns the
        offset of the value."""
        text = self.text
        if not text.startswith('"', i):
            raise JSONTextError("expected a member name at offset %d" % i)
        i = self.ws(self.string_end(i))
        if not text.startswith(":", i):
            raise JSONTextError("expected ':' at offset %d" % i)
        return self.ws(i + 1)

    def skip(self, i, depth):
        """Skips the value at text[i], nested in depth-1 containers,
        checking its syntax and that its nesting stays within MAX_DEPTH.
        Returns its end."""
        text = self.text
        stack = []  # closing brackets of the open containers
        while True:
            # A value starts at i.
            c = text[i:i + 1]
            if c == "[" or c == "{":
                if depth + len(stack) > MAX_DEPTH:
                    raise JSONTextError("nested deeper than %d" % MAX_DEPTH)
                closer = "]" if c == "[" else "}"
                stack.append(closer)
                i = self.ws(i + 1)
                if text.startswith(closer, i):
                    stack.pop()
                    i += 1
                elif c == "{":
                    i = self.member_name(i)
                    continue
                else:
                    continue
            else:
                i = self.scalar_end(i)
            # After a value.
            while True:
                if not stack:
                    return i
                closer = stack[-1]
                if closer == "]":
                    i = self.numbers(i)
                # Runs of scalars (and, below the depth limit, of small flat
                # arrays) at C speed.
                i = _RUNS[(closer == "}", depth + len(stack) <= MAX_DEPTH)].match(text, i).end()
                i = self.ws(i)
                if text.startswith(",", i):
                    i = self.ws(i + 1)
                    if closer == "}":
                        i = self.member_name(i)
                    break
                if text.startswith(closer, i):
                    stack.pop()
                    i += 1
                    continue
                if i >= len(text):
                    raise JSONTextError("unexpected end of input")
                raise JSONTextError("expected ',' or %r at offset %d" % (closer, i))

    def numbers(self, i):
        """Skips a long run of ", number" in an array after a value at
        text[i], checking it a chunk at a time with the C decoder; returns
        the offset of the run's last comma (the state machine reads the
        rest), or i when the run is short."""
        text = self.text
        j = _NUMBER_RUN.match(text, i).end()
        if j - i < _NUMBER_RUN_MIN:
            return i
        k = text.rfind(",", i, j)
        if k < i:
            return i
        a = i
        while a < k:
            b = k
            if k - a > _NUMBER_CHUNK:
                b = text.rfind(",", a + 1, a + _NUMBER_CHUNK)
                if b <= a:  # one number longer than a chunk
                    b = text.find(",", a + _NUMBER_CHUNK, k + 1)
            try:
                _NUMBERS.decode("[0" + text[a:b] + "]")
            except ValueError as e:
                raise JSONTextError("invalid number in an array near offset %d" % (a + getattr(e, "pos", 2) - 2)) from None
            a = b
        return k
