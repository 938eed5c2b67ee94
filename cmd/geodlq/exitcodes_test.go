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
		{"bad reason", missing, []string{"list", "--reason", "bogus"}, exitUsage, "--reason \"bogus\": want one of self_intersection"},
		{"bad stage", missing, []string{"stats", "--stage", "bogus"}, exitUsage, "--stage \"bogus\""},
		{"bad reason on replay", missing, []string{"replay", "--reason", "bogus"}, exitUsage, "Run 'geodlq replay --help' for usage."},
		{"replay concurrency 0", missing, []string{"replay", "--concurrency", "0"}, exitUsage, "--concurrency must be between 1 and 64"},
		{"replay concurrency too high", missing, []string{"replay", "--concurrency", "65"}, exitUsage, "--concurrency must be between 1 and 64"},
		{"bad reason on export", missing, []string{"export", "--reason", "bogus"}, exitUsage, "Run 'geodlq export --help' for usage."},
		{"bad output format", missing, []string{"list", "-o", "yaml"}, exitUsage, "-o \"yaml\": want table, wide, json, jsonl"},
		{"-o with a file name", missing, []string{"render", "x", "-o", "x.svg"}, exitUsage, "-o is the output format"},
		{"bad sort", missing, []string{"list", "--sort", "colour"}, exitUsage, "--sort"},
		{"bad cursor", missing, []string{"list", "--after", "not-a-cursor"}, exitUsage, "--after"},
		{"discard without ids", missing, []string{"discard"}, exitUsage, "name the records"},
		{"bad time", missing, []string{"list", "--since", "yesterday"}, exitUsage, "--since"},
		{"bad bbox", missing, []string{"list", "--bbox", "1,2,3"}, exitUsage, "--bbox"},
		{"extra argument", missing, []string{"list", "x"}, exitUsage, "takes no arguments"},
		{"purge without --older-than", missing, []string{"purge"}, exitUsage, "--older-than"},
		{"unknown store scheme", "mongodb://x", []string{"list"}, exitUsage, "scheme \"mongodb\""},
		{"a store scheme mistyped", "sqlit://./x.db", []string{"list"}, exitUsage, `did you mean "sqlite"?`},
		{"not a URL", "dlq.db", []string{"list"}, exitUsage, "not a URL"},
		{"missing store file", missing, []string{"list"}, exitStore, "no geodlq store here"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := cli{t: t, store: tt.store}.must(tt.code, nil, tt.args...)
			require.Contains(t, r.stderr, tt.stderr)
		})
	}
}
