package idemkey_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/idemkey"
)

func TestDeriveLayout(t *testing.T) {
	// The documented example, byte for byte.
	msg := []byte{0, 0, 0, 0, 0, 0, 0, 6, 'o', 'r', 'd', 'e', 'r', 's', 0, 0, 0, 0, 0, 0, 0, 2, '4', '2'}
	sum := sha256.Sum256(msg)
	require.Equal(t, "idem:v1:"+hex.EncodeToString(sum[:]), idemkey.Derive("orders", []byte("42")))
}

func TestDeriveKnownVector(t *testing.T) {
	// Pinned so that an accidental change of layout is caught; reproduce with
	// python3 -c 'import hashlib; print(hashlib.sha256(bytes(8)).hexdigest())'.
	require.Equal(t, "idem:v1:af5570f5a1810b7af78caf4bc70a660f0df51e42baf91d4de5b2328de0e83dfc", idemkey.Derive(""))
}

func TestDeriveInjective(t *testing.T) {
	keys := map[string]string{}
	cases := []struct {
		name  string
		ns    string
		parts [][]byte
	}{
		{"ns only", "a", nil},
		{"empty part", "a", [][]byte{{}}},
		{"two empty parts", "a", [][]byte{{}, {}}},
		{"split 1", "a", [][]byte{[]byte("bc")}},
		{"split 2", "ab", [][]byte{[]byte("c")}},
		{"split 3", "a", [][]byte{[]byte("b"), []byte("c")}},
		{"nul", "a", [][]byte{[]byte("b\x00c")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := idemkey.Derive(tc.ns, tc.parts...)
			require.True(t, idemkey.Valid(k))
			require.Len(t, k, idemkey.Len)
			prev, dup := keys[k]
			require.False(t, dup, "collides with %s", prev)
			keys[k] = tc.name
			require.Equal(t, k, idemkey.Derive(tc.ns, tc.parts...), "deterministic")
		})
	}
}

func TestValid(t *testing.T) {
	good := "idem:v1:" + strings.Repeat("0a", 32)
	cases := []struct {
		key  string
		want bool
	}{
		{good, true},
		{"idem:v1:" + strings.Repeat("f", 64), true},
		{"", false},
		{"idem:v1:", false},
		{"idem:v1:abc", false},
		{"idem:v1:" + strings.Repeat("F", 64), false},
		{"idem:v1:" + strings.Repeat("g", 64), false},
		{"idem:v2:" + strings.Repeat("0", 64), false},
		{"IDEM:v1:" + strings.Repeat("0", 64), false},
		{good + "0", false},
		{good[:len(good)-1], false},
		{" " + good[1:], false},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, idemkey.Valid(tc.key), "%q", tc.key)
	}
}

func BenchmarkDerive(b *testing.B) {
	payload := make([]byte, 512)
	b.ReportAllocs()
	for b.Loop() {
		idemkey.Derive("geodlq", payload)
	}
}
