package envelope_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/offloadtest"
)

var fixedNow = time.Date(2026, 3, 14, 15, 9, 26, 535897000, time.UTC)

func newBuilder(t testing.TB, off *offload.Offloader) *envelope.Builder {
	t.Helper()
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off, Now: func() time.Time { return fixedNow }})
	require.NoError(t, err)
	return b
}

func newOffloader(t testing.TB, threshold int) (*offload.Offloader, *offloadtest.CountingStore) {
	t.Helper()
	cs := offloadtest.NewCountingStore(offload.NewMemStore())
	o, err := offload.New(cs, &offload.Options{BaseURI: "s3://dlq-geom", Prefix: "test", Threshold: threshold})
	require.NoError(t, err)
	return o, cs
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// payloadCases are bodies whose bytes must survive the dead-letter path
// exactly, with the raw_payload encoding each must get.
var payloadCases = []struct {
	name, body, enc string
}{
	{"compact", `{"event_id":"e1","geometry":{"type":"Point","coordinates":[1,2]}}`, envelope.EncodingJSON},
	{"whitespace inside", "{\n\t\"geometry\" : {\"type\": \"Point\",\r\n \"coordinates\": [ 1 , 2 ]},\n\"id\": 7 }", envelope.EncodingJSON},
	{"key order", `{"z":1,"geometry":{"coordinates":[1,2],"type":"Point"},"a":2}`, envelope.EncodingJSON},
	{"duplicate keys", `{"geometry":{"type":"Point","coordinates":[0,0]},"geometry":{"type":"Point","coordinates":[1,1]},"id":"a","id":"b"}`, envelope.EncodingJSON},
	{"unicode escapes", `{"name":"caf\u00e9 \ud83d\ude00","geometry":{"type":"Point","coordinates":[1,2]}}`, envelope.EncodingJSON},
	{"raw unicode", `{"name":"café 😀","geometry":null}`, envelope.EncodingJSON},
	{"html characters", `{"html":"<b>&amp;</b>","geometry":{"type":"Point","coordinates":[1,2]}}`, envelope.EncodingJSON},
	{"number forms", `{"a":1.0,"b":1e400,"c":-0,"d":1E+2,"geometry":{"type":"Point","coordinates":[1.0,-0.0]}}`, envelope.EncodingJSON},
	{"escaped slash and controls", `{"s":"a\/b\n\u0000","geometry":{"type":"Point","coordinates":[1,2]}}`, envelope.EncodingJSON},
	{"invalid utf-8", "{\"name\":\"\xff\xfe\",\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}", envelope.EncodingBase64},
	{"bare NaN tokens", `{"geometry":{"type":"Point","coordinates":[NaN,-Infinity]},"v":Infinity}`, envelope.EncodingString},
	{"not JSON", "POINT (30 10) -- WKT, not JSON \"quoted\" \\ back", envelope.EncodingString},
	{"empty body", "", envelope.EncodingString},
	{"leading BOM", "\ufeff{\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}", envelope.EncodingString},
	{"trailing whitespace", "{\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}\n", envelope.EncodingString},
	{"leading whitespace", "  {\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}", envelope.EncodingString},
	{"JSON string document", `"just a string"`, envelope.EncodingJSON},
	{"null document", `null`, envelope.EncodingJSON},
	{"array document", `[{"geometry":1}]`, envelope.EncodingJSON},
	{"truncated JSON", `{"geometry":{"type":"Point","coordinates":[1,`, envelope.EncodingString},
	{"binary", "\x00\x01\x02\x80\xff", envelope.EncodingBase64},
	{"crs null", `{"event_id":"evt-7","crs":null,"geometry":{"type":"Point","coordinates":[1,2]}}`, envelope.EncodingJSON},
	{"U+2028", "{\"s\":\"a\u2028b\",\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}", envelope.EncodingJSON},
	{"DEL and tabs in string body", "a\x7fb\tc", envelope.EncodingString},
}

// modes are the ways a payload can travel.
var modes = []struct {
	name      string
	threshold int // 0: no offloader
	maxBytes  int
}{
	{"inline", 0, 0},
	{"geometry offloaded", 1, 0},
	{"payload offloaded", 1, 1100},
}

func TestRoundTripBytes(t *testing.T) {
	ctx := context.Background()
	for _, m := range modes {
		for _, tc := range payloadCases {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				var off *offload.Offloader
				if m.threshold > 0 {
					off, _ = newOffloader(t, m.threshold)
				}
				b := newBuilder(t, off)
				payload := []byte(tc.body)
				env, data, err := b.Build(ctx, envelope.Input{
					Payload: payload, IdempotencyKey: "idem:v1:abc",
					Err: classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")), MaxBytes: m.maxBytes,
				})
				require.NoError(t, err)
				require.NoError(t, env.Validate(), "Build output is valid")
				require.Equal(t, sha(payload), env.PayloadSHA256)
				require.Equal(t, int64(len(payload)), env.PayloadSize)
				if m.maxBytes > 0 {
					require.LessOrEqual(t, len(data), m.maxBytes)
				}

				dec, err := envelope.Decode(data)
				require.NoError(t, err)
				again, err := dec.Encode()
				require.NoError(t, err)
				require.Equal(t, string(data), string(again), "Encode(Decode(x)) == x")

				restored, err := dec.Restore(ctx, off)
				require.NoError(t, err)
				require.Equal(t, payload, restored, "restored bytes must be identical")
				require.Equal(t, env.PayloadSHA256, sha(restored))

				if dec.RawPayloadOffloadURI == "" && dec.Geometry.OffloadURI == "" {
					enc := dec.RawPayloadEncoding
					if enc == "" {
						enc = envelope.EncodingJSON
					}
					require.Equal(t, tc.enc, enc)
				}
				if !dec.Geometry.Missing && dec.Geometry.OffloadURI == "" {
					require.Equal(t, string(payload[dec.Geometry.PayloadOffset:dec.Geometry.PayloadOffset+dec.Geometry.ByteSize]), string(dec.Geometry.Inline))
					require.Equal(t, sha(dec.Geometry.Inline), dec.Geometry.ContentSHA256)
				}
			})
		}
	}
}

func TestRawPayloadEmbeddedVerbatim(t *testing.T) {
	payload := `{"html":"<b>&</b>","n":1.0,"big":1e400,"z":-0,"k":"\u00e9"}`
	_, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(payload), IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, bytes.HasSuffix(data, []byte(`"raw_payload":`+payload+`}`)), "%s", data)
	require.NotContains(t, string(data), "raw_payload_encoding")
}

func TestStringEncodingEscapes(t *testing.T) {
	payload := "{\"a\":NaN}\n\"q\" \\ \x01 </script> é"
	_, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(payload), IdempotencyKey: "k"})
	require.NoError(t, err)
	require.Contains(t, string(data), `"raw_payload_encoding":"string","raw_payload":"{\"a\":NaN}\n\"q\" \\ \u0001 </script> é"}`)
}

func TestChooseEncoding(t *testing.T) {
	for in, want := range map[string]string{
		`{}`: "json", `[]`: "json", `1`: "json", `"s"`: "json", ``: "string", ` {}`: "string", "{}\t": "string",
		`{"a":NaN}`: "string", "\xff": "base64", "\ufeff{}": "string", `{"a":1}{}`: "string",
		// Escaped controls cost six bytes each: base64 is shorter.
		"a\x00b": "base64", "{}\x00garbage": "string", "\x00\x00\x00\x00garbage": "base64", "a\tb\nc": "string",
	} {
		require.Equal(t, want, envelope.ChooseEncoding([]byte(in)), "%q", in)
	}
}

func TestEncodeRefusesInapplicableEncoding(t *testing.T) {
	env, _, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte("\xff"), IdempotencyKey: "k"})
	require.NoError(t, err)
	env.RawPayloadEncoding = envelope.EncodingString
	_, err = env.Encode()
	require.Error(t, err)
	env.RawPayloadEncoding = envelope.EncodingJSON
	_, err = env.Encode()
	require.Error(t, err)
	require.ErrorIs(t, env.Validate(), envelope.ErrInvalid)
}

func TestLargeStringFieldsRoundTrip(t *testing.T) {
	msg := strings.Repeat("x\"<>&\u2028\x01é", 1000) + "\xff"
	env, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(`{}`), IdempotencyKey: "k\x00\"", Err: errors.New(msg)})
	require.NoError(t, err)
	dec, err := envelope.Decode(data)
	require.NoError(t, err)
	require.Equal(t, strings.ToValidUTF8(msg, "\ufffd"), dec.ErrorMessage)
	require.Equal(t, env.IdempotencyKey, dec.IdempotencyKey)
	again, err := dec.Encode()
	require.NoError(t, err)
	require.Equal(t, data, again)
}

func TestSourceRoundTrip(t *testing.T) {
	p, o := int32(3), int64(1<<40)
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("X", -3600))
	for _, src := range []*envelope.Source{
		{System: "kafka"},
		{System: "kafka", Topic: "spatial.events", Partition: &p, Offset: &o, Key: []byte("\x00k<>"), Timestamp: &ts, DeliveryCount: 2},
		{System: "sqs", MessageID: "m\"1", GroupID: "g", DedupID: "d"},
	} {
		env, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(`{}`), IdempotencyKey: "k", Source: src})
		require.NoError(t, err)
		want, err := json.Marshal(src)
		require.NoError(t, err)
		var a map[string]any
		require.NoError(t, json.Unmarshal(want, &a))
		require.Equal(t, a, decodeMap(t, data)["source"], "same fields and values as encoding/json")
		dec, err := envelope.Decode(data)
		require.NoError(t, err)
		require.Equal(t, env.Source.Key, dec.Source.Key)
		again, err := dec.Encode()
		require.NoError(t, err)
		require.Equal(t, string(data), string(again))
	}
}

// TestDeepPayloadsStayDecodable: a payload nested as deep as JSON readers
// accept (10,000 levels) cannot be embedded as JSON one level further
// down; it travels as a string, so the envelope, and the CloudEvent
// around it, decode and restore it byte for byte.
func TestDeepPayloadsStayDecodable(t *testing.T) {
	ctx := context.Background()
	nested := func(depth int, open, close string) []byte {
		return []byte(strings.Repeat(open, depth) + strings.Repeat(close, depth))
	}
	for _, tc := range []struct {
		name    string
		payload []byte
		want    string
	}{
		{"arrays at the embed limit", nested(envelope.MaxEmbedDepth, "[", "]"), envelope.EncodingJSON},
		{"arrays one past it", nested(envelope.MaxEmbedDepth+1, "[", "]"), envelope.EncodingString},
		{"arrays at the reader limit", nested(10000, "[", "]"), envelope.EncodingString},
		{"objects at the reader limit", []byte(strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)), envelope.EncodingString},
		{"brackets in strings do not count", []byte(`["` + strings.Repeat("[{", 20000) + `"]`), envelope.EncodingJSON},
		{"escaped quotes do not end a string", []byte(`["\"` + strings.Repeat("[", 20000) + `"]`), envelope.EncodingJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, envelope.ChooseEncoding(tc.payload))
			env, data, err := newBuilder(t, nil).Build(ctx, envelope.Input{Payload: tc.payload, IdempotencyKey: "k",
				Err: classify.SchemaViolation(errors.New("too deep"))})
			require.NoError(t, err)
			require.Equal(t, tc.want, orJSON(env.RawPayloadEncoding))
			got, err := envelope.Decode(data)
			require.NoError(t, err, "an envelope the Builder wrote decodes")
			restored, err := got.Restore(ctx, nil)
			require.NoError(t, err)
			require.Equal(t, tc.payload, restored)
			ce, err := envelope.ToCloudEvent(env, nil)
			require.NoError(t, err)
			back, err := envelope.FromCloudEvent(ce)
			require.NoError(t, err, "and so does its CloudEvent")
			restored, err = back.Restore(ctx, nil)
			require.NoError(t, err)
			require.Equal(t, tc.payload, restored)
		})
	}
}

func orJSON(enc string) string {
	if enc == "" {
		return envelope.EncodingJSON
	}
	return enc
}
