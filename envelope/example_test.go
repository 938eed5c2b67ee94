package envelope_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
)

func Example() {
	ctx := context.Background()
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{
		Now: func() time.Time { return time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC) },
	})
	if err != nil {
		panic(err)
	}
	loc := orb.Point{0.5, 0.5}
	failure := &classify.Error{
		Class: classify.ClassInvalidGeometry,
		Stage: classify.StageTopologyValidation,
		Geometry: &classify.GeometryDetail{
			Reason: "Self-intersection[0.5 0.5]", Kind: classify.KindSelfIntersection, Location: &loc,
		},
	}
	payload := []byte(`{"event_id":"evt-9","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`)
	env, data, err := b.Build(ctx, envelope.Input{
		Payload:        payload,
		IdempotencyKey: "idem:v1:abc",
		Err:            failure,
		Attempts:       1,
		FirstSeenAt:    time.Date(2026, 3, 14, 11, 59, 0, 0, time.UTC),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(env.Route, env.FailureClass, env.FailedStage, env.GeometryError.Reason)
	fmt.Println(env.SourceEPSG, env.GeometryType, env.VertexCount)

	// The consumer publishes data; a replayer later decodes it and gets
	// back the exact payload bytes, verified.
	dec, err := envelope.Decode(data)
	if err != nil {
		panic(err)
	}
	original, err := dec.Restore(ctx, nil)
	fmt.Println(string(original) == string(payload), err, dec.IdempotencyKey)
	// Output:
	// poison invalid_geometry topology_validation Self-intersection[0.5 0.5]
	// 4326 Polygon 5
	// true <nil> idem:v1:abc
}

func ExampleBuilder_Build_offload() {
	ctx := context.Background()
	off, _ := offload.New(offload.NewMemStore(), &offload.Options{BaseURI: "s3://dlq-geom", Threshold: 64})
	b, _ := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})

	coords := strings.Repeat("[12.5,41.9],", 20) + "[12.5,41.9]"
	payload := []byte(`{"id":1,"geometry":{"type":"LineString","coordinates":[` + coords + `]}}`)
	env, _, err := b.Build(ctx, envelope.Input{Payload: payload, IdempotencyKey: "idem:v1:line"})
	if err != nil {
		panic(err)
	}
	fmt.Println(env.Geometry.OffloadURI != "", env.Geometry.ByteSize, env.VertexCount)
	fmt.Println(string(env.RawPayload) == `{"id":1,"geometry":{"$ref":"`+env.Geometry.OffloadURI+`"}}`)

	restored, err := env.Restore(ctx, off) // fetches, verifies, splices back
	fmt.Println(string(restored) == string(payload), err)
	// Output:
	// true 289 21
	// true
	// true <nil>
}

// OpenPayload streams the same payload as Restore without holding it:
// copy it where it goes (a file, an HTTP response) and trust it only once
// the reader has ended with io.EOF (io.Copy then returns nil).
func ExampleEnvelope_OpenPayload() {
	ctx := context.Background()
	off, _ := offload.New(offload.NewMemStore(), &offload.Options{BaseURI: "s3://dlq-geom", Threshold: 64})
	b, _ := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	coords := strings.Repeat("[12.5,41.9],", 20) + "[12.5,41.9]"
	payload := []byte(`{"id":1,"geometry":{"type":"LineString","coordinates":[` + coords + `]}}`)
	env, _, err := b.Build(ctx, envelope.Input{Payload: payload, IdempotencyKey: "idem:v1:line"})
	if err != nil {
		panic(err)
	}

	rc, err := env.OpenPayload(ctx, off) // prefix, the geometry blob, suffix
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	var out strings.Builder
	n, err := io.Copy(&out, rc)
	fmt.Println(n, err, out.String() == string(payload))
	// Output: 309 <nil> true
}

func ExampleDecode_errors() {
	_, err := envelope.Decode([]byte(`{"schema_version":"dlq.v2"}`))
	fmt.Println(errors.Is(err, envelope.ErrUnsupportedVersion))

	_, err = envelope.Decode([]byte(`{"schema_version":"dlq.v1","attempts":0}`))
	var ve *envelope.ValidationError
	fmt.Println(errors.As(err, &ve), len(ve.Violations) > 5)
	// Output:
	// true
	// true true
}

// An event that carries its own idempotency key keeps it, verbatim; one
// without gets a key derived from its bytes, marked derived. A key the
// caller gives (an idempotency-key header) wins.
func ExampleBuilder_IdempotencyKeyOf() {
	b, _ := envelope.NewBuilder(nil) // IdempotencyKeyPath "/idempotency_key"
	ctx := context.Background()
	own := []byte(`{"idempotency_key":"order-17","geometry":null}`)
	fmt.Println(b.IdempotencyKeyOf(own))
	env, _, _ := b.Build(ctx, envelope.Input{Payload: own})
	fmt.Println(env.IdempotencyKey, env.IdempotencyKeyDerived)
	env, _, _ = b.Build(ctx, envelope.Input{Payload: own, IdempotencyKey: "from-header"})
	fmt.Println(env.IdempotencyKey, env.IdempotencyKeyDerived)
	env, _, _ = b.Build(ctx, envelope.Input{Payload: []byte(`{"geometry":null}`)})
	fmt.Println(env.IdempotencyKey[:8], env.IdempotencyKeyDerived)
	// Output:
	// order-17
	// order-17 false
	// from-header false
	// idem:v1: true
}

// DecodeFast is for reading many stored envelopes (a store's bulk export):
// the same envelope, or the same typed error, as Decode, in one pass.
func ExampleDecodeFast() {
	ctx := context.Background()
	b, err := envelope.NewBuilder(nil)
	if err != nil {
		panic(err)
	}
	payload := []byte(`{"event_id":"evt-7","geometry":{"type":"Point","coordinates":[1,2]}}`)
	_, data, err := b.Build(ctx, envelope.Input{Payload: payload, Err: errors.New("spatial join: timeout")})
	if err != nil {
		panic(err)
	}
	for _, stored := range [][]byte{data, []byte(`{"schema_version":"dlq.v2"}`)} {
		env, err := envelope.DecodeFast(stored)
		if err != nil {
			fmt.Println(errors.Is(err, envelope.ErrUnsupportedVersion))
			continue
		}
		fmt.Println(env.EventID, env.FailureClass)
	}
	// Output:
	// evt-7 unknown
	// true
}
