package ingress

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// TestReadAll: the body buffer grows with the bytes that arrive; the
// claimed length only caps the growth (so an honest body ends in a buffer
// of its exact size) and never sizes an allocation beyond maxPreallocate.
func TestReadAll(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB
	tests := []struct {
		name    string
		claimed int64
		body    []byte
		maxCap  int
	}{
		{"honest claim", int64(len(body)), body, len(body)},
		{"no claim", -1, body, 2 * len(body)},
		{"claim too small", 1000, body, 2 * len(body)},
		{"claim of a terabyte, ten bytes sent", 1 << 40, body[:10], maxPreallocate},
		{"empty body", 0, nil, 512},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAll(iotest.HalfReader(bytes.NewReader(tt.body)), tt.claimed)
			require.NoError(t, err)
			require.True(t, bytes.Equal(tt.body, got))
			require.LessOrEqual(t, cap(got), tt.maxCap)
		})
	}
	boom := errors.New("connection reset")
	_, err := readAll(io.MultiReader(bytes.NewReader(body[:100]), iotest.ErrReader(boom)), int64(len(body)))
	require.ErrorIs(t, err, boom)
	_, err = readAll(io.MultiReader(bytes.NewReader(body[:100]), iotest.ErrReader(boom)), 100)
	require.ErrorIs(t, err, boom, "an error after exactly the claimed bytes is still an error")
}
