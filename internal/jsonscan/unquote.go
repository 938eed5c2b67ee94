package jsonscan

import (
	"unicode/utf16"
	"unicode/utf8"
)

// Unquote decodes the JSON string token s, quotes included, exactly as
// encoding/json does: escapes are decoded, and invalid UTF-8 bytes and
// unpaired surrogate escapes become U+FFFD. Control characters (below
// 0x20) are an error, as in encoding/json. A string without escapes costs
// one allocation (the result).
func Unquote(s []byte) (string, error) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", syntaxErr(0, "not a quoted string")
	}
	body := s[1 : len(s)-1]
	if plain(body) {
		return string(body), nil
	}
	b, err := appendUnquoteBody(nil, body)
	return string(b), err
}

// AppendUnquote appends the decoded form of the JSON string token s
// (quotes included) to dst, as [Unquote] does.
func AppendUnquote(dst, s []byte) ([]byte, error) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return dst, syntaxErr(0, "not a quoted string")
	}
	return appendUnquoteBody(dst, s[1:len(s)-1])
}

// plain reports whether body needs no decoding: no escapes, no quotes, no
// control characters and valid UTF-8.
func plain(body []byte) bool {
	ascii := true
	for _, c := range body {
		if c < 0x20 || c == '\\' || c == '"' {
			return false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return ascii || utf8.Valid(body)
}

func unhex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// appendUnquoteBody decodes a string body (between the quotes).
func appendUnquoteBody(dst, body []byte) ([]byte, error) {
	for i := 0; i < len(body); {
		c := body[i]
		switch {
		case c == '\\':
			if i+1 >= len(body) {
				return dst, syntaxErr(i, "unterminated escape")
			}
			e := body[i+1]
			switch e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				if len(body)-i < 6 {
					return dst, syntaxErr(i, `invalid \u escape`)
				}
				r := unhex4(body[i+2:])
				if r < 0 {
					return dst, syntaxErr(i, `invalid \u escape`)
				}
				i += 6
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if len(body)-i >= 6 && body[i] == '\\' && body[i+1] == 'u' {
						r2 = unhex4(body[i+2:])
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default:
				return dst, syntaxErr(i, "invalid escape")
			}
			i += 2
		case c == '"':
			return dst, syntaxErr(i, "unescaped quote in string")
		case c < 0x20:
			return dst, syntaxErr(i, "control character in string")
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, body[i:i+size]...)
			}
			i += size
		}
	}
	return dst, nil
}

// CountNumberArrays counts the arrays in the JSON value v whose first
// element is a number (NaN and Infinity included): in a GeoJSON geometry,
// its positions. Strings are skipped; the count is a best effort on
// malformed input and never fails. It runs eight bytes at a time between
// brackets and quotes.
func CountNumberArrays(v []byte) int {
	count := 0
	n := len(v)
	for i := 0; i < n; {
		if i+8 <= n {
			w := le64(v[i : i+8])
			m := zeroBytes(w^bc5b) | zeroBytes(w^bc22)
			if m == 0 {
				i += 8
				continue
			}
			i += int(trailingBytes(m))
		}
		switch v[i] {
		case '[':
			j := skipWS(v, i+1)
			if j < n && class[v[j]]&clsNum != 0 {
				count++
			}
			i = j
		case '"':
			end, _, err := skipString(v, i)
			if err != nil {
				return count
			}
			i = end
		default:
			i++
		}
	}
	return count
}
