package broker_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

func indexedOf(t testing.TB, payload string) broker.Indexed {
	t.Helper()
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Now: func() time.Time { return time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC) }})
	require.NoError(t, err)
	env, body, err := b.Build(t.Context(), envelope.Input{Payload: []byte(payload), IdempotencyKey: "k", Attempts: 3,
		Err: classify.InvalidGeometry(errors.New("Self-intersection[1 2]"))})
	require.NoError(t, err)
	x := broker.IndexOf(&broker.Message{Body: body, Headers: map[string]string{broker.HeaderReplayOf: "7"}})
	require.Equal(t, broker.IndexOfEnvelope(env, int64(len(body)), map[string]string{broker.HeaderReplayOf: "7"}), x,
		"the decoded envelope gives what the body does")
	return x
}

func TestIndexOfAttrs(t *testing.T) {
	tests := []struct {
		name, payload, attrs string
	}{
		{"feature", `{"type":"Feature","event_id":"e1","source_uri":"s3://b/k","properties":{"name":"Sudan","pop":4.5e7,"ok":true,"none":null},"geometry":{"type":"Point","coordinates":[1,2]}}`,
			"\n/type\tFeature\n/event_id\te1\n/source_uri\ts3://b/k\n/properties/name\tSudan\n/properties/pop\t4.5e7\n/properties/ok\ttrue\n"},
		{"escaped keys and values", `{"a/b":"x\ty\nz","c~d":"\u00e9\"q","bbox":[1,2,3,4],"geometry":null}`,
			"\n/a~1b\tx y z\n/c~0d\té\"q\n"},
		{"arrays and nesting", `{"tags":["a",1,{"k":"v","coordinates":[[1,2]]}],"p":{"q":{"r":{"s":{"t":{"u":{"deep":"x"}}}}}}}`,
			"\n/tags/0\ta\n/tags/1\t1\n/tags/2/k\tv\n"},
		{"not an object", `[1,2,3]`, "\n"},
		{"string payload", `"just text"`, "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.attrs, indexedOf(t, tc.payload).Attrs)
		})
	}
}

func TestIndexOfSummary(t *testing.T) {
	x := indexedOf(t, `{"event_id":"evt-1","properties":{"name":"South Sudan"},"geometry":{"type":"LineString","coordinates":[[0,0],[1,1],[2,0]]}}`)
	s := x.Summary
	require.True(t, s.Envelope)
	require.Equal(t, "evt-1", s.EventID)
	require.Equal(t, classify.ClassInvalidGeometry, s.Class)
	require.Equal(t, "LineString", s.GeometryType)
	require.Equal(t, 3, s.VertexCount)
	require.Equal(t, int64(len(`{"type":"LineString","coordinates":[[0,0],[1,1],[2,0]]}`)), s.GeometryBytes)
	require.Equal(t, 3, s.Attempts)
	require.Equal(t, "Self-intersection[1 2]", s.Reason)
	require.Equal(t, classify.ReasonKind("self_intersection"), s.ReasonKind)
	require.Equal(t, "7", s.ReplayOf)
	require.Equal(t, time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC), s.DeadLetteredAt)
	require.Contains(t, x.Search, "south sudan", "properties are searched, lower-cased")
	require.Contains(t, x.Search, "self-intersection[1 2]")
	require.NotContains(t, x.Search, "/properties/name", "pointers are not searched")

	notEnv := broker.IndexOf(&broker.Message{Body: []byte("nope")})
	require.False(t, notEnv.Summary.Envelope)
	require.Equal(t, int64(4), notEnv.Summary.BodyBytes)
	require.Equal(t, "\n", notEnv.Attrs)
}

func TestIndexOfBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"long":"` + strings.Repeat("é", 600) + `","properties":{`)
	for i := range 400 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strings.Repeat("x", i%7) + `":"value"`)
	}
	b.WriteString(`},"geometry":{"type":"Point","coordinates":[1,2]}}`)
	x := indexedOf(t, b.String())
	require.LessOrEqual(t, len(x.Attrs), broker.MaxAttrsBytes)
	v := broker.SourceValue(x.Attrs, "/long")
	require.LessOrEqual(t, len(v), broker.MaxSummaryText)
	require.True(t, utf8.ValidString(v) && strings.HasSuffix(v, "…"), "a long value is cut on a character boundary")
}

func TestSourceValueAndGroup(t *testing.T) {
	attrs := "\n/source_uri\ts3://provider-b/2026/05/x.geojson\n/properties/provider\tign\n/properties/provider2\tosm\n"
	require.Equal(t, "s3://provider-b/2026/05/x.geojson", broker.SourceValue(attrs, ""))
	require.Equal(t, "ign", broker.SourceValue(attrs, "/properties/provider"))
	require.Equal(t, "osm", broker.SourceValue(attrs, "/properties/provider2"))
	require.Equal(t, "", broker.SourceValue(attrs, "/properties"))
	require.Equal(t, "", broker.SourceValue(attrs, "/missing"))
	for _, tc := range []struct {
		v     string
		depth int
		want  string
	}{
		{"s3://provider-b/2026/05/x.geojson", 1, "s3://provider-b"},
		{"s3://provider-b/2026/05/x.geojson", 2, "s3://provider-b/2026"},
		{"s3://provider-b/2026/05/x.geojson", 0, "s3://provider-b/2026/05/x.geojson"},
		{"s3://provider-b", 3, "s3://provider-b"},
		{"a/b/c", 1, "a"},
		{"a/b/c", 2, "a/b"},
		{"ign", 1, "ign"},
		{"", 1, ""},
	} {
		require.Equal(t, tc.want, broker.SourceGroup(tc.v, tc.depth), "%q at depth %d", tc.v, tc.depth)
	}
}

func TestValidSourcePointer(t *testing.T) {
	for _, p := range []string{"", "/source_uri", "/properties/provider", "/a~1b/c~0d", "/tags/0"} {
		require.NoError(t, broker.ValidSourcePointer(p), p)
	}
	for _, p := range []string{"source_uri", "/a~2", "/a\tb", "/a\nb", "/1/2/3/4/5/6/7", "/" + strings.Repeat("x", 300), "/\xff"} {
		require.ErrorIs(t, broker.ValidSourcePointer(p), broker.ErrInvalidArgument, "%q", p)
	}
	require.ErrorIs(t, broker.Filter{SourcePointer: "nope"}.Validate(), broker.ErrInvalidArgument)
	require.ErrorIs(t, broker.Filter{Text: strings.Repeat("x", broker.MaxSearchText+1)}.Validate(), broker.ErrInvalidArgument)
	require.True(t, broker.Filter{SourcePointer: "/p"}.IsZero(), "a pointer alone selects nothing")
	require.False(t, broker.Filter{Text: "x"}.IsZero())
}

func TestSearchFold(t *testing.T) {
	require.Equal(t, "ÉCOLE sudan", strings.ToUpper("école")+" sudan")
	require.Equal(t, "école sudan", broker.SearchFold("ÉCOLE Sudan"))
	require.Equal(t, "a b \uFFFD", broker.SearchFold("A\x00B\n\xff"))
}

// FuzzIndexOf: any payload indexes without panicking into attributes of
// the documented shape, within their bounds.
func FuzzIndexOf(f *testing.F) {
	for _, s := range []string{
		`{"type":"Feature","properties":{"name":"Sudan"},"geometry":{"type":"Point","coordinates":[1,2]}}`,
		`{"a":{"b":[1,{"c":"d"}]},"e":"\u0000\ud800"}`, `{"a":`, `{"a":"b",}`, `[]`, `{`, `{"a"}`, "{\"\\u", "",
	} {
		f.Add([]byte(s))
	}
	b, err := envelope.NewBuilder(nil)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, payload []byte) {
		env, body, err := b.Build(t.Context(), envelope.Input{Payload: payload, IdempotencyKey: "k", Attempts: 1,
			Err: classify.Transient(errors.New("x"))})
		if err != nil {
			return
		}
		x := broker.IndexOfEnvelope(env, int64(len(body)), nil)
		a := x.Attrs
		if len(a) > broker.MaxAttrsBytes || !strings.HasPrefix(a, "\n") || !strings.HasSuffix(a, "\n") || !utf8.ValidString(a) {
			t.Fatalf("attributes %q", a)
		}
		if a == "\n" {
			return
		}
		for _, line := range strings.Split(a[1:len(a)-1], "\n") {
			if strings.Count(line, "\t") != 1 || !strings.HasPrefix(line, "/") {
				t.Fatalf("attribute line %q in %q", line, a)
			}
		}
		if !utf8.ValidString(x.Search) || !utf8.ValidString(x.Summary.Reason) {
			t.Fatal("invalid UTF-8 kept")
		}
	})
}
