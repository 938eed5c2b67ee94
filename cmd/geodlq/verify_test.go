package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type verifyOutput struct {
	Blobs []blobCheck `json:"blobs"`
	OK    int         `json:"ok"`
	Bad   int         `json:"bad"`
}

// blobFile returns the one blob file of the seeded store.
func blobFile(t *testing.T, c cli) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(strings.TrimPrefix(c.blobs, "file://"), "geodlq", "*.geojson"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	return files[0]
}

// TestVerify proves verify reads each shared blob once, passes intact
// blobs, and reports altered, truncated and missing ones with exit 1.
func TestVerify(t *testing.T) {
	t.Parallel()
	c := seeded(t)
	var out verifyOutput
	require.NoError(t, json.Unmarshal([]byte(c.must(exitOK, nil, "verify", "-o", "json").stdout), &out))
	require.Len(t, out.Blobs, 1, "one blob shared by two envelopes")
	require.Len(t, out.Blobs[0].Records, 2)
	require.Equal(t, "ok", out.Blobs[0].Status)

	f := blobFile(t, c)
	orig, err := os.ReadFile(f)
	require.NoError(t, err)
	tests := []struct {
		name   string
		alter  func() error
		status string
	}{
		{"one byte changed", func() error {
			b := append([]byte(nil), orig...)
			b[len(b)/2] ^= 1
			return os.WriteFile(f, b, 0o640)
		}, "hash_mismatch"},
		{"truncated", func() error { return os.WriteFile(f, orig[:len(orig)-10], 0o640) }, "truncated"},
		{"extended", func() error { return os.WriteFile(f, append(append([]byte(nil), orig...), ' '), 0o640) }, "extended"},
		{"missing", func() error { return os.Remove(f) }, "missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := c
			c.t = t
			require.NoError(t, tt.alter())
			t.Cleanup(func() { require.NoError(t, os.WriteFile(f, orig, 0o640)) })
			var out verifyOutput
			require.NoError(t, json.Unmarshal([]byte(c.must(exitProblems, nil, "verify", "-o", "json").stdout), &out))
			require.Equal(t, tt.status, out.Blobs[0].Status)
			require.Equal(t, 1, out.Bad)
			r := c.must(exitProblems, nil, "verify")
			require.Contains(t, r.stdout, tt.status)
			require.Contains(t, r.stdout, "1 missing or altered")
			c.must(exitProblems, nil, "show", "evt-big-1")
		})
	}
	noBlobs := c
	noBlobs.blobs = ""
	noBlobs.must(exitUsage, nil, "verify")
}
