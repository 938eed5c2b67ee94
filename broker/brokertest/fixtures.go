package brokertest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// Input describes one dead-lettered event for the suite's fixtures.
type Input struct {
	// Payload is the raw event.
	Payload []byte
	// IdempotencyKey is the event's key.
	IdempotencyKey string
	// Err is the failure.
	Err error
	// Key is the message's ordering key.
	Key []byte
	// Source is the provenance.
	Source *envelope.Source
	// At is the dead-letter time.
	At time.Time
	// Attempts is how many times the event was tried. Default 1.
	Attempts int
}

// FilterBaseTime is the earliest dead-letter time among [FilterInputs].
var FilterBaseTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func geomErr(class classify.Class, stage classify.Stage, reason string, loc *orb.Point, epsg int) error {
	return &classify.Error{Class: class, Stage: stage, Err: errors.New(reason), Geometry: &classify.GeometryDetail{
		Reason: reason, Kind: classify.KindOfReason(reason), Location: loc, EPSG: epsg,
	}}
}

// SampleInputs returns events covering the envelope's variety: a bowtie, a
// body that is not JSON, invalid UTF-8, odd whitespace and escapes, a CRS
// mismatch and a transient failure, with Kafka and SQS provenance.
func SampleInputs() []Input {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	kafka := &envelope.Source{System: "kafka", Topic: "spatial.events", Partition: ptr[int32](3), Offset: ptr[int64](42), Key: []byte("parcel-7"), Timestamp: ptr(at.Add(-time.Minute))}
	sqs := &envelope.Source{System: "sqs", Topic: "vector-jobs.fifo", MessageID: "m-1", GroupID: "g-1", DedupID: "d-1", DeliveryCount: 4}
	return []Input{
		{
			Payload:        []byte(`{"event_id":"evt-9","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`),
			IdempotencyKey: "idem:v1:abc", Key: []byte("parcel-7"), Source: kafka, At: at,
			Err: geomErr(classify.ClassInvalidGeometry, classify.StageTopologyValidation, "Self-intersection[0.5 0.5]", &orb.Point{0.5, 0.5}, 0),
		},
		{
			Payload:        []byte("this is not json \x00\x01"),
			IdempotencyKey: "idem:v1:notjson", Source: sqs, At: at,
			Err: &classify.Error{Class: classify.ClassSchemaViolation, Stage: classify.StageParse, Err: errors.New("invalid character 'h' in literal true")},
		},
		{
			Payload:        []byte("{\"event_id\": \"evt-utf8\",\n\t\"name\": \"caf\xe9\", \"geometry\": null}"),
			IdempotencyKey: "idem:v1:badutf8", Key: []byte{0, 1, 2, 0xff}, Source: kafka, At: at,
			Err: &classify.Error{Class: classify.ClassSchemaViolation, Stage: classify.StageParse, Err: errors.New("geometry is null")},
		},
		{
			Payload:        []byte(`{ "event_id" : "evt-esc", "note":"\u00e9 <>& \ud83d\ude00", "v": 1.0, "big": 1e400, "geometry": {"type":"Point","coordinates":[1.0, 2.0]} , "event_id":"evt-dup" }  `),
			IdempotencyKey: "idem:v1:escapes", Source: sqs, At: at,
			Err: classify.Transient(errors.New("tile server: 503 Service Unavailable")),
		},
		{
			Payload:        []byte(`{"event_id":"evt-3857","crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[1113194.9,6446275.8]}}`),
			IdempotencyKey: "idem:v1:3857", Key: []byte("tile-1"), Source: kafka, At: at,
			Err: geomErr(classify.ClassCRSMismatch, classify.StageCRSTransform, "payload CRS is EPSG:3857 but pipeline expects EPSG:4326", nil, 3857),
		},
	}
}

// FilterCountries are the properties.name of [FilterInputs], in turn.
var FilterCountries = []string{"Sudan", "Chad", "Niger", "Canada"}

// FilterInputs returns events spread over classes, stages, EPSG codes,
// event ids, locations, dead-letter times (hours after [FilterBaseTime]),
// source URIs (s3://provider-a/… and s3://provider-b/… in turn) and
// properties (a name from [FilterCountries] in turn, provider "ign" for
// every third event and "osm" for the others), for the filter tests.
func FilterInputs() []Input {
	type spec struct {
		class classify.Class
		stage classify.Stage
		epsg  int
		loc   *orb.Point
		hour  int
	}
	specs := []spec{
		{classify.ClassInvalidGeometry, classify.StageTopologyValidation, 0, &orb.Point{0.5, 0.5}, 0},
		{classify.ClassInvalidGeometry, classify.StageTopologyValidation, 0, &orb.Point{10, 10}, 1},
		{classify.ClassInvalidGeometry, classify.StageParse, 0, &orb.Point{0.25, 0.75}, 2},
		{classify.ClassCRSMismatch, classify.StageCRSTransform, 3857, nil, 3},
		{classify.ClassCRSMismatch, classify.StageCRSTransform, 0, nil, 4},
		{classify.ClassTransient, classify.StagePersist, 0, nil, 5},
		{classify.ClassSchemaViolation, classify.StageParse, 0, nil, 6},
		{classify.ClassUnknown, classify.StageSpatialJoin, 0, nil, 7},
		{classify.ClassInvalidGeometry, classify.StageTopologyValidation, 0, &orb.Point{0.9, 0.1}, 8},
	}
	out := make([]Input, len(specs))
	for i, s := range specs {
		id := "evt-filter-" + strconv.Itoa(i)
		crs := "EPSG:4326"
		if s.epsg != 0 {
			crs = "EPSG:" + strconv.Itoa(s.epsg)
		}
		var err error
		switch s.class {
		case classify.ClassInvalidGeometry, classify.ClassCRSMismatch:
			err = geomErr(s.class, s.stage, "Self-intersection[x y]", s.loc, s.epsg)
		default:
			err = &classify.Error{Class: s.class, Stage: s.stage, Err: errors.New("failure " + id)}
		}
		provider, country := "osm", FilterCountries[i%len(FilterCountries)]
		if i%3 == 0 {
			provider = "ign"
		}
		out[i] = Input{
			Payload: []byte(`{"event_id":"` + id + `","crs":"` + crs + `","source_uri":"s3://provider-` + string(rune('a'+i%2)) +
				`/2026/` + strconv.Itoa(i) + `.geojson","properties":{"name":"` + country + `","provider":"` + provider +
				`"},"geometry":{"type":"Point","coordinates":[0.5,0.5]}}`),
			IdempotencyKey: "idem:test:filter:" + strconv.Itoa(i),
			Err:            err,
			Source:         &envelope.Source{System: "memory", Topic: "spatial.events"},
			At:             FilterBaseTime.Add(time.Duration(s.hour) * time.Hour),
		}
	}
	return out
}

// Message builds the dead-letter message for in: the encoded envelope as
// body, the ordering key, and the dead-letter headers.
func Message(t testing.TB, in Input) *broker.Message {
	t.Helper()
	at := in.At
	if at.IsZero() {
		at = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Now: func() time.Time { return at }})
	require.NoError(t, err)
	env, body, err := b.Build(context.Background(), envelope.Input{
		Payload: in.Payload, IdempotencyKey: in.IdempotencyKey, Err: in.Err,
		Attempts: max(in.Attempts, 1), FirstSeenAt: at.Add(-time.Second), Source: in.Source,
	})
	require.NoError(t, err)
	return &broker.Message{Key: in.Key, Body: body, Headers: broker.Headers(env)}
}

// Messages builds the dead-letter messages for ins.
func Messages(t testing.TB, ins []Input) []*broker.Message {
	t.Helper()
	out := make([]*broker.Message, len(ins))
	for i, in := range ins {
		out[i] = Message(t, in)
	}
	return out
}

// VariantBody returns an envelope body that differs from body only in its
// event id and idempotency key, which end in i.
func VariantBody(t testing.TB, body []byte, i int) []byte {
	t.Helper()
	env, err := envelope.Decode(body)
	require.NoError(t, err)
	env.EventID = "evt-variant-" + strconv.Itoa(i)
	env.IdempotencyKey = "idem:test:variant:" + strconv.Itoa(i)
	out, err := env.Encode()
	require.NoError(t, err)
	return out
}
