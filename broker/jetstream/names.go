package jetstream

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// SubjectToken maps a destination name onto a single NATS subject token.
// ASCII letters, digits and '-' are kept; every other byte (including '.',
// which would split the token, '*' and '>', which are wildcards, and '_',
// the escape character itself) becomes '_' followed by two upper-case hex
// digits. The mapping is one-to-one: "orders.poison.dlt" becomes
// "orders_2Epoison_2Edlt", and [DestinationOfToken] reverses it.
//
// The token is also valid in stream and consumer names.
func SubjectToken(destination string) string {
	const hexdig = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(destination) + 8)
	for i := 0; i < len(destination); i++ {
		c := destination[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
			b.WriteByte(hexdig[c>>4])
			b.WriteByte(hexdig[c&0x0f])
		}
	}
	return b.String()
}

// DestinationOfToken reverses [SubjectToken].
func DestinationOfToken(token string) (string, error) {
	var b strings.Builder
	b.Grow(len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		if c != '_' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(token) {
			return "", errors.New("jetstream: truncated escape in subject token")
		}
		v, err := hex.DecodeString(token[i+1 : i+3])
		if err != nil || token[i+1] >= 'a' || token[i+2] >= 'a' {
			return "", errors.New("jetstream: bad escape in subject token")
		}
		b.WriteByte(v[0])
		i += 2
	}
	return b.String(), nil
}

// maxNameLen bounds consumer names; the server's own limit is larger, but
// names also become parts of subjects and file names.
const maxNameLen = 200

// consumerName returns the durable consumer name for a replayer and a
// destination: "<replayer>_<token>", or, when that would be too long,
// "<replayer>_h<hash>".
func consumerName(replayer, destination string) string {
	n := replayer + "_" + SubjectToken(destination)
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
