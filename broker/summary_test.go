package broker_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
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

// TestSourceOf: SourceOf is the one reading of an event's source, and it
// is the stores' (the summary a store lists and the source its filter
// selects by), for payloads that are not plain JSON (NaN, Infinity), hold
// numbers past float64, duplicate a member or nest deeply. Before it,
// triage.SourceURI read "" from every payload that was not JSON, which
// list -o json, show and warehouse sync printed while the stores, stats
// and the console read the source.
func TestSourceOf(t *testing.T) {
	nan, ok := corpus.Lookup("nan_coordinates")
	require.True(t, ok)
	realNaN := strings.Replace(string(nan.Payload), `"properties":`, `"source_uri":"s3://provider-a/2026/05/tile-7.geojson","properties":`, 1)
	require.Contains(t, realNaN, "NaN", "the corpus record keeps its NaN")
	deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)
	for _, tc := range []struct {
		name, payload, pointer, want string
	}{
		{"plain", `{"source_uri":"s3://b/k\u00e9"}`, "", "s3://b/ké"},
		{"corpus NaN record", realNaN, "", "s3://provider-a/2026/05/tile-7.geojson"},
		{"NaN in the geometry before the source", `{"geometry":{"type":"Point","coordinates":[NaN,1]},"source_uri":"s3://a/x"}`, "", "s3://a/x"},
		{"NaN and Infinity in the properties before the source", `{"properties":{"acc":NaN,"hi":Infinity,"lo":-Infinity},"source_uri":"s3://a/y"}`, "", "s3://a/y"},
		{"NaN at the pointer", `{"properties":{"provider":NaN}}`, "/properties/provider", "NaN"},
		{"a number past float64 before the source", `{"n":1e999999,"big":123456789012345678901234567890,"source_uri":"s3://a/z"}`, "", "s3://a/z"},
		{"a number as the source is its text", `{"source_uri":123456789012345678901234567890}`, "", "123456789012345678901234567890"},
		{"duplicate member: the first", `{"source_uri":"s3://first","source_uri":"s3://second"}`, "", "s3://first"},
		{"duplicate member past a NaN: the first", `{"source_uri":"s3://first","x":NaN,"source_uri":"s3://second"}`, "", "s3://first"},
		{"deep nesting before the source", `{"x":` + deep + `,"source_uri":"s3://after-deep"}`, "", "s3://after-deep"},
		{"source nested to the bound", `{"a":{"b":{"c":{"d":{"e":{"f":"s3://six"}}}}}}`, "/a/b/c/d/e/f", "s3://six"},
		{"null", `{"source_uri":null}`, "", ""},
		{"an object", `{"source_uri":{"bucket":"b"}}`, "", ""},
		{"truncated after the source", `{"source_uri":"s3://kept","geometry":{"type":"Poly`, "", "s3://kept"},
		{"not JSON at all", `not json`, "", ""},
		{"other pointer", `{"source_uri":"s3://a","properties":{"provider":"ign"}}`, "/properties/provider", "ign"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &envelope.Envelope{RawPayload: []byte(tc.payload)}
			require.Equal(t, tc.want, broker.SourceOf(env, tc.pointer))

			// A store lists and selects by the same source.
			b, err := envelope.NewBuilder(nil)
			require.NoError(t, err)
			built, body, err := b.Build(t.Context(), envelope.Input{Payload: []byte(tc.payload), IdempotencyKey: "k",
				Err: classify.InvalidGeometry(errors.New("Self-intersection[1 2]"))})
			require.NoError(t, err)
			require.Equal(t, tc.want, broker.SourceOf(built, tc.pointer), "the built envelope reads alike")
			s := memory.New(nil)
			require.NoError(t, s.Publish(t.Context(), "d", &broker.Message{Body: body}))
			p, err := s.List(t.Context(), broker.ListOptions{Destination: "d", Limit: 10, Summaries: true,
				Filter: broker.Filter{SourcePointer: tc.pointer}})
			require.NoError(t, err)
			require.Len(t, p.Entries, 1)
			require.Equal(t, tc.want, p.Entries[0].Summary.Source, "the store's summary")
			if tc.want != "" {
				p, err = s.List(t.Context(), broker.ListOptions{Destination: "d", Limit: 10,
					Filter: broker.Filter{SourcePointer: tc.pointer, SourcePrefix: tc.want}})
				require.NoError(t, err)
				require.Len(t, p.Entries, 1, "the store's source filter")
			}
		})
	}
	require.Empty(t, broker.SourceOf(nil, ""))
	require.Empty(t, broker.SourceOf(&envelope.Envelope{RawPayloadOffloadURI: "s3://blobs/x"}, ""), "an offloaded payload has none")
}
