package envelope_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/offload"
)

// sample returns a valid encoded envelope as a generic map, for mutation.
func sample(t *testing.T) map[string]any {
	t.Helper()
	_, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{
		Payload: []byte(bowtie), IdempotencyKey: "idem:v1:abc", Err: classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")),
		Source: &envelope.Source{System: "kafka", Topic: "spatial.events"}, TraceID: "trace-1",
	})
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	return m
}

func encodeMap(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

func TestDecodeVersion(t *testing.T) {
	for _, tc := range []struct{ doc, version string }{
		{`{"event_id":"x"}`, ""},
		{`{"schema_version":"dlq.v2","anything":1}`, "dlq.v2"},
		{`{"schema_version":"DLQ.V1"}`, "DLQ.V1"},
		{`{"schema_version":"dlq.v0","schema_version":"dlq.v9"}`, "dlq.v9"},
	} {
		_, err := envelope.Decode([]byte(tc.doc))
		require.ErrorIs(t, err, envelope.ErrUnsupportedVersion, tc.doc)
		var ve *envelope.VersionError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, tc.version, ve.Version)
		require.Contains(t, err.Error(), "dlq.v1")
	}
}

func TestDecodeInvalid(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(m map[string]any)
		raw    string
		fields []string
	}{
		{name: "not JSON", raw: `not json`, fields: []string{""}},
		{name: "truncated", raw: `{"schema_version":"dlq.v1","event_id":`, fields: []string{""}},
		{name: "array", raw: `[1,2]`, fields: []string{""}},
		{name: "version not a string", raw: `{"schema_version":1}`, fields: []string{"schema_version"}},
		{name: "wrong type", mutate: func(m map[string]any) { m["attempts"] = "three" }, fields: []string{"attempts"}},
		{name: "unknown class", mutate: func(m map[string]any) { m["failure_class"] = "cosmic_ray" }, fields: []string{"failure_class"}},
		{name: "unknown stage", mutate: func(m map[string]any) { m["failed_stage"] = "reticulate" }, fields: []string{"failed_stage"}},
		{name: "deterministic to retry", mutate: func(m map[string]any) { m["destination"] = "retry" }, fields: []string{"destination"}},
		{name: "bad destination", mutate: func(m map[string]any) { m["destination"] = "nowhere" }, fields: []string{"destination"}},
		{name: "missing event id", mutate: func(m map[string]any) { delete(m, "event_id") }, fields: []string{"event_id"}},
		{name: "missing key", mutate: func(m map[string]any) { m["idempotency_key"] = "" }, fields: []string{"idempotency_key"}},
		{name: "zero attempts", mutate: func(m map[string]any) { m["attempts"] = 0 }, fields: []string{"attempts"}},
		{name: "missing times", mutate: func(m map[string]any) { delete(m, "first_seen_at"); delete(m, "dead_lettered_at") }, fields: []string{"first_seen_at", "dead_lettered_at"}},
		{name: "uppercase payload hash", mutate: func(m map[string]any) { m["payload_sha256"] = strings.ToUpper(m["payload_sha256"].(string)) }, fields: []string{"payload_sha256"}},
		{name: "0x payload hash", mutate: func(m map[string]any) { m["payload_sha256"] = "0x" + m["payload_sha256"].(string)[2:] }, fields: []string{"payload_sha256"}},
		{name: "both inline and offload", mutate: func(m map[string]any) {
			m["geometry"].(map[string]any)["offload_uri"] = "s3://x/y"
		}, fields: []string{"geometry"}},
		{name: "neither inline nor offload", mutate: func(m map[string]any) { delete(m["geometry"].(map[string]any), "inline") }, fields: []string{"geometry"}},
		{name: "byte size lies", mutate: func(m map[string]any) { m["geometry"].(map[string]any)["byte_size"] = 3 }, fields: []string{"geometry.byte_size"}},
		{name: "bad content hash", mutate: func(m map[string]any) { m["geometry"].(map[string]any)["content_sha256"] = "abc" }, fields: []string{"geometry.content_sha256"}},
		{name: "no payload offset", mutate: func(m map[string]any) { delete(m["geometry"].(map[string]any), "payload_offset") }, fields: []string{"geometry.payload_offset"}},
		{name: "missing but offset", mutate: func(m map[string]any) { m["geometry"].(map[string]any)["missing"] = true }, fields: []string{"geometry.payload_offset"}},
		{name: "offset beyond payload", mutate: func(m map[string]any) { m["geometry"].(map[string]any)["payload_offset"] = 1 << 40 }, fields: []string{"geometry.payload_offset"}},
		{name: "crs mismatch without epsg", mutate: func(m map[string]any) { m["failure_class"] = "crs_mismatch" }, fields: []string{"geometry_error.epsg"}},
		{name: "negative epsg", mutate: func(m map[string]any) { m["geometry_error"].(map[string]any)["epsg"] = -1 }, fields: []string{"geometry_error.epsg"}},
		{name: "location of three", mutate: func(m map[string]any) { m["geometry_error"].(map[string]any)["location"] = []float64{1, 2, 3} }, fields: []string{"geometry_error.location"}},
		{name: "no raw payload", mutate: func(m map[string]any) { delete(m, "raw_payload") }, fields: []string{"raw_payload", "payload_size"}},
		{name: "payload size lies", mutate: func(m map[string]any) { m["payload_size"] = 1 }, fields: []string{"payload_size"}},
		{name: "bad raw encoding", mutate: func(m map[string]any) { m["raw_payload_encoding"] = "rot13" }, fields: []string{"raw_payload_encoding"}},
		{name: "string encoding of object", mutate: func(m map[string]any) { m["raw_payload_encoding"] = "string" }, fields: []string{"raw_payload"}},
		{name: "bad base64", mutate: func(m map[string]any) { m["raw_payload_encoding"] = "base64"; m["raw_payload"] = "!!!" }, fields: []string{"raw_payload"}},
		{name: "source without system", mutate: func(m map[string]any) { m["source"] = map[string]any{"topic": "t"} }, fields: []string{"source.system"}},
		{name: "several at once", mutate: func(m map[string]any) { m["attempts"] = 0; m["failure_class"] = "nope"; m["event_id"] = "" },
			fields: []string{"event_id", "attempts", "failure_class"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := []byte(tc.raw)
			if tc.mutate != nil {
				m := sample(t)
				tc.mutate(m)
				doc = encodeMap(t, m)
			}
			_, err := envelope.Decode(doc)
			require.ErrorIs(t, err, envelope.ErrInvalid)
			var ve *envelope.ValidationError
			require.ErrorAs(t, err, &ve)
			for _, f := range tc.fields {
				require.Contains(t, ve.Fields(), f, "%v", err)
			}
			require.NotEmpty(t, err.Error())
		})
	}
}

func TestDecodeAcceptsOtherProducers(t *testing.T) {
	ctx := context.Background()
	_, data, err := newBuilder(t, nil).Build(ctx, envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "k"})
	require.NoError(t, err)
	// Whitespace and field order of another producer decode fine; the raw
	// payload is still recovered byte for byte.
	doc := strings.Replace(string(data), `,"attempts":1,`, `,`, 1)
	doc = strings.Replace(doc, `{"schema_version":"dlq.v1",`, `{"attempts":1,"schema_version":"dlq.v1",`, 1)
	doc = "\n " + strings.Replace(doc, `,"event_id":`, ` ,  "event_id" :`, 1) + "\t"
	env, err := envelope.Decode([]byte(doc))
	require.NoError(t, err, doc)
	out, err := env.Restore(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, bowtie, string(out))
	again, err := env.Encode()
	require.NoError(t, err)
	require.Equal(t, string(data), string(again), "re-encoding gives the canonical form")

	// A producer that re-serialised the payload (here: indentation) is
	// caught, because the verbatim values no longer match their sizes.
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	indented, err := json.MarshalIndent(m, "", "  ")
	require.NoError(t, err)
	_, err = envelope.Decode(indented)
	require.ErrorIs(t, err, envelope.ErrInvalid)
}

func TestValidateStruct(t *testing.T) {
	env, _, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "k",
		Err: classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))})
	require.NoError(t, err)
	require.NoError(t, env.Validate())
	bad := *env
	bad.SchemaVersion = "dlq.v2"
	bad.FailureClass = ""
	bad.FailedStage = "stage_77"
	nan := *env.GeometryError
	bad.GeometryError = &nan
	bad.GeometryError.Location = []float64{1, 2}
	err = bad.Validate()
	var ve *envelope.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Subset(t, ve.Fields(), []string{"schema_version", "failure_class", "failed_stage"})
}

func TestRestoreIntegrity(t *testing.T) {
	ctx := context.Background()
	off, _ := newOffloader(t, 1)
	env, data, err := newBuilder(t, off).Build(ctx, envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "k"})
	require.NoError(t, err)
	require.NotEmpty(t, env.Geometry.OffloadURI)

	fresh := func() *envelope.Envelope {
		e, err := envelope.Decode(data)
		require.NoError(t, err)
		return e
	}
	cases := []struct {
		name   string
		mutate func(e *envelope.Envelope)
		f      envelope.Fetcher
		target error
	}{
		{"payload altered", func(e *envelope.Envelope) { e.RawPayload[2] = 'X' }, off, offload.ErrIntegrity},
		{"$ref moved", func(e *envelope.Envelope) { e.Geometry.PayloadOffset-- }, off, offload.ErrIntegrity},
		{"$ref names another blob", func(e *envelope.Envelope) {
			e.RawPayload = []byte(strings.Replace(string(e.RawPayload), e.Geometry.OffloadURI, e.Geometry.OffloadURI[:len(e.Geometry.OffloadURI)-9]+"1.geojson", 1))
		}, off, offload.ErrIntegrity},
		{"foreign URI", func(e *envelope.Envelope) {
			old := e.Geometry.OffloadURI
			e.Geometry.OffloadURI = "s3://dlq-geom/test/../" + old[len("s3://dlq-geom/test/"):]
			e.RawPayload = []byte(strings.Replace(string(e.RawPayload), old, e.Geometry.OffloadURI, 1))
		}, off, offload.ErrForbiddenURI},
		{"byte size lies", func(e *envelope.Envelope) { e.Geometry.ByteSize++; e.PayloadSize++ }, off, offload.ErrIntegrity},
		{"lying fetcher", func(*envelope.Envelope) {}, lyingFetcher{}, offload.ErrIntegrity},
		{"no fetcher", func(*envelope.Envelope) {}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := fresh()
			tc.mutate(e)
			out, err := e.Restore(ctx, tc.f)
			require.Error(t, err)
			require.Nil(t, out)
			if tc.target != nil {
				require.ErrorIs(t, err, tc.target)
			}
		})
	}
	out, err := fresh().Restore(ctx, off)
	require.NoError(t, err)
	require.Equal(t, bowtie, string(out))

	// An inline payload that was altered in the envelope.
	e, data2, err := newBuilder(t, nil).Build(ctx, envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "k"})
	require.NoError(t, err)
	i := strings.LastIndex(string(data2), `"evt-9"`)
	e2, err := envelope.Decode([]byte(string(data2[:i]) + `"evt-8"` + string(data2[i+7:])))
	require.NoError(t, err)
	_, err = e2.Restore(ctx, nil)
	var ie *offload.IntegrityError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, offload.ProblemHash, ie.Problem)
	require.Equal(t, e.PayloadSHA256, ie.WantSHA256)

	// Whole payload offloaded but no fetcher.
	e.RawPayload, e.RawPayloadOffloadURI = nil, "s3://dlq-geom/test/"+e.PayloadSHA256+".json"
	_, err = e.Restore(ctx, nil)
	require.ErrorIs(t, err, envelope.ErrNoFetcher)
}

type lyingFetcher struct{}

func (lyingFetcher) Fetch(_ context.Context, ref offload.Ref) ([]byte, error) {
	return []byte(strings.Repeat("x", int(ref.Size))), nil
}

func TestParseEPSG(t *testing.T) {
	good := map[string]int{
		"EPSG:4326": 4326, "epsg:3857": 3857, " EPSG:2154 ": 2154, "urn:ogc:def:crs:EPSG::3857": 3857,
		"urn:ogc:def:crs:EPSG:9.8.1:25832": 25832, "http://www.opengis.net/def/crs/EPSG/0/4258": 4258,
		"https://www.opengis.net/def/crs/EPSG/9.9/27700": 27700, "CRS84": 4326, "OGC:CRS84": 4326,
		"urn:ogc:def:crs:OGC:1.3:CRS84": 4326, "urn:ogc:def:crs:OGC::CRS84": 4326,
		"http://www.opengis.net/def/crs/OGC/1.3/CRS84": 4326,
	}
	for in, want := range good {
		got, err := envelope.ParseEPSG(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "EPSG:", "EPSG:abc", "EPSG:-1", "EPSG:0", "EPSG:1234567890", "ESRI:102100", "+proj=merc",
		"urn:ogc:def:crs:EPSG:x:4326", "urn:ogc:def:crs:EPSG", "http://www.opengis.net/def/crs/EPSG/0", "http://www.opengis.net/def/crs/EPSG/x/4326",
		`GEOGCS["WGS 84"]`} {
		_, err := envelope.ParseEPSG(in)
		require.ErrorIs(t, err, envelope.ErrUnknownCRS, in)
	}
}

func FuzzDecode(f *testing.F) {
	ctx := context.Background()
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Now: func() time.Time { return fixedNow }})
	if err != nil {
		f.Fatal(err)
	}
	for _, tc := range payloadCases {
		_, data, err := b.Build(ctx, envelope.Input{Payload: []byte(tc.body), IdempotencyKey: "k", Err: classify.CRSMismatch(errors.New("x"), 3857)})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"schema_version":"dlq.v1"}`))
	f.Add([]byte(`{"schema_version":"dlq.v1","raw_payload_encoding":"base64","raw_payload":"AAEC"}`))
	// The hostile corpus's forged envelopes: claimed sizes, tampered
	// hashes, deep payloads, duplicates, trailing bytes.
	for _, seed := range corpus.HostileSeeds(corpus.InputEnvelope) {
		f.Add(seed)
	}
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := envelope.Decode(data)
		if err != nil {
			if !errors.Is(err, envelope.ErrInvalid) && !errors.Is(err, envelope.ErrUnsupportedVersion) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		// A decoded envelope is valid, encodes, and decodes to the same
		// encoding again (the canonical form is a fixed point).
		if err := env.Validate(); err != nil {
			t.Fatalf("decoded envelope invalid: %v", err)
		}
		enc, err := env.Encode()
		if err != nil {
			t.Fatalf("encode decoded envelope: %v", err)
		}
		env2, err := envelope.Decode(enc)
		if err != nil {
			t.Fatalf("decode canonical form: %v\n%s", err, enc)
		}
		enc2, err := env2.Encode()
		if err != nil || string(enc) != string(enc2) {
			t.Fatalf("canonical form not stable: %v\n%s\n%s", err, enc, enc2)
		}
		_, _ = env.Restore(ctx, nil)
	})
}
