// Package jsonscan is a fast, allocation-free scanner over JSON bytes.
//
// It answers the few questions the dead-letter path asks of a payload that
// may be 40 MB of coordinates and may not even be valid JSON: where does
// this value end ([Skip]), where is the value of this member ([Find],
// [FindAll]), what does this string say ([Unquote]), and how many positions
// does this geometry hold ([CountNumberArrays]). It never builds a tree and
// never copies the input; spans are byte offsets into the caller's slice.
//
// # Strictness
//
// The scanner is strict where it walks and structural where it skips. On
// the path to a member (the top-level object and every object or array
// named by a path) it checks the grammar: keys, colons, commas, number
// syntax, literals, and that nothing but whitespace follows the document.
// Inside values it merely skips, it checks only what is needed to find
// their end: brackets nest and match, strings are terminated and their
// escapes are well formed. Strings are nowhere checked for raw control
// characters or UTF-8 validity (Unquote is). So every valid JSON document is accepted
// with the same spans encoding/json sees, and some invalid ones (such as
// [1 2]) are skipped without complaint; use [encoding/json.Valid] where
// full validation matters. Nesting deeper than [MaxDepth] is an error, as in
// encoding/json, wrapping [ErrTooDeep]; the scanner is iterative (one bit
// of a fixed array per level), so no input can exhaust the stack.
//
// The end of the input is never confused with a byte of it: only space,
// tab, CR and LF are white space, and a NUL (or anything else) after the
// document is a syntax error for [Find] and [FindAll], exactly as for
// encoding/json and internal/geojson.
//
// # Extensions
//
// The bare tokens NaN, Infinity and -Infinity are accepted wherever a
// number is: Python's json module emits them for non-finite floats, and a
// dead-letter path must be able to look inside such payloads.
//
// # Duplicate keys
//
// When an object holds the same key more than once, the LAST occurrence
// wins, as it does when encoding/json decodes into a map or an interface
// value. A path is resolved against that last value only: if the last
// "feature" member has no "geometry", /feature/geometry is not found even
// if an earlier "feature" had one.
package jsonscan

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
)

// MaxDepth is the deepest nesting of arrays and objects accepted, the same
// limit encoding/json applies.
const MaxDepth = 10000

var (
	// ErrSyntax is wrapped by every [*SyntaxError].
	ErrSyntax = errors.New("jsonscan: syntax error")
	// ErrNotFound is returned by [Find] when the path names no value.
	ErrNotFound = errors.New("jsonscan: not found")
	// ErrBadPath is returned for a path that is not "" and does not start
	// with "/", or that has a bad "~" escape.
	ErrBadPath = errors.New("jsonscan: malformed path")
	// ErrTooDeep is wrapped, besides [ErrSyntax], by the [*SyntaxError]
	// for an array or object nested more than [MaxDepth] levels deep. The
	// scanner refuses it before entering it, in constant memory.
	ErrTooDeep = errors.New("jsonscan: nested too deep")
)

// SyntaxError reports malformed JSON at a byte offset.
type SyntaxError struct {
	// Offset is the byte offset of the offending input.
	Offset int
	// Msg says what was expected.
	Msg string
	// Err is a more specific cause, such as [ErrTooDeep], or nil.
	Err error
}

// Error implements error.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("jsonscan: syntax error at offset %d: %s", e.Offset, e.Msg)
}

// Unwrap returns [ErrSyntax] and, when set, Err.
func (e *SyntaxError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrSyntax, e.Err}
	}
	return []error{ErrSyntax}
}

func syntaxErr(off int, msg string) error { return &SyntaxError{Offset: off, Msg: msg} }

func tooDeep(off int) error {
	return &SyntaxError{Offset: off, Msg: fmt.Sprintf("exceeded max depth of %d", MaxDepth), Err: ErrTooDeep}
}

// Byte classes.
const (
	clsNone  = 0
	clsWS    = 1 << 0 // space, tab, CR, LF
	clsOpen  = 1 << 1 // [ {
	clsClose = 1 << 2 // ] }
	clsQuote = 1 << 3 // "
	clsNum   = 1 << 4 // first byte of a number: - 0-9, and N I of NaN/Infinity
	clsDelim = 1 << 5 // bytes that may follow a scalar: ws , ] } and end
)

var class = [256]uint8{
	' ': clsWS | clsDelim, '\t': clsWS | clsDelim, '\r': clsWS | clsDelim, '\n': clsWS | clsDelim,
	'[': clsOpen, '{': clsOpen, ']': clsClose | clsDelim, '}': clsClose | clsDelim,
	'"': clsQuote, ',': clsDelim,
	'-': clsNum, '0': clsNum, '1': clsNum, '2': clsNum, '3': clsNum, '4': clsNum,
	'5': clsNum, '6': clsNum, '7': clsNum, '8': clsNum, '9': clsNum, 'N': clsNum, 'I': clsNum,
}

// SWAR constants.
const (
	lsb7 = 0x7F7F7F7F7F7F7F7F
	bc22 = 0x2222222222222222 // '"' in every byte
	bc26 = 0x2626262626262626
	bc5b = 0x5B5B5B5B5B5B5B5B // '[' in every byte
)

// zeroBytes returns 0x80 in exactly the bytes of v that are zero.
func zeroBytes(v uint64) uint64 {
	return ^(((v & lsb7) + lsb7) | v | lsb7)
}

// structural returns a mask with 0x80 in every byte of w that is one of
// [ ] { } " — and in a few bytes that are not (Y _ y DEL): the caller checks
// each candidate against the byte table. [ ] { } all become 0x7F when OR-ed
// with 0x26, which folds four comparisons into one.
func structural(w uint64) uint64 {
	return zeroBytes((w|bc26)^lsb7) | zeroBytes(w^bc22)
}

func le64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func skipWS(data []byte, i int) int {
	for i < len(data) && class[data[i]]&clsWS != 0 {
		i++
	}
	return i
}

// Skip skips whitespace from offset i, then one JSON value. It returns the
// value's span [start, end): data[start:end] is the value's exact bytes.
// Scalars are checked strictly; the insides of arrays and objects only
// structurally (see the package documentation).
func Skip(data []byte, i int) (start, end int, err error) {
	if i < 0 || i > len(data) {
		return 0, 0, syntaxErr(i, "offset out of range")
	}
	start = skipWS(data, i)
	end, err = skipValue(data, start)
	return start, end, err
}

// skipValue skips the value starting exactly at data[i].
func skipValue(data []byte, i int) (int, error) {
	if i >= len(data) {
		return i, syntaxErr(i, "unexpected end of input, expected a value")
	}
	switch c := data[i]; c {
	case '{', '[':
		return skipContainer(data, i, nil)
	case '"':
		end, _, err := skipString(data, i)
		return end, err
	case 't':
		return literal(data, i, "true")
	case 'f':
		return literal(data, i, "false")
	case 'n':
		return literal(data, i, "null")
	case 'N':
		return literal(data, i, "NaN")
	case 'I':
		return literal(data, i, "Infinity")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return skipNumber(data, i)
		}
		return i, syntaxErr(i, fmt.Sprintf("invalid character %q looking for a value", c))
	}
}

func literal(data []byte, i int, lit string) (int, error) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return i, syntaxErr(i, "invalid literal, expected "+lit)
	}
	return i + len(lit), nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// NumberEnd returns the end of the JSON number (RFC 8259's grammar: no
// NaN, no Infinity, no leading '+' or zeros) that starts at data[i], and
// false when none starts there.
func NumberEnd(data []byte, i int) (int, bool) {
	if i < 0 || i >= len(data) || data[i] == '-' && i+1 < len(data) && data[i+1] == 'I' {
		return i, false
	}
	end, err := skipNumber(data, i)
	return end, err == nil
}

// skipNumber checks the JSON number grammar (and -Infinity).
func skipNumber(data []byte, i int) (int, error) {
	start := i
	if data[i] == '-' {
		i++
		if i < len(data) && data[i] == 'I' {
			return literal(data, i, "Infinity")
		}
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	default:
		return i, syntaxErr(start, "invalid number")
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			return i, syntaxErr(start, "invalid number: digit expected after '.'")
		}
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return i, syntaxErr(start, "invalid number: digit expected in exponent")
		}
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	}
	return i, nil
}

// skipString skips the string whose opening quote is data[i]. It reports
// whether the string holds any escape. Escapes are checked; control
// characters and UTF-8 are not (see Unquote).
func skipString(data []byte, i int) (end int, escaped bool, err error) {
	j := i + 1
	for {
		q := indexByte(data, j, '"')
		if q < 0 {
			return len(data), escaped, syntaxErr(i, "unterminated string")
		}
		for {
			b := indexByte(data[:q], j, '\\')
			if b < 0 {
				return q + 1, escaped, nil
			}
			escaped = true
			if b+1 >= len(data) {
				return len(data), escaped, syntaxErr(b, "unterminated escape")
			}
			switch data[b+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j = b + 2
			case 'u':
				if len(data)-b < 6 || !isHex4(data[b+2:b+6]) {
					return b, escaped, syntaxErr(b, `invalid \u escape`)
				}
				j = b + 6
			default:
				return b, escaped, syntaxErr(b, "invalid escape")
			}
			if j > q {
				break // the quote at q was escaped: look for the next one
			}
		}
	}
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if !(isDigit(c) || (c|0x20) >= 'a' && (c|0x20) <= 'f') {
			return false
		}
	}
	return true
}

// skipContainer skips the array or object opening at data[i], checking only
// that brackets nest and match and that strings are well formed. The input
// is read eight bytes at a time; every [ ] { } " in a word is found with a
// few arithmetic operations (see structural) and handled without reloading
// the word, so runs of numbers, commas and whitespace cost almost nothing.
//
// When count is not nil, the arrays whose first element is a number are
// counted into *count on the way (see CountNumberArrays).
func skipContainer(data []byte, i int, count *int) (int, error) {
	// Bit d of stack is 1 when the container at depth d is an object.
	var stack [(MaxDepth + 64) / 64]uint64
	depth := 0
	n := len(data)
	positions := 0
	if count != nil {
		defer func() { *count += positions }()
	}
	for {
	words:
		for i+8 <= n {
			w := le64(data[i : i+8])
			for m := structural(w); m != 0; m &= m - 1 {
				tz := bits.TrailingZeros64(m)
				switch byte(w >> (tz &^ 7)) {
				case '[':
					if depth >= MaxDepth {
						return i + tz>>3, tooDeep(i + tz>>3)
					}
					stack[depth>>6] &^= 1 << (depth & 63)
					depth++
					if count != nil && startsNumber(data, i+tz>>3+1) {
						positions++
					}
				case '{':
					if depth >= MaxDepth {
						return i + tz>>3, tooDeep(i + tz>>3)
					}
					stack[depth>>6] |= 1 << (depth & 63)
					depth++
				case ']':
					if depth == 0 || stack[(depth-1)>>6]&(1<<((depth-1)&63)) != 0 {
						return i + tz>>3, syntaxErr(i+tz>>3, "unexpected ]")
					}
					depth--
					if depth == 0 {
						return i + tz>>3 + 1, nil
					}
				case '}':
					if depth == 0 || stack[(depth-1)>>6]&(1<<((depth-1)&63)) == 0 {
						return i + tz>>3, syntaxErr(i+tz>>3, "unexpected }")
					}
					depth--
					if depth == 0 {
						return i + tz>>3 + 1, nil
					}
				case '"':
					end, _, err := skipString(data, i+tz>>3)
					if err != nil {
						return end, err
					}
					i = end
					continue words
				}
			}
			i += 8
		}
		// Fewer than eight bytes left: one at a time.
		if i >= n {
			return n, syntaxErr(n, "unexpected end of input inside array or object")
		}
		switch c := data[i]; c {
		case '[', '{':
			if depth >= MaxDepth {
				return i, tooDeep(i)
			}
			if c == '{' {
				stack[depth>>6] |= 1 << (depth & 63)
			} else {
				stack[depth>>6] &^= 1 << (depth & 63)
				if count != nil && startsNumber(data, i+1) {
					positions++
				}
			}
			depth++
			i++
		case ']', '}':
			if depth == 0 || (stack[(depth-1)>>6]&(1<<((depth-1)&63)) != 0) != (c == '}') {
				return i, syntaxErr(i, "unexpected closing bracket")
			}
			depth--
			i++
			if depth == 0 {
				return i, nil
			}
		case '"':
			end, _, err := skipString(data, i)
			if err != nil {
				return end, err
			}
			i = end
		default:
			i++
		}
	}
}

// indexByte returns the index in data of the first c at or after from, or
// -1.
func indexByte(data []byte, from int, c byte) int {
	if from >= len(data) {
		return -1
	}
	if k := bytes.IndexByte(data[from:], c); k >= 0 {
		return from + k
	}
	return -1
}

func trailingBytes(m uint64) uint { return uint(bits.TrailingZeros64(m) >> 3) }

// startsNumber reports whether the next value at or after data[i] (after
// whitespace) starts like a number, NaN or Infinity.
func startsNumber(data []byte, i int) bool {
	i = skipWS(data, i)
	return i < len(data) && class[data[i]]&clsNum != 0
}
