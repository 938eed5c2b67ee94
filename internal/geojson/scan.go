package geojson

import (
	"fmt"
	"math"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/geodlq/geodlq/classify"
)

// Error is a syntax or structure error in a GeoJSON document: the payload is
// not JSON, or it is JSON but not the GeoJSON this package accepts, or it
// exceeds a budget.
type Error struct {
	// Offset is the byte offset in the input at which the problem was found.
	Offset int
	// Kind is classify.KindMalformed, classify.KindMissingGeometry or
	// classify.KindVertexBudget.
	Kind classify.ReasonKind
	// Msg describes the problem in a sentence without the offset.
	Msg string
}

// Error returns "geojson: <msg> (offset N)".
func (e *Error) Error() string {
	return fmt.Sprintf("geojson: %s (offset %d)", e.Msg, e.Offset)
}

// scanner reads JSON from data. Positions are byte offsets into data, which
// is never copied or modified.
type scanner struct {
	data []byte
	pos  int
	// maxDepth bounds the nesting of arrays and objects the scanner skips.
	maxDepth int
	// maxNumber bounds the length of a number converted by coordinate.
	maxNumber int
}

// eof is what [scanner.ws] returns at the end of the input. It is not a
// byte value, so no byte of the input (NUL included) can be mistaken for
// the end of the document, nor the end for a byte.
const eof = -1

func (s *scanner) errf(kind classify.ReasonKind, format string, args ...any) *Error {
	return &Error{Offset: s.pos, Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

func (s *scanner) malformed(format string, args ...any) *Error {
	return s.errf(classify.KindMalformed, format, args...)
}

// ws skips white space (RFC 8259's four bytes, nothing else) and returns
// the next byte, or [eof] at the end of the input.
func (s *scanner) ws() int {
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; c {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return int(c)
		}
	}
	return eof
}

// describe names the token at the current position for error messages.
func (s *scanner) describe() string {
	if s.pos >= len(s.data) {
		return "end of input"
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == '-' || (c >= '0' && c <= '9'):
		return "a number"
	case s.hasLiteral("true") || s.hasLiteral("false"):
		return "a boolean"
	case s.hasLiteral("null"):
		return "null"
	case s.hasLiteral("NaN") || s.hasLiteral("Infinity"):
		return "a non-finite number token"
	case c >= 0x20 && c < 0x7f:
		return fmt.Sprintf("%q", rune(c))
	default:
		return fmt.Sprintf("byte 0x%02x", c)
	}
}

// expect consumes byte c after white space.
func (s *scanner) expect(c byte, what string) *Error {
	if s.ws() != int(c) {
		return s.malformed("expected %s, found %s", what, s.describe())
	}
	s.pos++
	return nil
}

// hasLiteral reports whether lit starts at the current position and is not
// followed by an identifier character.
func (s *scanner) hasLiteral(lit string) bool {
	end := s.pos + len(lit)
	if end > len(s.data) || string(s.data[s.pos:end]) != lit {
		return false
	}
	if end < len(s.data) {
		c := s.data[end]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			return false
		}
	}
	return true
}

// literal consumes lit if it is next.
func (s *scanner) literal(lit string) bool {
	if s.hasLiteral(lit) {
		s.pos += len(lit)
		return true
	}
	return false
}

// null consumes a null literal if it is next (after white space).
func (s *scanner) null() bool {
	s.ws()
	return s.literal("null")
}

// str reads a string. It returns a sub-slice of the input when the string
// has no escapes, and a fresh decoded buffer otherwise.
func (s *scanner) str() ([]byte, *Error) {
	if s.ws() != '"' {
		return nil, s.malformed("expected a string, found %s", s.describe())
	}
	start := s.pos
	s.pos++
	begin := s.pos
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; {
		case c == '"':
			out := s.data[begin:s.pos]
			s.pos++
			return out, nil
		case c == '\\':
			return s.strEscaped(start, begin)
		case c < 0x20:
			return nil, s.malformed("control character 0x%02x in string", c)
		default:
			s.pos++
		}
	}
	s.pos = start
	return nil, s.malformed("unterminated string")
}

// strEscaped decodes a string containing escapes; begin is the offset of its
// first content byte.
func (s *scanner) strEscaped(start, begin int) ([]byte, *Error) {
	buf := make([]byte, 0, s.pos-begin+16)
	buf = append(buf, s.data[begin:s.pos]...)
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return buf, nil
		case c < 0x20:
			return nil, s.malformed("control character 0x%02x in string", c)
		case c != '\\':
			buf = append(buf, c)
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.data) {
			break
		}
		e := s.data[s.pos+1]
		s.pos += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return nil, s.malformed("invalid \\u escape in string")
			}
			if utf16.IsSurrogate(r) {
				// A high surrogate must be followed by an escaped low one;
				// anything else decodes to U+FFFD, as encoding/json does.
				save := s.pos
				if s.pos+1 < len(s.data) && s.data[s.pos] == '\\' && s.data[s.pos+1] == 'u' {
					s.pos += 2
					if r2, ok := s.hex4(); ok {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							buf = utf8.AppendRune(buf, d)
							continue
						}
					}
				}
				s.pos = save
				r = utf8.RuneError
			}
			buf = utf8.AppendRune(buf, r)
		default:
			s.pos -= 2
			return nil, s.malformed("invalid escape \\%c in string", e)
		}
	}
	s.pos = start
	return nil, s.malformed("unterminated string")
}

func (s *scanner) hex4() (rune, bool) {
	if s.pos+4 > len(s.data) {
		return 0, false
	}
	var r rune
	for _, c := range s.data[s.pos : s.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	s.pos += 4
	return r, true
}

// numberSpan consumes a number in strict JSON grammar and returns its bytes.
func (s *scanner) numberSpan() ([]byte, bool) {
	start, d := s.pos, s.data
	i := s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return nil, false
	}
	if i < len(d) && d[i] == '.' {
		i++
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			return nil, false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == j {
			return nil, false
		}
	}
	s.pos = i
	return d[start:i], true
}

// coordinate reads one coordinate value: a JSON number, or one of the bare
// tokens NaN, Infinity and -Infinity that Python's json module emits. A
// number too large for a float64 reads as ±Inf, which validation reports
// as an invalid coordinate. Numbers are read by [readNumber], exactly
// rounded. On failure it returns why ("invalid number", or that the
// number is longer than maxNumber bytes, checked before it is converted
// beyond its first 19 digits) and leaves the position at the number.
func (s *scanner) coordinate() (float64, string) {
	if s.pos < len(s.data) {
		switch s.data[s.pos] {
		case 'N':
			if s.literal("NaN") {
				return math.NaN(), ""
			}
			return 0, "invalid number"
		case 'I':
			if s.literal("Infinity") {
				return math.Inf(1), ""
			}
			return 0, "invalid number"
		case '-':
			if s.pos+1 < len(s.data) && s.data[s.pos+1] == 'I' {
				s.pos++
				if s.literal("Infinity") {
					return math.Inf(-1), ""
				}
				s.pos--
				return 0, "invalid number"
			}
		}
	}
	at := s.pos
	v, end, st := readNumber(s.data, at, s.maxNumber)
	switch st {
	case numInvalid:
		return 0, "invalid number"
	case numTooLong:
		return 0, fmt.Sprintf("number of %d bytes (longer than %d)", end-at, s.maxNumber)
	}
	s.pos = end
	return v, ""
}

// skip consumes one JSON value. With lenient set, the bare tokens NaN,
// Infinity and -Infinity are accepted as numbers (used only for coordinate
// arrays whose type is not yet known).
//
// It is iterative: nesting costs one bit of s.open per level, never a
// stack frame, and an array or object that would be nested more than
// s.maxDepth levels deep (counted from the value skipped) is refused
// before it is entered.
func (s *scanner) skip(lenient bool) *Error {
	// The open containers, one bit each (1 = an object), innermost at bit
	// depth-1: on this frame's stack up to 512 levels, beyond on the heap.
	var inline [8]uint64
	open := inline[:]
	depth := 0
	for {
		// A value is expected.
		switch c := s.ws(); c {
		case '{', '[':
			if depth >= s.maxDepth {
				return s.malformed("JSON nested deeper than %d levels", s.maxDepth)
			}
			s.pos++
			closing := int(']')
			if c == '{' {
				closing = '}'
			}
			if s.ws() == closing {
				s.pos++
				break // an empty container is a complete value
			}
			if w := depth >> 6; w < len(open) {
				open[w] = open[w]&^(1<<(depth&63)) | b2u(c == '{')<<(depth&63)
			} else {
				open = append(open, b2u(c == '{'))
			}
			depth++
			if c == '{' {
				if err := s.memberName(); err != nil {
					return err
				}
			}
			continue
		default:
			if err := s.scalar(c, lenient); err != nil {
				return err
			}
		}
		// A value is complete: close the containers it completes, up to
		// one that continues with another element or member.
		for {
			if depth == 0 {
				return nil
			}
			obj := open[(depth-1)>>6]&(1<<((depth-1)&63)) != 0
			c := s.ws()
			if c == ',' {
				s.pos++
				if obj {
					if err := s.memberName(); err != nil {
						return err
					}
				}
				break
			}
			if obj && c == '}' || !obj && c == ']' {
				s.pos++
				depth--
				continue
			}
			if obj {
				return s.malformed("expected ',' or '}' in object, found %s", s.describe())
			}
			return s.malformed("expected ',' or ']' in array, found %s", s.describe())
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// memberName consumes a member name and its colon.
func (s *scanner) memberName() *Error {
	if s.ws() != '"' {
		return s.malformed("expected a string, found %s", s.describe())
	}
	if err := s.skipStr(); err != nil {
		return err
	}
	return s.expect(':', "':'")
}

// skipStr consumes the string whose quote is at s.pos, checking it as str
// does (control characters, escapes) without decoding it: a skipped string
// costs no memory, however long and however escaped.
func (s *scanner) skipStr() *Error {
	start := s.pos
	s.pos++
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; {
		case c == '"':
			s.pos++
			return nil
		case c < 0x20:
			return s.malformed("control character 0x%02x in string", c)
		case c != '\\':
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.data) {
			break
		}
		switch e := s.data[s.pos+1]; e {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.pos += 2
		case 'u':
			s.pos += 2
			if _, ok := s.hex4(); !ok {
				return s.malformed("invalid \\u escape in string")
			}
		default:
			return s.malformed("invalid escape \\%c in string", e)
		}
	}
	s.pos = start
	return s.malformed("unterminated string")
}

// scalar consumes the string, number or literal starting with c.
func (s *scanner) scalar(c int, lenient bool) *Error {
	switch {
	case c == '"':
		return s.skipStr()
	case c == '-' || c >= '0' && c <= '9':
		if !lenient {
			if _, ok := s.numberSpan(); ok {
				return nil
			}
			return s.malformed("invalid number")
		}
		if _, why := s.coordinate(); why != "" {
			return s.malformed("%s", why)
		}
		return nil
	case c == 't':
		if s.literal("true") {
			return nil
		}
	case c == 'f':
		if s.literal("false") {
			return nil
		}
	case c == 'n':
		if s.literal("null") {
			return nil
		}
	case lenient && (c == 'N' || c == 'I'):
		if _, why := s.coordinate(); why == "" {
			return nil
		}
	case c == 'N' || c == 'I':
		return s.malformed("non-finite number token outside coordinates")
	}
	return s.malformed("expected a JSON value, found %s", s.describe())
}

// end checks that only white space follows the document.
func (s *scanner) end() *Error {
	if s.ws() != eof {
		return s.malformed("unexpected %s after the JSON document", s.describe())
	}
	return nil
}
