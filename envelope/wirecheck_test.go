package envelope_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// contractBase returns canonical envelopes to mutate: a bowtie with a
// geometry_error location and Kafka provenance, inline ("inline"), with
// the geometry offloaded ("offloaded"), and a binary payload ("binary").
func contractBase(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	part, off := int32(3), int64(42)
	src := &envelope.Source{System: "kafka", Topic: "spatial.events", Partition: &part, Offset: &off, Key: []byte("parcel-7"), Timestamp: &at}
	err := &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation, Err: errors.New("Self-intersection[0.5 0.5]"),
		Geometry: &classify.GeometryDetail{Reason: "Self-intersection[0.5 0.5]", Location: &orb.Point{0.5, 0.5}}}
	in := envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "idem:v1:abc", Err: err, Source: src, TraceID: "trace-1"}
	out := map[string]string{}
	_, data, e := newBuilder(t, nil).Build(ctx, in)
	require.NoError(t, e)
	out["inline"] = string(data)
	o, _ := newOffloader(t, 1)
	_, data, e = newBuilder(t, o).Build(ctx, in)
	require.NoError(t, e)
	out["offloaded"] = string(data)
	in.Payload = []byte("\x00\x01\x02\x80\xff")
	_, data, e = newBuilder(t, nil).Build(ctx, in)
	require.NoError(t, e)
	out["binary"] = string(data)
	for name, doc := range out {
		_, err := envelope.Decode([]byte(doc))
		require.NoError(t, err, name)
	}
	return out
}

// TestDecodeWireRules covers the rules Decode enforces on the bytes,
// which encoding/json alone would let through, so that Decode accepts
// exactly what the JSON Schema accepts (see internal/contracttest).
func TestDecodeWireRules(t *testing.T) {
	base := contractBase(t)
	cases := []struct {
		name, base, old, new string
		field, rule          string
	}{
		{"null optional", "inline", `"trace_id":"trace-1"`, `"trace_id":null`, "trace_id", "null"},
		{"null required", "inline", `"error_message":"Self-intersection[0.5 0.5]"`, `"error_message":null`, "error_message", "null"},
		{"null object", "inline", `"source":{`, `"source":null,"x_source":{`, "source", "null"},
		{"null in location", "inline", `"location":[0.5,0.5]`, `"location":[null,0.5]`, "geometry_error.location", "null"},
		{"empty location", "inline", `"location":[0.5,0.5]`, `"location":[]`, "geometry_error.location", "len"},
		{"duplicate member", "inline", `"event_id":"evt-9"`, `"event_id":"evt-9","event_id":"evt-9"`, "event_id", "duplicate"},
		{"duplicate by escape", "inline", `"event_id":"evt-9"`, `"event_id":"evt-9","event\u005fid":"evt-9"`, "event_id", "duplicate"},
		{"duplicate nested", "inline", `"byte_size":78`, `"byte_size":78,"byte_size":78`, "geometry.byte_size", "duplicate"},
		{"case variant name", "inline", `"event_id":"evt-9"`, `"event_id":"evt-9","EVENT_ID":"other"`, "EVENT_ID", "name"},
		{"folded name", "inline", `"source_crs":"EPSG:4326"`, `"source_crs":"EPSG:4326","\u017fource_crs":"EPSG:3857"`, "ſource_crs", "name"},
		{"nested case variant", "inline", `"system":"kafka"`, `"system":"kafka","System":"sqs"`, "source.System", "name"},
		{"invalid UTF-8", "inline", `"error_message":"Self-intersection`, "\"error_message\":\"Self-\xffintersection", "", "utf8"},
		{"integer with fraction", "inline", `"attempts":1`, `"attempts":1.0`, "attempts", "integer"},
		{"integer with exponent", "inline", `"byte_size":78`, `"byte_size":7.8e1`, "geometry.byte_size", "integer"},
		{"empty optional string", "inline", `"trace_id":"trace-1"`, `"trace_id":""`, "trace_id", "empty"},
		{"empty encoding", "binary", `"raw_payload_encoding":"base64"`, `"raw_payload_encoding":""`, "raw_payload_encoding", "empty"},
		{"comma fraction", "inline", `"dead_lettered_at":"2026-03-14T15:09:26.535897Z"`, `"dead_lettered_at":"2026-03-14T15:09:26,535897Z"`, "dead_lettered_at", "time"},
		{"offset +24:00", "inline", `"dead_lettered_at":"2026-03-14T15:09:26.535897Z"`, `"dead_lettered_at":"2026-03-14T15:09:26+24:00"`, "dead_lettered_at", "time"},
		{"lower-case t", "inline", `"dead_lettered_at":"2026-03-14T15:09:26.535897Z"`, `"dead_lettered_at":"2026-03-14t15:09:26Z"`, "dead_lettered_at", "time"},
		{"year 1", "inline", `"first_seen_at":"2026-03-14T15:09:26.535897Z"`, `"first_seen_at":"0001-06-01T00:00:00Z"`, "first_seen_at", "time"},
		{"zero time with an offset", "inline", `"first_seen_at":"2026-03-14T15:09:26.535897Z"`, `"first_seen_at":"0001-01-01T05:30:00+05:30"`, "first_seen_at", "time"},
		{"source timestamp Feb 30", "inline", `"timestamp":"2026-01-02T03:04:05.000006Z"`, `"timestamp":"2026-02-30T03:04:05Z"`, "source.timestamp", "time"},
		{"key with a line break", "inline", `"key":"cGFyY2VsLTc="`, `"key":"cGFy\nY2VsLTc="`, "source.key", "base64"},
		{"raw payload with a line break", "binary", `"raw_payload":"AAECgP8="`, `"raw_payload":"AAEC\r\ngP8="`, "raw_payload", "base64"},
		{"missing error_message", "inline", `"error_message":"Self-intersection[0.5 0.5]",`, ``, "error_message", "required"},
		{"missing payload_size", "inline", `"payload_size":133,`, ``, "payload_size", "required"},
		{"missing fault member", "inline", `"location":[0.5,0.5]`, `"location":[0.5,0.5],"fault":{"part":-1,"ring":0}`, "geometry_error.fault.vertex", "required"},
		{"invalid_geometry without geometry_error", "inline", `"geometry_error":{"reason":"Self-intersection[0.5 0.5]","kind":"self_intersection","location":[0.5,0.5]},`, ``, "geometry_error", "required"},
		{"offload URI with a space", "offloaded", `s3://dlq-geom`, `s3 //dlq-geo`, "geometry.offload_uri", "uri"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := base[tc.base]
			require.Contains(t, doc, tc.old, "the base envelope changed")
			doc = strings.Replace(doc, tc.old, tc.new, 1)
			if tc.base == "offloaded" {
				doc = strings.ReplaceAll(doc, tc.old, tc.new)
			}
			_, err := envelope.Decode([]byte(doc))
			var ve *envelope.ValidationError
			require.ErrorAs(t, err, &ve, doc)
			found := false
			for _, v := range ve.Violations {
				found = found || v.Field == tc.field && v.Rule == tc.rule
			}
			require.True(t, found, "want %s/%s in %v", tc.field, tc.rule, ve.Violations)
		})
	}
}

func TestDecodeRawPayloadAndOffloadBothSet(t *testing.T) {
	_, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: nil, IdempotencyKey: "k"})
	require.NoError(t, err)
	require.Contains(t, string(data), `"raw_payload":""`)
	doc := strings.Replace(string(data), `"raw_payload_encoding"`, `"raw_payload_offload_uri":"s3://dlq-geom/test/`+sha(nil)+`.json","raw_payload_encoding"`, 1)
	_, err = envelope.Decode([]byte(doc))
	var ve *envelope.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Contains(t, ve.Fields(), "raw_payload")
}

// TestDecodeIgnoresUnknownMembers is the versioning rule: a v1.1 writer
// adds members, a v1 reader ignores them (and its canonical re-encoding
// drops them), whatever their values.
func TestDecodeIgnoresUnknownMembers(t *testing.T) {
	for name, doc := range contractBase(t) {
		t.Run(name, func(t *testing.T) {
			v11 := strings.Replace(doc, `{"schema_version":"dlq.v1",`, `{"schema_version":"dlq.v1","retry_after":"PT5M","annotations":{"A":null,"a":[1.5e3]},`, 1)
			v11 = strings.Replace(v11, `"byte_size":`, `"crs_wkt":null,"byte_size":`, 1)
			v11 = strings.Replace(v11, `"system":"kafka"`, `"system":"kafka","headers":{"x":"y"}`, 1)
			env, err := envelope.Decode([]byte(v11))
			require.NoError(t, err)
			again, err := env.Encode()
			require.NoError(t, err)
			require.Equal(t, doc, string(again))
		})
	}
}

func TestBuildResetsFirstSeenInYearOne(t *testing.T) {
	env, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "k",
		FirstSeenAt: time.Date(1, 6, 1, 0, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	require.Equal(t, fixedNow, env.FirstSeenAt)
	_, err = envelope.Decode(data)
	require.NoError(t, err)
}
