package envelope_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/idemkey"
	"github.com/geodlq/geodlq/offload"
)

// bowtie is the seed's self-intersecting polygon event.
const bowtie = `{"event_id": "evt-9", "crs": "EPSG:4326", "geometry": {"type": "Polygon", "coordinates": [[[0, 0], [1, 1], [1, 0], [0, 1], [0, 0]]]}}`

func decodeMap(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	return m
}

// The seed's load-bearing test: a deterministic geometry failure is
// diverted away from the retry destination, and the key survives.
func TestSeedInvalidGeometryRoutesToPoison(t *testing.T) {
	loc := orb.Point{0.5, 0.5}
	err := &classify.Error{
		Class: classify.ClassInvalidGeometry,
		Stage: classify.StageTopologyValidation,
		Geometry: &classify.GeometryDetail{
			Reason: "Self-intersection[0.5 0.5]", Kind: classify.KindSelfIntersection, Location: &loc,
			Fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0, OnSegment: true},
		},
	}
	env, data, berr := newBuilder(t, nil).Build(context.Background(), envelope.Input{
		Payload: []byte(bowtie), IdempotencyKey: "idem:v1:abc", Err: err, Attempts: 1, FirstSeenAt: fixedNow.Add(-time.Minute),
	})
	require.NoError(t, berr)
	m := decodeMap(t, data)
	require.Equal(t, "poison", m["destination"])
	require.Equal(t, "invalid_geometry", m["failure_class"])
	require.Equal(t, "topology_validation", m["failed_stage"])
	ge := m["geometry_error"].(map[string]any)
	require.Contains(t, ge["reason"], "Self-intersection")
	require.Equal(t, "self_intersection", ge["kind"])
	require.Equal(t, []any{0.5, 0.5}, ge["location"])
	require.Equal(t, map[string]any{"part": -1.0, "ring": 0.0, "vertex": 0.0, "on_segment": true}, ge["fault"])
	require.NotContains(t, ge, "epsg")
	require.Equal(t, "idem:v1:abc", m["idempotency_key"])
	require.NotContains(t, m, "idempotency_key_derived")
	require.Equal(t, "evt-9", m["event_id"])
	require.Equal(t, "EPSG:4326", m["source_crs"])
	require.Equal(t, 4326.0, m["source_epsg"])
	require.Equal(t, "Polygon", m["geometry_type"])
	require.Equal(t, 5.0, m["vertex_count"])
	g := m["geometry"].(map[string]any)
	require.Equal(t, float64(strings.Index(bowtie, `{"type": "Polygon"`)), g["payload_offset"])
	require.Equal(t, classify.RoutePoison, env.Route)
}

// seedMultiPoint is the seed's 60,000-point MultiPoint, written the way
// Python's json.dumps writes [[i * 1e-6, i * 1e-6] for i in range(60000)].
func seedMultiPoint() []byte {
	var b bytes.Buffer
	b.WriteString(`{"event_id": "evt-big", "geometry": {"type": "MultiPoint", "coordinates": [`)
	for i := range 60_000 {
		if i > 0 {
			b.WriteString(", ")
		}
		f := strconv.FormatFloat(float64(i)*1e-6, 'g', -1, 64)
		if !strings.ContainsAny(f, ".e") {
			f += ".0"
		}
		fmt.Fprintf(&b, "[%s, %s]", f, f)
	}
	b.WriteString("]}}")
	return b.Bytes()
}

func TestSeedLargeGeometryOffloadedOnce(t *testing.T) {
	ctx := context.Background()
	off, cs := newOffloader(t, 0)
	b := newBuilder(t, off)
	payload := seedMultiPoint()
	require.Greater(t, len(payload), offload.DefaultThreshold)
	start, end := bytes.Index(payload, []byte(`{"type": "MultiPoint"`)), len(payload)-1
	geom := payload[start:end]

	env, data, err := b.Build(ctx, envelope.Input{Payload: payload, IdempotencyKey: "idem:v1:big", Err: classify.ResourceExhausted(errors.New("too many vertices"))})
	require.NoError(t, err)
	require.NotEmpty(t, env.Geometry.OffloadURI)
	require.Nil(t, env.Geometry.Inline)
	require.Equal(t, int64(1), cs.Puts(), "blob written exactly once")
	require.Equal(t, sha(geom), env.Geometry.ContentSHA256, "hash of the exact bytes")
	require.Equal(t, int64(len(geom)), env.Geometry.ByteSize)
	require.Equal(t, "s3://dlq-geom/test/"+sha(geom)+".geojson", env.Geometry.OffloadURI)
	require.Equal(t, 60_000, env.VertexCount)
	require.Equal(t, "MultiPoint", env.GeometryType)
	require.Less(t, len(data), 4096, "the envelope stays small")
	require.Contains(t, string(env.RawPayload), `"geometry": {"$ref":"`+env.Geometry.OffloadURI+`"}}`)

	// The same geometry again is not written again.
	_, _, err = b.Build(ctx, envelope.Input{Payload: payload, IdempotencyKey: "idem:v1:big2"})
	require.NoError(t, err)
	require.Equal(t, int64(1), cs.Puts())

	dec, err := envelope.Decode(data)
	require.NoError(t, err)
	restored, err := dec.Restore(ctx, off)
	require.NoError(t, err)
	require.Equal(t, payload, restored)
}

func TestSeedCRSMismatchRecordsEPSG(t *testing.T) {
	payload := []byte(`{"event_id":"evt-3857","crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[1389413.6,5145963.2]}}`)
	err := classify.WithStage(classify.CRSMismatch(errors.New("payload CRS is EPSG:3857 but pipeline expects EPSG:4326 (WGS84)"), 3857), classify.StageCRSTransform)
	env, data, berr := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: payload, IdempotencyKey: "idem:v1:crs", Err: err})
	require.NoError(t, berr)
	require.NotNil(t, env.GeometryError.EPSG)
	require.Equal(t, 3857, *env.GeometryError.EPSG)
	m := decodeMap(t, data)
	require.Equal(t, 3857.0, m["geometry_error"].(map[string]any)["epsg"])
	require.Equal(t, "crs_mismatch", m["failure_class"])
	require.Equal(t, "crs_transform", m["failed_stage"])
	require.Equal(t, "poison", m["destination"])
	require.Equal(t, 3857.0, m["source_epsg"])
}

func TestCRSMismatchEPSGAlwaysPresent(t *testing.T) {
	cases := []struct {
		name    string
		payload string
		err     error
		class   classify.Class
		want    int
	}{
		{"unparseable", `{"crs":"+proj=merc","geometry":null}`, classify.CRSMismatch(errors.New("unparseable CRS"), 0), "", 0},
		{"from payload when error has none", `{"crs":"urn:ogc:def:crs:EPSG::2154"}`, classify.CRSMismatch(errors.New("x"), 0), "", 2154},
		{"class override without detail", `{"crs":"EPSG:3857"}`, errors.New("out of range"), classify.ClassCRSMismatch, 3857},
		{"no crs at all", `not json`, errors.New("bad crs"), classify.ClassCRSMismatch, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(tc.payload), IdempotencyKey: "k", Err: tc.err, Class: tc.class})
			require.NoError(t, err)
			ge := decodeMap(t, data)["geometry_error"].(map[string]any)
			require.Contains(t, ge, "epsg")
			require.Equal(t, float64(tc.want), ge["epsg"])
		})
	}
}

// Every failure produces an envelope, whatever is missing or malformed.
func TestBuildAlwaysProducesEnvelope(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name        string
		payload     string
		in          envelope.Input
		check       func(t *testing.T, e *envelope.Envelope)
		wantEventID string
	}{
		{name: "crs null (lost by the reference)", payload: `{"event_id":"e-null","crs":null,"geometry":{"type":"Point","coordinates":[1,2]}}`,
			check: func(t *testing.T, e *envelope.Envelope) {
				require.Equal(t, "", e.SourceCRS)
				require.Zero(t, e.SourceEPSG)
			}, wantEventID: "e-null"},
		{name: "no geometry", payload: `{"id":42}`, wantEventID: "42", check: func(t *testing.T, e *envelope.Envelope) {
			require.True(t, e.Geometry.Missing)
			require.Equal(t, int64(-1), e.Geometry.PayloadOffset)
			require.Equal(t, envelope.MissingGeometry, string(e.Geometry.Inline))
			require.Equal(t, sha([]byte(envelope.MissingGeometry)), e.Geometry.ContentSHA256)
		}},
		{name: "null geometry", payload: `{"id":-1.5e3,"geometry":null}`, wantEventID: "-1.5e3", check: func(t *testing.T, e *envelope.Envelope) {
			require.True(t, e.Geometry.Missing)
		}},
		{name: "not JSON", payload: `<xml/>`, check: func(t *testing.T, e *envelope.Envelope) {
			require.True(t, e.Geometry.Missing)
			require.Equal(t, envelope.EncodingString, e.RawPayloadEncoding)
		}},
		{name: "empty body", payload: ``},
		{name: "event_id wins over id", payload: `{"id":"b","event_id":"a"}`, wantEventID: "a"},
		{name: "empty event_id falls back to id", payload: `{"event_id":"","id":"b"}`, wantEventID: "b"},
		{name: "object event_id ignored", payload: `{"event_id":{"x":1},"id":true}`},
		{name: "escaped event_id", payload: `{"event_id":"caf\u00e9"}`, wantEventID: "café"},
		{name: "event id override", payload: `{"event_id":"a"}`, in: envelope.Input{EventID: "given"}, wantEventID: "given"},
		{name: "named CRS object", payload: `{"crs":{"type":"name","properties":{"name":"urn:ogc:def:crs:OGC:1.3:CRS84"}},"geometry":{"type":"Point","coordinates":[1,2]}}`,
			check: func(t *testing.T, e *envelope.Envelope) {
				require.Equal(t, "urn:ogc:def:crs:OGC:1.3:CRS84", e.SourceCRS)
				require.Equal(t, 4326, e.SourceEPSG)
			}},
		{name: "unresolvable CRS", payload: `{"crs":"+proj=longlat +datum=WGS84"}`, check: func(t *testing.T, e *envelope.Envelope) {
			require.Equal(t, "+proj=longlat +datum=WGS84", e.SourceCRS)
			require.Zero(t, e.SourceEPSG)
		}},
		{name: "numeric CRS ignored", payload: `{"crs":4326}`, check: func(t *testing.T, e *envelope.Envelope) { require.Empty(t, e.SourceCRS) }},
		{name: "NaN coordinates", payload: `{"geometry":{"type":"LineString","coordinates":[[NaN,1],[2,Infinity]]}}`, check: func(t *testing.T, e *envelope.Envelope) {
			require.Equal(t, "LineString", e.GeometryType)
			require.Equal(t, 2, e.VertexCount)
			require.Equal(t, envelope.EncodingString, e.Geometry.InlineEncoding)
		}},
		{name: "geometry is a string", payload: `{"geometry":"POINT(1 2)"}`, check: func(t *testing.T, e *envelope.Envelope) {
			require.Equal(t, `"POINT(1 2)"`, string(e.Geometry.Inline))
			require.Empty(t, e.GeometryType)
		}},
		{name: "huge event_id ignored", payload: `{"event_id":"` + strings.Repeat("x", 2000) + `"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Payload = []byte(tc.payload)
			env, data, err := newBuilder(t, nil).Build(ctx, in)
			require.NoError(t, err)
			require.NoError(t, env.Validate())
			require.True(t, env.IdempotencyKeyDerived, "no key given: derived and marked")
			require.True(t, idemkey.Valid(env.IdempotencyKey))
			require.Equal(t, idemkey.Derive(envelope.PayloadKeyNamespace, sha256Sum([]byte(tc.payload))), env.IdempotencyKey)
			require.Equal(t, 1, env.Attempts)
			require.Equal(t, fixedNow, env.FirstSeenAt)
			require.Equal(t, fixedNow, env.DeadLetteredAt)
			require.Equal(t, classify.ClassUnknown, env.FailureClass)
			require.Equal(t, classify.RouteRetry, env.Route)
			require.Equal(t, classify.StageSpatialJoin, env.FailedStage)
			if tc.wantEventID != "" {
				require.Equal(t, tc.wantEventID, env.EventID)
			} else {
				require.Equal(t, "evt-"+idemkey.Derive(envelope.EventIDNamespace, []byte(env.IdempotencyKey))[8:40], env.EventID)
			}
			if tc.check != nil {
				tc.check(t, env)
			}
			dec, err := envelope.Decode(data)
			require.NoError(t, err)
			restored, err := dec.Restore(ctx, nil)
			require.NoError(t, err)
			require.Equal(t, tc.payload, string(restored))
		})
	}
}

func sha256Sum(b []byte) []byte {
	h, _ := hexDecode(sha(b))
	return h
}

func hexDecode(s string) ([]byte, error) {
	out := make([]byte, len(s)/2)
	for i := range out {
		v, err := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
		if err != nil {
			return nil, err
		}
		out[i] = byte(v)
	}
	return out, nil
}

func TestStageAndClassPrecedence(t *testing.T) {
	ctx := context.Background()
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{DefaultStage: classify.StageParse, Now: func() time.Time { return fixedNow }})
	require.NoError(t, err)
	cases := []struct {
		name      string
		in        envelope.Input
		class     classify.Class
		stage     classify.Stage
		dest      classify.Route
		attempts  int
		firstSeen time.Time
	}{
		{"defaults", envelope.Input{}, classify.ClassUnknown, classify.StageParse, "retry", 1, fixedNow},
		{"input stage", envelope.Input{Stage: classify.StagePersist, Attempts: -3}, classify.ClassUnknown, classify.StagePersist, "retry", 1, fixedNow},
		{"error stage wins", envelope.Input{Stage: classify.StagePersist, Err: classify.WithStage(classify.Transient(errors.New("503")), classify.StageSpatialJoin), Attempts: 5},
			classify.ClassTransient, classify.StageSpatialJoin, "retry", 5, fixedNow},
		{"class override", envelope.Input{Class: classify.ClassSchemaViolation, Err: classify.Transient(errors.New("x"))}, classify.ClassSchemaViolation, classify.StageParse, "poison", 1, fixedNow},
		{"json error is schema", envelope.Input{Err: fmt.Errorf("decode: %w", &json.SyntaxError{})}, classify.ClassSchemaViolation, classify.StageParse, "poison", 1, fixedNow},
		{"first seen kept in UTC", envelope.Input{FirstSeenAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))}, classify.ClassUnknown, classify.StageParse, "retry", 1, time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Payload = []byte(`{}`)
			tc.in.IdempotencyKey = "k"
			env, _, err := b.Build(ctx, tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.class, env.FailureClass)
			require.Equal(t, tc.stage, env.FailedStage)
			require.Equal(t, tc.dest, env.Route)
			require.Equal(t, tc.attempts, env.Attempts)
			require.Equal(t, tc.firstSeen, env.FirstSeenAt)
			require.False(t, env.IdempotencyKeyDerived)
		})
	}
}

func TestBuilderOptions(t *testing.T) {
	_, err := envelope.NewBuilder(&envelope.BuilderOptions{GeometryPath: "geometry"})
	require.Error(t, err)
	_, err = envelope.NewBuilder(&envelope.BuilderOptions{DefaultStage: classify.Stage("stage_99")})
	require.Error(t, err)
	b, err := envelope.NewBuilder(nil)
	require.NoError(t, err)
	env, _, err := b.Build(context.Background(), envelope.Input{Payload: []byte(`{"geometry":{"type":"Point","coordinates":[0,0]}}`), IdempotencyKey: "k"})
	require.NoError(t, err)
	require.False(t, env.Geometry.Missing)
	require.WithinDuration(t, time.Now(), env.DeadLetteredAt, time.Minute)

	// Nested geometry path and a custom resolver whose errors are not fatal.
	b, err = envelope.NewBuilder(&envelope.BuilderOptions{
		GeometryPath: "/feature/geometry",
		ResolveEPSG:  func(string) (int, error) { return 0, errors.New("no database") },
		Classifier: classify.NewClassifier(func(err error) (classify.Class, bool) {
			return classify.ClassResourceExhausted, strings.Contains(err.Error(), "budget")
		}),
	})
	require.NoError(t, err)
	payload := `{"crs":"EPSG:4326","feature":{"geometry":{"type":"Point","coordinates":[0,0]}}}`
	env, _, err = b.Build(context.Background(), envelope.Input{Payload: []byte(payload), IdempotencyKey: "k", Err: errors.New("vertex budget exceeded")})
	require.NoError(t, err)
	require.Equal(t, `{"type":"Point","coordinates":[0,0]}`, string(env.Geometry.Inline))
	require.Equal(t, int64(strings.Index(payload, `{"type"`)), env.Geometry.PayloadOffset)
	require.Zero(t, env.SourceEPSG)
	require.Equal(t, classify.ClassResourceExhausted, env.FailureClass)
	require.Equal(t, "Point", env.GeometryType)
}

func TestBuildClampsDetailLabels(t *testing.T) {
	err := &classify.Error{Class: classify.ClassInvalidGeometry, Geometry: &classify.GeometryDetail{
		Reason: "x", Kind: classify.ReasonKind(strings.Repeat("k", 100)), GeometryType: strings.Repeat("T", 100), VertexCount: -4,
	}}
	env, _, berr := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "k", Err: err})
	require.NoError(t, berr)
	require.NoError(t, env.Validate())
	require.Equal(t, "other", env.GeometryError.Kind)
	require.Equal(t, "Polygon", env.GeometryType, "falls back to the scan")
	require.Equal(t, 5, env.VertexCount)
}

func TestBuildRejectsBadCallerFields(t *testing.T) {
	_, _, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(`{}`), IdempotencyKey: "k", Source: &envelope.Source{}})
	require.ErrorIs(t, err, envelope.ErrInvalid)
}

func TestOffloadFailureIsReturned(t *testing.T) {
	boom := errors.New("store down")
	o, err := offload.New(failingStore{err: boom}, &offload.Options{BaseURI: "s3://x", Threshold: 1})
	require.NoError(t, err)
	_, _, err = newBuilder(t, o).Build(context.Background(), envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "k"})
	require.ErrorIs(t, err, boom)
}

type failingStore struct {
	offload.Store
	err error
}

func (f failingStore) Exists(context.Context, string) (bool, error) { return false, f.err }

func TestMaxBytes(t *testing.T) {
	ctx := context.Background()
	payload := seedMultiPoint()
	for _, limit := range []int{256 << 10, 1 << 20} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			// Threshold above the geometry: only the limit forces the offload.
			off, cs := newOffloader(t, 64<<20)
			env, data, err := newBuilder(t, off).Build(ctx, envelope.Input{Payload: payload, IdempotencyKey: "k", MaxBytes: limit})
			require.NoError(t, err)
			require.LessOrEqual(t, len(data), limit)
			require.NotEmpty(t, env.Geometry.OffloadURI)
			require.Empty(t, env.RawPayloadOffloadURI, "the geometry alone was enough")
			require.Equal(t, int64(1), cs.Puts())
			dec, err := envelope.Decode(data)
			require.NoError(t, err)
			restored, err := dec.Restore(ctx, off)
			require.NoError(t, err)
			require.Equal(t, payload, restored)
		})
	}

	t.Run("properties too big: whole payload offloaded", func(t *testing.T) {
		off, cs := newOffloader(t, 0)
		big := []byte(`{"geometry":{"type":"Point","coordinates":[1,2]},"properties":{"blob":"` + strings.Repeat("p", 300<<10) + `"}}`)
		env, data, err := newBuilder(t, off).Build(ctx, envelope.Input{Payload: big, IdempotencyKey: "k", MaxBytes: 256 << 10})
		require.NoError(t, err)
		require.LessOrEqual(t, len(data), 256<<10)
		require.Equal(t, "s3://dlq-geom/test/"+sha(big)+".json", env.RawPayloadOffloadURI)
		require.Nil(t, env.RawPayload)
		require.Equal(t, int64(2), cs.Puts(), "geometry, then the whole payload")
		dec, err := envelope.Decode(data)
		require.NoError(t, err)
		restored, err := dec.Restore(ctx, off)
		require.NoError(t, err)
		require.Equal(t, big, restored)
	})

	t.Run("huge error message truncated with a marker", func(t *testing.T) {
		off, _ := newOffloader(t, 0)
		msg := strings.Repeat("é\"", 200_000)
		env, data, err := newBuilder(t, off).Build(ctx, envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "k", MaxBytes: 64 << 10,
			Err: classify.InvalidGeometry(errors.New(msg))})
		require.NoError(t, err)
		require.LessOrEqual(t, len(data), 64<<10)
		require.Contains(t, env.ErrorMessage, "…[truncated by geodlq: ")
		require.True(t, strings.HasPrefix(msg, env.ErrorMessage[:strings.Index(env.ErrorMessage, "…[truncated")]))
		require.True(t, utf8Valid(env.ErrorMessage))
		require.Contains(t, env.GeometryError.Reason, "…[truncated by geodlq: ")
		dec, err := envelope.Decode(data)
		require.NoError(t, err)
		restored, err := dec.Restore(ctx, off)
		require.NoError(t, err)
		require.Equal(t, bowtie, string(restored))
	})

	t.Run("no offloader: too large", func(t *testing.T) {
		env, data, err := newBuilder(t, nil).Build(ctx, envelope.Input{Payload: payload, IdempotencyKey: "k", MaxBytes: 256 << 10})
		require.ErrorIs(t, err, classify.ErrTooLarge)
		var tl *classify.TooLargeError
		require.ErrorAs(t, err, &tl)
		require.Equal(t, 256<<10, tl.Limit)
		require.Greater(t, tl.Size, tl.Limit)
		require.NotNil(t, env)
		require.Nil(t, data)
		require.Contains(t, err.Error(), "Offloader")
	})

	t.Run("limit below the minimal envelope", func(t *testing.T) {
		off, _ := newOffloader(t, 0)
		_, _, err := newBuilder(t, off).Build(ctx, envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "k", MaxBytes: 100})
		require.ErrorIs(t, err, classify.ErrTooLarge)
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\ufffd") == s }
