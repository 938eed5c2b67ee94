package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExitCodes proves the documented exit codes for usage and store
// errors (1 and 130 are proven by the check, verify and replay tests).
func TestExitCodes(t *testing.T) {
	t.Parallel()
	missing := "sqlite://" + filepath.Join(t.TempDir(), "missing.db")
	tests := []struct {
		name   string
		store  string
		args   []string
		code   int
		stderr string
	}{
		{"help", missing, []string{"--help"}, exitOK, ""},
		{"unknown command", missing, []string{"frobnicate"}, exitUsage, "unknown command"},
		{"unknown flag", missing, []string{"list", "--frob"}, exitUsage, "unknown flag"},
		{"bad class", missing, []string{"list", "--class", "bogus"}, exitUsage, "--class \"bogus\""},
		{"bad time", missing, []string{"list", "--since", "yesterday"}, exitUsage, "--since"},
		{"bad bbox", missing, []string{"list", "--bbox", "1,2,3"}, exitUsage, "--bbox"},
		{"extra argument", missing, []string{"list", "x"}, exitUsage, "takes no arguments"},
		{"purge without --older-than", missing, []string{"purge"}, exitUsage, "--older-than"},
		{"render without -o", missing, []string{"render", "x"}, exitUsage, "-o"},
		{"unknown store scheme", "mongodb://x", []string{"list"}, exitUsage, "scheme \"mongodb\""},
		{"not a URL", "dlq.db", []string{"list"}, exitUsage, "not a URL"},
		{"missing store file", missing, []string{"list"}, exitStore, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := cli{t: t, store: tt.store}.must(tt.code, nil, tt.args...)
			require.Contains(t, r.stderr, tt.stderr)
		})
	}
}
