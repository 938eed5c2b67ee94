package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTerminalSafe(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		keepLines      bool
	}{
		{"plain text is untouched", "Self-intersection[0.5 0.5] é 東京", "Self-intersection[0.5 0.5] é 東京", false},
		{"OSC title", "evt-\x1b]0;pwned\x07", `evt-\x1b]0;pwned\x07`, false},
		{"CSI clear screen", "\x1b[2J\x1b[H", `\x1b[2J\x1b[H`, false},
		{"8-bit CSI (C1)", "a\u009b2Jb", `a\u009b2Jb`, false},
		{"DEL and NUL", "a\x7fb\x00", `a\x7fb\x00`, false},
		{"bidi override", "invoice\u202egpj.exe", `invoice\u202egpj.exe`, false},
		{"isolate", "a\u2066b\u2069", `a\u2066b\u2069`, false},
		{"invalid UTF-8", "a\xffb", `a\xffb`, false},
		{"newlines in a cell", "a\nb\tc", `a\x0ab\x09c`, false},
		{"newlines in a payload", "a\nb\tc\r", "a\nb\tc\\x0d", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, terminalSafe(tc.in, tc.keepLines))
		})
	}
}

// TestHostileStringsDoNotReachTheTerminal: an event id and a payload that
// carry escape sequences are printed escaped by list, show and show's
// payload view, never as bytes a terminal would act on.
func TestHostileStringsDoNotReachTheTerminal(t *testing.T) {
	t.Parallel()
	dir := fastDir(t)
	c := cli{t: t, store: "sqlite://" + filepath.Join(dir, "dlq.db")}
	ev := []byte(`{"event_id":"evt-\u001b]0;pwned\u0007-\u001b[2J-\u009b31m-\u202e","crs":"EPSG:4326","note":"\u001b]52;c;cm0gLXJmIH4=\u0007","geometry":` + bowtieGeom + "}\n")
	c.must(exitProblems, ev, "check", "--dead-letter", "parcels", "-o", "json")
	for _, args := range [][]string{
		{"list"}, {"list", "-o", "wide"}, {"show", "1"},
	} {
		r := c.must(exitOK, nil, args...)
		out := []byte(r.stdout)
		require.Contains(t, r.stdout, `evt-\x1b]0;pwned\x07`, "%v shows the id, escaped", args)
		for _, bad := range []string{"\x1b", "\x07", "\u009b", "\u202e"} {
			require.False(t, bytes.Contains(out, []byte(bad)), "%v printed %q raw:\n%s", args, bad, out)
		}
	}
}
