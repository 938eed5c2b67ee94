package envelope

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The hand-written checks are the schema's patterns, only faster: they
// must agree with the regular expressions compiled from the schema file.
func TestWireChecksMatchSchemaPatterns(t *testing.T) {
	for _, s := range wireTimeSeeds {
		require.Equal(t, schemaPatterns().time.MatchString(s), isTime(s, 0), "time %q", s)
		require.Equal(t, schemaPatterns().recordTime.MatchString(s), isTime(s, 2), "record time %q", s)
	}
	for _, s := range []string{"", "a", "event_id", "Event_id", "_x", "x_", "a1", "1a", "ſource", "a-b", "a b", "raw_payload"} {
		require.Equal(t, schemaPatterns().name.MatchString(s), isMemberName([]byte(s)), "name %q", s)
	}
}

var wireTimeSeeds = []string{
	"2026-03-14T15:09:26Z", "2026-03-14T15:09:26.535897Z", "2026-03-14t15:09:26z", "2026-03-14T15:09:60Z",
	"0000-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "0002-01-01T00:00:00Z", "0001-12-31T23:59:59-01:00",
	"2026-02-29T00:00:00Z", "2024-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "0000-02-29T00:00:00Z",
	"0004-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-12-31T23:59:59Z", "2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z",
	"2026-03-14T24:00:00Z", "2026-03-14T15:09:26.Z", "2026-03-14T15:09:26,5Z", "2026-03-14T15:09:26-00:00",
	"2026-03-14T15:09:26+24:00", "2026-03-14T15:09:26+23:59", "2026-03-14T15:09:26+05:60", "2026-03-14 15:09:26Z",
	"2026-3-14T15:09:26Z", "+2026-03-14T15:09:26Z", "2026-03-14T15:09:26", "2026-03-14T15:09:26+0500", "2026-03-14T15:09:26Z\n",
	"2026-03-14T15:09:26.1234567891234Z", "9999-12-31T23:59:59.999999999Z", "2026-03-14T15:09:26+05:3a",
}

func FuzzWireTime(f *testing.F) {
	for _, s := range wireTimeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if schemaPatterns().time.MatchString(s) != isTime(s, 0) || schemaPatterns().recordTime.MatchString(s) != isTime(s, 2) {
			t.Fatalf("%q: pattern %v/%v, isTime %v/%v", s, schemaPatterns().time.MatchString(s), schemaPatterns().recordTime.MatchString(s),
				isTime(s, 0), isTime(s, 2))
		}
	})
}
