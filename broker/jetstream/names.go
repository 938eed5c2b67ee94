package jetstream

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// subjectToken maps a destination name onto a single NATS subject token.
// ASCII letters, digits and '-' are kept; every other byte (including '.',
// which would split the token, '*' and '>', which are wildcards, and '_',
// the escape character itself) becomes '_' followed by two upper-case hex
// digits. The mapping is one-to-one: "orders.poison.dlt" becomes
// "orders_2Epoison_2Edlt", and [destinationOfToken] reverses it.
//
// The token is also valid in stream and consumer names.
func subjectToken(destination string) string {
	const hexdig = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(destination) + 8)
	for i := 0; i < len(destination); i++ {
		c := destination[i]
		if kept(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hexdig[c>>4])
		b.WriteByte(hexdig[c&0x0f])
	}
	return b.String()
}

// kept reports whether subjectToken keeps c as it is.
func kept(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// errNotToken is returned by destinationOfToken for a token subjectToken
// does not make.
var errNotToken = errors.New("jetstream: not a subject token of a destination")

// destinationOfToken reverses [subjectToken]. It refuses every token
// subjectToken does not make — a byte it would have escaped, an escape of
// a byte it keeps, lower-case hex — so that a subject someone else
// published under the store's prefix is never taken for a destination's.
func destinationOfToken(token string) (string, error) {
	var b strings.Builder
	b.Grow(len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		if kept(c) {
			b.WriteByte(c)
			continue
		}
		if c != '_' || i+2 >= len(token) {
			return "", errNotToken
		}
		hi, ok1 := unhex(token[i+1])
		lo, ok2 := unhex(token[i+2])
		if !ok1 || !ok2 || kept(hi<<4|lo) {
			return "", errNotToken
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	return b.String(), nil
}

// unhex decodes an upper-case hex digit.
func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// maxNameLen bounds consumer names; the server's own limit is larger, but
// names also become parts of subjects and file names.
const maxNameLen = 200

// consumerName returns the durable consumer name for a replayer and a
// destination: "<replayer>_<token>", or, when that would be too long,
// "<replayer>_h<hash>".
func consumerName(replayer, destination string) string {
	n := replayer + "_" + subjectToken(destination)
	if len(n) <= maxNameLen {
		return n
	}
	sum := sha256.Sum256([]byte(destination))
	return replayer + "_h" + hex.EncodeToString(sum[:16])
}

// validName reports whether s can be a stream or consumer name.
func validName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	return !strings.ContainsAny(s, ".*> \t\r\n/\\")
}

// validPrefix reports whether s is a literal subject prefix (tokens without
// wildcards or whitespace).
func validPrefix(s string) bool {
	if s == "" || strings.ContainsAny(s, "*> \t\r\n") {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return false
		}
	}
	return true
}
