package kafka

import (
	"errors"
	"strings"
	"testing"

	"github.com/geodlq/geodlq/broker"
)

// FuzzCursor: a list cursor comes back from the caller. parseCursor either
// refuses it with ErrInvalidArgument or returns a cursor whose text form
// parses to the same cursor; it never panics, and never accepts more than
// maxCursorLen bytes.
func FuzzCursor(f *testing.F) {
	for _, s := range []string{
		"", "o1:", "n1:t", "o1:t:*", "o1:spatial.events.poison.dlt:0=5,1=7", "n1:a:0=0",
		"o1:t:0=1,0=2", "o1:t:-1=0", "o1:t:0=99999999999999999999", "o1:a/b:0=0", "o1:t:0=1,",
		"o1:" + strings.Repeat("t", 250) + ":0=0", "o1:t:" + strings.Repeat("1=1,", 5000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseCursor(s)
		if err != nil {
			if !errors.Is(err, broker.ErrInvalidArgument) {
				t.Fatalf("parseCursor(%q): %v does not wrap ErrInvalidArgument", s, err)
			}
			return
		}
		if len(s) > maxCursorLen {
			t.Fatalf("accepted a cursor of %d bytes", len(s))
		}
		again, err := parseCursor(c.String())
		if err != nil {
			t.Fatalf("the text form %q of an accepted cursor does not parse: %v", c.String(), err)
		}
		if again.String() != c.String() || again.newest != c.newest || again.topic != c.topic || again.done != c.done || len(again.pos) != len(c.pos) {
			t.Fatalf("round trip changed the cursor: %+v -> %+v", c, again)
		}
		for p, off := range c.pos {
			if p < 0 || off < 0 || again.pos[p] != off {
				t.Fatalf("bad position %d=%d in %+v", p, off, again)
			}
		}
	})
}

// FuzzSpans: commit metadata is read back from the cluster, where any
// member of the group may have written it. decodeSpans returns sorted,
// disjoint, non-adjacent spans or nothing, and encodeSpans of them stays
// within Kafka's metadata limit.
func FuzzSpans(f *testing.F) {
	for _, s := range []string{"", "member-1", ackedPrefix, ackedPrefix + "3-4,9", ackedPrefix + "5-3", ackedPrefix + "1,1,1",
		ackedPrefix + "9223372036854775807", ackedPrefix + "-1", ackedPrefix + strings.Repeat("1-2,", 1000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spans := decodeSpans(s)
		for i, sp := range spans {
			if sp.from > sp.to {
				t.Fatalf("span %v is reversed", sp)
			}
			if sp.from < 0 {
				t.Fatalf("span %v is negative", sp)
			}
			if i > 0 && sp.from-1 <= spans[i-1].to {
				t.Fatalf("spans %v and %v overlap or touch: merge joins them", spans[i-1], sp)
			}
		}
		if meta := encodeSpans(spans); len(meta) > maxMetadata {
			t.Fatalf("metadata of %d bytes", len(meta))
		}
	})
}
