// Package idemkey derives and checks geodlq idempotency keys.
//
// A key has the form
//
//	idem:v1:<64 lowercase hex digits>
//
// where the hex digits are the SHA-256 digest of a length-prefixed
// encoding of a namespace and zero or more parts. The layout is fixed so
// that producers written in other languages can derive the same key:
//
//	for each field in [namespace, part0, part1, …]:
//	    8 bytes: len(field) as an unsigned 64-bit big-endian integer
//	    len(field) bytes: the field itself
//
// The namespace is encoded as UTF-8 bytes exactly as given. There is no
// separator and no trailing count: the length prefixes alone make the
// encoding injective, so ("a", "bc") and ("ab", "c") never collide, and
// neither do a nil part and an empty one versus no part at all (the number
// of length prefixes differs).
//
// For example, Derive("orders", []byte("42")) hashes the 24 bytes
//
//	00 00 00 00 00 00 00 06  'o' 'r' 'd' 'e' 'r' 's'
//	00 00 00 00 00 00 00 02  '4' '2'
//
// In Python: hashlib.sha256(b"".join(len(f).to_bytes(8, "big") + f for f
// in [ns.encode(), *parts])).hexdigest().
package idemkey

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Prefix is the fixed prefix of every version 1 key.
const Prefix = "idem:v1:"

// Len is the length of a version 1 key: the prefix and 64 hex digits.
const Len = len(Prefix) + 2*sha256.Size

// Derive returns the key for namespace and parts, following the byte
// layout in the package documentation. It never fails and allocates only
// the returned string.
func Derive(namespace string, parts ...[]byte) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(namespace)))
	h.Write(n[:])
	h.Write([]byte(namespace))
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	var out [Len]byte
	copy(out[:], Prefix)
	hex.Encode(out[len(Prefix):], sum[:])
	return string(out[:])
}

// Valid reports whether key has the version 1 form: "idem:v1:" followed by
// exactly 64 lowercase hexadecimal digits. It does not (and cannot) say
// whether the key was derived by [Derive]; keys assigned by other systems
// are carried verbatim by geodlq whatever their form.
func Valid(key string) bool {
	if len(key) != Len || key[:len(Prefix)] != Prefix {
		return false
	}
	for i := len(Prefix); i < len(key); i++ {
		c := key[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
