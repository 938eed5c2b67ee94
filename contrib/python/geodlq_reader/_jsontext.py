"""Strict JSON text scanning for dlq.v1 envelopes.

The standard library's json module cannot read an envelope as the contract
requires on its own: it accepts NaN and Infinity, keeps only the last of
duplicate member names, re-serialises values (so the exact bytes of
raw_payload and geometry.inline are lost), and recurses, so a payload
nested a few thousand levels deep raises RecursionError. This module walks
the envelope's own objects itself, hands every other value to the C
decoder (json.JSONDecoder.raw_decode), falls back to an iterative scanner
for values nested deeper than Python's recursion limit, and records the
exact span of the two verbatim members.
"""

import json
import re

# MAX_DEPTH is the deepest nesting of arrays and objects in a document,
# the envelope's own object included: Go's encoding/json limit.
MAX_DEPTH = 10000

# The objects of the envelope itself, by path. Their member names must be
# unique; their members are walked here rather than decoded whole.
ENVELOPE_OBJECTS = {(), ("geometry",), ("geometry_error",), ("geometry_error", "fault"), ("source",)}

# The members whose exact bytes are kept: path of the object, name.
VERBATIM = {((), "raw_payload"), (("geometry",), "inline")}


class JSONTextError(ValueError):
    """The document is not JSON text: malformed JSON, a NaN or Infinity
    token, or nesting deeper than MAX_DEPTH."""


class Verbatim:
    """A verbatim member's value: its exact source text, and the decoded
    value when it is a JSON string (else None)."""

    __slots__ = ("text", "string")

    def __init__(self, text, string):
        self.text = text
        self.string = string

    def placeholder(self):
        """A value of the same JSON type, for schema validation: the
        schema constrains a verbatim value only by its type (and a string's
        content)."""
        if self.string is not None:
            return self.string
        c = self.text[0]
        return {"{": {}, "[": []}.get(c, None if c == "n" else (c == "t") if c in "tf" else 0)


def _reject_constant(name):
    raise JSONTextError("%s is not JSON" % name)


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, strict=True)
_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_LITERAL = re.compile(r"true|false|null")
_SURROGATE = re.compile("[\ud800-\udfff]")


def go_string(s):
    """Returns s as Go's encoding/json decodes the same JSON string: an
    unpaired surrogate escape becomes U+FFFD."""
    return _SURROGATE.sub("\ufffd", s)


def parse(text):
    """Parses an envelope document (a str that was valid UTF-8).

    Returns its top-level value and the duplicate member names found in
    the envelope's objects (as messages; the last occurrence wins, as in
    Go, so that a reader can report the version before the duplicates).
    The envelope's objects are dicts, verbatim members are Verbatim
    objects, values nested deeper than the interpreter's recursion limit
    (other than verbatim ones) are replaced by an empty value of their
    type. Raises JSONTextError for anything that is not JSON text."""
    duplicates = []
    i = _WS.match(text, 0).end()
    value, i = _value(text, i, 1, (), None, duplicates)
    i = _WS.match(text, i).end()
    if i != len(text):
        raise JSONTextError("data after the document at offset %d" % i)
    return value, duplicates


def _value(text, i, depth, path, name, duplicates):
    """Parses the value at text[i] (no leading whitespace), nested in
    depth-1 containers; path is the path of the object holding it and name
    its member name (None at the top). Returns (value, end)."""
    if i >= len(text):
        raise JSONTextError("unexpected end of input")
    here = path + (name,) if name is not None else path
    if text[i] == "{" and here in ENVELOPE_OBJECTS and (name is not None or path == ()):
        return _object(text, i, depth, here, duplicates)
    if (path, name) in VERBATIM:
        _, end = _decode(text, i, depth)
        string = None
        if text[i] == '"':
            string = go_string(json.loads(text[i:end]))
        return Verbatim(text[i:end], string), end
    return _decode(text, i, depth)


def _decode(text, i, depth):
    """Decodes the value at text[i] with the C decoder. A value it cannot
    take (nested deeper than the recursion limit, about 1000, or an integer
    of more than 4300 digits, which Python refuses to convert) is checked by
    _skip instead and replaced by a value of its type: {} or [] (or an
    infinite float for such an integer, which no field of the format
    accepts). Returns (value, end)."""
    try:
        return _DECODER.raw_decode(text, i)
    except JSONTextError:
        raise
    except json.JSONDecodeError as e:
        raise JSONTextError(str(e)) from None
    except (RecursionError, ValueError):
        end, kind = _skip(text, i, depth)
        return {"{": {}, "[": []}.get(kind, float("inf")), end


def _object(text, i, depth, path, duplicates):
    if depth > MAX_DEPTH:
        raise JSONTextError("nested deeper than %d" % MAX_DEPTH)
    out = {}
    i = _WS.match(text, i + 1).end()
    if text.startswith("}", i):
        return out, i + 1
    while True:
        m = _STRING.match(text, i)
        if not m:
            raise JSONTextError("expected a member name at offset %d" % i)
        name = json.loads(m.group())
        if name in out:
            duplicates.append("member %r appears more than once in %s" % (name, "/".join(path) or "the envelope"))
            del out[name]  # the last occurrence wins, in its place
        i = _WS.match(text, m.end()).end()
        if not text.startswith(":", i):
            raise JSONTextError("expected ':' at offset %d" % i)
        i = _WS.match(text, i + 1).end()
        out[name], i = _value(text, i, depth + 1, path, name, duplicates)
        i = _WS.match(text, i).end()
        if text.startswith("}", i):
            return out, i + 1
        if not text.startswith(",", i):
            raise JSONTextError("expected ',' or '}' at offset %d" % i)
        i = _WS.match(text, i + 1).end()


def _skip(text, i, depth):
    """Skips the value at text[i] iteratively, checking its syntax and that
    its nesting stays within MAX_DEPTH. Returns (end, first character)."""
    first = text[i] if i < len(text) else ""
    stack = []
    expect_value = True
    while True:
        if expect_value:
            if i >= len(text):
                raise JSONTextError("unexpected end of input")
            c = text[i]
            if c in "[{":
                if depth + len(stack) > MAX_DEPTH:
                    raise JSONTextError("nested deeper than %d" % MAX_DEPTH)
                stack.append(c)
                i = _WS.match(text, i + 1).end()
                closer = "]" if c == "[" else "}"
                if text.startswith(closer, i):
                    stack.pop()
                    i += 1
                    expect_value = False
                elif c == "{":
                    m = _STRING.match(text, i)
                    if not m:
                        raise JSONTextError("expected a member name at offset %d" % i)
                    i = _WS.match(text, m.end()).end()
                    if not text.startswith(":", i):
                        raise JSONTextError("expected ':' at offset %d" % i)
                    i = _WS.match(text, i + 1).end()
                continue
            m = _STRING.match(text, i) or _NUMBER.match(text, i) or _LITERAL.match(text, i)
            if not m:
                raise JSONTextError("invalid value at offset %d" % i)
            i = m.end()
            expect_value = False
        if not stack:
            return i, first
        i = _WS.match(text, i).end()
        top = stack[-1]
        if text.startswith(",", i):
            i = _WS.match(text, i + 1).end()
            if top == "{":
                m = _STRING.match(text, i)
                if not m:
                    raise JSONTextError("expected a member name at offset %d" % i)
                i = _WS.match(text, m.end()).end()
                if not text.startswith(":", i):
                    raise JSONTextError("expected ':' at offset %d" % i)
                i = _WS.match(text, i + 1).end()
            expect_value = True
        elif text.startswith("]" if top == "[" else "}", i):
            stack.pop()
            i += 1
        else:
            raise JSONTextError("expected ',' or a closing bracket at offset %d" % i)
