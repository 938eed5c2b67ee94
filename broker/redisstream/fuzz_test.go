package redisstream

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzCursor: a List cursor comes from the caller (a command line, an
// HTTP query): any string is either refused with an error or parsed into
// a position that prints back to itself.
func FuzzCursor(f *testing.F) {
	for _, s := range []string{"", "1-2/a", "0-0/", "18446744073709551615-18446744073709551615/d/e", "1-2", "x-1/a", "1-2/" + strings.Repeat("d", 300), "-1-2/a", "1--2/a", "01-2/a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parseCursor(s)
		if err != nil {
			return
		}
		again, err := parseCursor(p.cursor())
		require.NoError(t, err)
		require.Equal(t, p, again)
	})
}

// FuzzMessage: entries are read back from Redis, where anything may have
// written them: any field list (odd lengths, duplicate names, binary
// values, no body) becomes a message without a panic, and an entry
// without a body field keeps every field in a JSON body.
func FuzzMessage(f *testing.F) {
	f.Add("body", "x", "key", "k", "h:a", "1", 3)
	f.Add("v", "1", "h:", "\x00\xff", "", "", 6)
	f.Add("sensor", "7", "reading", "41.5", "body", "", 5)
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2, n3, v3 string, count int) {
		all := []any{n1, v1, n2, v2, n3, v3}
		if count < 0 {
			count = -count
		}
		fields := all[:count%(len(all)+1)]
		m := message(fields, 1)
		require.NotNil(t, m.Body)
		hasBody := false
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == fieldBody {
				hasBody = true
			}
		}
		if !hasBody {
			var v any
			require.NoError(t, json.Unmarshal(m.Body, &v), "%q", m.Body)
			switch v := v.(type) {
			case map[string]any:
				require.Len(t, v, len(fields)/2, "an object only when no field is lost: %q", m.Body)
			case []any:
				require.Len(t, v, len(fields)/2, "every pair: %q", m.Body)
			default:
				t.Fatalf("body %q", m.Body)
			}
		}
		_ = digest(m)
	})
}
