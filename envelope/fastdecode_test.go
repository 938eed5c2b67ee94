package envelope_test

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/corpus/nesting"
)

// requireSameDecode fails unless DecodeFast gives exactly what Decode
// gives for data — the same envelope, or an error of the same type and
// text — and unless its fast path, when it takes data, takes only what
// Decode accepts and decodes it alike. It reports whether the fast path
// took data.
func requireSameDecode(t testing.TB, data []byte) bool {
	t.Helper()
	want, werr := envelope.Decode(data)
	got, gerr := envelope.DecodeFast(data)
	fast, took := envelope.DecodeFastPath(data)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("Decode error %v, DecodeFast error %v\n%q", werr, gerr, clipDoc(data))
	}
	if werr != nil {
		if fmt.Sprintf("%T %v", werr, werr) != fmt.Sprintf("%T %v", gerr, gerr) {
			t.Fatalf("errors differ:\nDecode:     %T %v\nDecodeFast: %T %v", werr, werr, gerr, gerr)
		}
		if !errors.Is(gerr, envelope.ErrInvalid) && !errors.Is(gerr, envelope.ErrUnsupportedVersion) {
			t.Fatalf("untyped error: %v", gerr)
		}
		if took {
			t.Fatalf("the fast path took a document Decode rejects (%v)\n%q", werr, clipDoc(data))
		}
		return false
	}
	require.Equal(t, want, got, "%q", clipDoc(data))
	if took {
		require.Equal(t, want, fast, "%q", clipDoc(data))
	}
	return took
}

func clipDoc(b []byte) []byte {
	if len(b) > 2000 {
		return b[:2000]
	}
	return b
}

// corpusEnvelopes builds an envelope of every corpus event, of every
// payload case, and of every hostile event, inline, with the geometry
// offloaded and with the whole payload offloaded, with provenance,
// trace id and each failure class.
func corpusEnvelopes(t testing.TB) [][]byte {
	t.Helper()
	ctx := context.Background()
	off, _ := newOffloader(t, 64)
	builders := []struct {
		b        *envelope.Builder
		maxBytes int
	}{{newBuilder(t, nil), 0}, {newBuilder(t, off), 0}, {newBuilder(t, off), 1200}}
	part, offset := int32(3), int64(1<<40)
	ts := time.Date(2026, 5, 4, 3, 2, 1, 0, time.FixedZone("", 5*3600+1800))
	failures := []error{
		classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")),
		classify.CRSMismatch(errors.New("EPSG:3857 is not EPSG:4326"), 3857),
		classify.CRSMismatch(errors.New("unparseable"), 0),
		classify.SchemaViolation(errors.New(`missing "type"`)),
		classify.Transient(errors.New("connection reset \u2028 \"quoted\"")),
		classify.ResourceExhausted(errors.New("too many vertices")),
	}
	var payloads [][]byte
	for _, it := range corpus.All() {
		payloads = append(payloads, it.Payload)
	}
	for _, tc := range payloadCases {
		payloads = append(payloads, []byte(tc.body))
	}
	for _, f := range corpus.Hostile() {
		if f.Input == corpus.InputEvent && !f.Large {
			payloads = append(payloads, f.Generate(corpus.MinHostileSize).Data)
		}
	}
	var out [][]byte
	for i, p := range payloads {
		b := builders[i%len(builders)]
		in := envelope.Input{Payload: p, Err: failures[i%len(failures)], MaxBytes: b.maxBytes, Attempts: 1 + i%4}
		if i%2 == 0 {
			in.IdempotencyKey = fmt.Sprintf("idem:v1:%d", i)
			in.TraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
			in.Source = &envelope.Source{System: "kafka", Topic: "spatial.events", Partition: &part, Offset: &offset,
				MessageID: "m-1", Key: []byte{0, 1, 2, 0xff}, GroupID: "g", DedupID: "d", DeliveryCount: 2, Timestamp: &ts}
		}
		_, data, err := b.b.Build(ctx, in)
		if errors.Is(err, classify.ErrTooLarge) {
			continue
		}
		require.NoError(t, err)
		out = append(out, data)
	}
	return out
}

// variants rewrites a canonical envelope the ways another writer may:
// members in reverse order, white space between every token, an escaped
// string, an explicit json encoding.
func variants(data []byte) [][]byte {
	s := string(data)
	return [][]byte{
		[]byte(" \n" + strings.ReplaceAll(strings.ReplaceAll(s, `":`, "\" :\t"), `,"`, ",\r\n \"") + "\n"),
		[]byte(strings.Replace(s, `"event_id":"`, `"event_id":"\u0041\/`, 1)),
		[]byte(strings.Replace(s, `"raw_payload":`, `"raw_payload_encoding":"json","raw_payload":`, 1)),
		[]byte(strings.Replace(s, `{"schema_version":"dlq.v1",`, `{`, 1)[:len(s)-len(`"schema_version":"dlq.v1",`)-1] + `,"schema_version":"dlq.v1"}`),
	}
}

// The fast path takes every envelope Build makes — every failure class,
// geometry inline and offloaded, payload offloaded, JSON, string and
// base64 payloads, provenance — and decodes each exactly as Decode does;
// every hostile forged envelope decodes (or fails) as Decode does.
func TestDecodeFastMatchesDecode(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	took, docs := 0, corpusEnvelopes(t)
	encodings := map[string]bool{}
	for _, data := range docs {
		// Only what nests deeper than its bound is left to Decode.
		require.Equal(t, nestedDepth(data) <= 257, requireSameDecode(t, data), "the fast path took no Build output:\n%s", clipDoc(data))
		env, err := envelope.Decode(data)
		require.NoError(t, err)
		encodings[env.RawPayloadEncoding+"/"+env.Geometry.InlineEncoding] = true
		for _, v := range variants(data) {
			if requireSameDecode(t, v) {
				took++
			}
		}
	}
	require.Greater(t, took, len(docs), "the fast path takes reordered and spaced envelopes")
	require.True(t, encodings["json/json"] && encodings["string/json"] && encodings["base64/json"] && encodings["/"], "%v", encodings)

	for _, f := range corpus.Hostile() {
		if f.Input != corpus.InputEnvelope {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			requireSameDecode(t, f.Generate(corpus.MinHostileSize).Data)
		})
	}
}

// Documents Decode rejects, each one rule away from a valid envelope: the
// fast path must leave every one to Decode.
func TestDecodeFastRejectsAsDecode(t *testing.T) {
	_, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{
		Payload: []byte(bowtie), IdempotencyKey: "k", Err: classify.CRSMismatch(errors.New("x"), 3857),
		Source: &envelope.Source{System: "kafka", Key: []byte("key")},
	})
	require.NoError(t, err)
	valid := string(data)
	require.True(t, requireSameDecode(t, data))
	for _, tc := range []struct{ name, old, new string }{
		{"duplicate member", `"event_id":`, `"event_id":"a","event_id":`},
		{"upper-case name", `"event_id":`, `"Event_id":`},
		{"null member", `"source_crs":"EPSG:4326"`, `"source_crs":null`},
		{"empty optional", `"schema_version":"dlq.v1"`, `"schema_version":"dlq.v1","trace_id":""`},
		{"float integer", `"attempts":1`, `"attempts":1.0`},
		{"exponent integer", `"attempts":1`, `"attempts":1e0`},
		{"integer overflow", `"attempts":1`, `"attempts":99999999999999999999`},
		{"partition overflow", `"system":"kafka"`, `"system":"kafka","partition":2147483648`},
		{"leading zero", `"attempts":1`, `"attempts":01`},
		{"zero attempts", `"attempts":1`, `"attempts":0`},
		{"lower-case t", `-14T15:09`, `-14t15:09`},
		{"escaped time", `"first_seen_at":"2026-`, `"first_seen_at":"\u0032026-`},
		{"leap second", `:26.535897Z`, `:60.535897Z`},
		{"bad class", `"crs_mismatch"`, `"crs_mismatchx"`},
		{"retry for deterministic", `"poison"`, `"retry"`},
		{"raw control character", `"error_message":"x"`, "\"error_message\":\"x\x01\""},
		{"invalid UTF-8", `"error_message":"x"`, "\"error_message\":\"x\xff\""},
		{"bad escape", `"error_message":"x"`, `"error_message":"x\q"`},
		// Same length, so that only the payload's JSON is wrong.
		{"payload NaN", `"crs": "EPSG:4326"`, `"crs": NaN        `},
		{"payload trailing comma", `"crs": "EPSG:4326"`, `"crs": [1,]       `},
		{"payload bad number", `"crs": "EPSG:4326"`, `"crs": -.5        `},
		{"payload raw tab in string", `"crs": "EPSG:4326"`, "\"crs\": \"EPSG\t4326\""},
		{"payload unclosed", `"crs": "EPSG:4326"`, `"crs": [[[[       `},
		{"payload size", `"payload_size":`, `"payload_size":1`},
		{"byte size", `"byte_size":`, `"byte_size":1`},
		{"sha", `"payload_sha256":"`, `"payload_sha256":"A`},
		{"missing payload", `,"raw_payload":`, `,"raw_payload_x":`},
		{"base64 key newline", `"key":"a2V5"`, `"key":"a2V5\n"`},
		{"base64 key alphabet", `"key":"a2V5"`, `"key":"a2V*"`},
		{"base64 key padding", `"key":"a2V5"`, `"key":"a2V"`},
		{"trailing bytes", `}`, `}x`},
		{"epsg negative", `"epsg":3857`, `"epsg":-1`},
		{"location of three", `"geometry_error":{"reason":"x"`, `"geometry_error":{"reason":"x","location":[1,2,3]`},
		{"location overflow", `"geometry_error":{"reason":"x"`, `"geometry_error":{"reason":"x","location":[1e999,2]`},
		{"fault without ring", `"geometry_error":{"reason":"x"`, `"geometry_error":{"reason":"x","fault":{"part":1,"vertex":2}`},
		{"empty geometry", `"geometry":{`, `"geometry":{},"x":{`},
		{"not an object", `{`, `[`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(valid, tc.old, tc.new, 1)
			require.NotEqual(t, valid, doc, "the case changes the document")
			requireSameDecode(t, []byte(doc))
			_, err := envelope.DecodeFast([]byte(doc))
			require.Error(t, err)
		})
	}
}

// What Decode accepts but the fast path does not take is left to Decode.
func TestDecodeFastLeavesToDecode(t *testing.T) {
	_, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{
		Payload: []byte(bowtie), IdempotencyKey: "k", Err: classify.CRSMismatch(errors.New("x"), 3857)})
	require.NoError(t, err)
	for _, tc := range []struct{ name, old, new string }{
		{"unknown member", `"event_id":`, `"eventid":1,"event_id":`},
		{"escaped name", `"event_id":`, `"\u0065vent_id":`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := []byte(strings.Replace(string(data), tc.old, tc.new, 1))
			require.False(t, requireSameDecode(t, doc))
			_, err := envelope.DecodeFast(doc)
			require.NoError(t, err)
		})
	}
}

// nestedDepth is the deepest nesting of arrays and objects in the JSON
// text b (outside strings).
func nestedDepth(b []byte) int {
	depth, most := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '[', '{':
			depth++
			most = max(most, depth)
		case ']', '}':
			depth--
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		}
	}
	return most
}

// Nesting past the fast path's bound is left to Decode, which takes it
// up to encoding/json's 10,000 levels.
func TestDecodeFastDeepPayload(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	for _, depth := range []int{255, 256, 257, 5000, 9998, 9999, 10000} {
		payload := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		_, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: payload, IdempotencyKey: "k", Err: classify.Transient(errors.New("x"))})
		require.NoError(t, err)
		env, err := envelope.Decode(data)
		require.NoError(t, err)
		took := requireSameDecode(t, data)
		require.Equal(t, depth <= 256 || env.RawPayloadEncoding == envelope.EncodingString, took, "depth %d", depth)
		// The same array embedded as JSON, whatever Build chose.
		raw := strings.Replace(string(data), `"raw_payload_encoding":"string","raw_payload":"`+string(payload)+`"`, `"raw_payload":`+string(payload), 1)
		require.Equal(t, depth <= 256, requireSameDecode(t, []byte(raw)), "depth %d", depth)
	}
}

// FuzzDecodeFast feeds arbitrary bytes to DecodeFast and to Decode, the
// reference, and fails on any difference: in the envelope, in the error,
// or in whether there is one; and on the fast path taking a document
// Decode rejects.
func FuzzDecodeFast(f *testing.F) {
	for _, data := range corpusEnvelopes(f) {
		f.Add(data)
		for _, v := range variants(data) {
			f.Add(v)
		}
	}
	for _, seed := range corpus.HostileSeeds(corpus.InputEnvelope) {
		f.Add(seed)
	}
	for s := range nesting.Shapes() {
		f.Add([]byte(`{"schema_version":"dlq.v1","raw_payload":` + string(nesting.Build(s, 2_000, nil)) + `}`))
	}
	f.Add([]byte(`{"schema_version":"dlq.v1","raw_payload_encoding":"base64","raw_payload":"AAEC"}`))
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	f.Fuzz(func(t *testing.T, data []byte) {
		requireSameDecode(t, data)
	})
}
