package corpus

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
)

// TestKeyed checks the keyed stream against encoding/json, where it reads
// the event (NaN and Infinity tokens it does not), and its coverage: every
// failure kind of the corpus both with and without a key.
func TestKeyed(t *testing.T) {
	evs := Keyed()
	names := map[string]bool{}
	withKey, withoutKey := map[string]int{}, map[string]int{}
	for _, ev := range evs {
		require.False(t, names[ev.Name], "duplicate %s", ev.Name)
		names[ev.Name] = true
		var m map[string]json.RawMessage
		if err := json.Unmarshal(ev.Item.Payload, &m); err == nil {
			want := ""
			if raw, ok := m[KeyMember]; ok {
				var s string
				switch {
				case json.Unmarshal(raw, &s) == nil:
					want = s
				case len(raw) > 0 && raw[0] != 'n':
					want = string(raw) // a number, as written
				}
			}
			require.Equal(t, want, ev.Key, ev.Name)
		} else {
			nonFinite := bytes.Contains(ev.Item.Payload, []byte("NaN")) || bytes.Contains(ev.Item.Payload, []byte("Infinity"))
			require.True(t, nonFinite || ev.Key == "", "%s: not JSON, yet a key: %v", ev.Name, err)
		}
		if strings.HasSuffix(ev.Name, "/truncated") || strings.HasSuffix(ev.Name, "/not-an-object") {
			require.Contains(t, string(ev.Item.Payload), `"`+KeyMember+`"`, "%s: a key-like text", ev.Name)
			require.Equal(t, classify.ClassSchemaViolation, ev.Item.Class, ev.Name)
		}
		kind := string(ev.Item.Kind)
		if ev.Key != "" {
			withKey[kind]++
		} else {
			withoutKey[kind]++
		}
	}
	for _, it := range All() {
		require.Positive(t, withKey[string(it.Kind)], "kind %q with a key", it.Kind)
		require.Positive(t, withoutKey[string(it.Kind)], "kind %q without a key", it.Kind)
	}
	require.GreaterOrEqual(t, len(evs), 300)
	again := Keyed()
	require.Equal(t, evs, again, "deterministic")
}
