package envelope_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/offloadtest"
)

// payload40MB is a deterministic 40 MiB MultiPolygon event, generated once
// per test binary (it is not committed as a file).
var payload40MB = sync.OnceValue(func() []byte { return offloadtest.GeometryEvent(40 << 20) })

// BenchmarkOffload40MB is the realistic oversized-geometry op: locate the
// geometry in a 40 MiB event, hash the payload and the geometry, store the
// geometry in a MemStore (a fresh one each time, so the write really
// happens), and encode the envelope. Compare its MB/s with
// BenchmarkSHA256_40MB.
func BenchmarkOffload40MB(b *testing.B) {
	payload := payload40MB()
	ctx := context.Background()
	in := envelope.Input{Payload: payload, IdempotencyKey: "idem:v1:big", Err: classify.ResourceExhausted(errors.New("vertex budget exceeded"))}
	build := func() {
		off, err := offload.New(offload.NewMemStore(), nil)
		if err != nil {
			b.Fatal(err)
		}
		bld, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := bld.Build(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	// Warm up: the first 40 MiB allocations fault fresh pages in from the
	// OS; measure the steady state a long-running consumer sees.
	for range 3 {
		build()
	}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		off, err := offload.New(offload.NewMemStore(), nil)
		if err != nil {
			b.Fatal(err)
		}
		bld, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
		if err != nil {
			b.Fatal(err)
		}
		env, _, err := bld.Build(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		if env.Geometry.OffloadURI == "" {
			b.Fatal("not offloaded")
		}
	}
}

// BenchmarkSHA256_40MB is the baseline: crypto/sha256 over the same bytes.
func BenchmarkSHA256_40MB(b *testing.B) {
	payload := payload40MB()
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		sha256.Sum256(payload)
	}
}

var smallInput = func() envelope.Input {
	loc := orb.Point{0.5, 0.5}
	return envelope.Input{
		Payload:        []byte(bowtie),
		IdempotencyKey: "idem:v1:abc",
		Err: &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation,
			Geometry: &classify.GeometryDetail{Reason: "Self-intersection[0.5 0.5]", Kind: classify.KindSelfIntersection, Location: &loc,
				GeometryType: "Polygon", VertexCount: 5}},
		Attempts: 1,
		Source:   &envelope.Source{System: "kafka", Topic: "spatial.events"},
	}
}()

// BenchmarkBuildSmall builds (and encodes) the envelope of a small invalid
// polygon: everything but the GEOS check.
func BenchmarkBuildSmall(b *testing.B) {
	bld := newBuilder(b, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := bld.Build(ctx, smallInput); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	env, _, err := newBuilder(b, nil).Build(context.Background(), smallInput)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := env.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode decodes the envelope of a small invalid polygon
// (doc=small) and every envelope of TestDecodeFastMatchesDecode's corpus
// in turn (doc=corpus), with Decode (decoder=reference) and DecodeFast
// (decoder=fast):
//
//	go test -run '^$' -bench '^BenchmarkDecode$' -count 10 ./envelope/ | benchstat -col /decoder -
func BenchmarkDecode(b *testing.B) {
	_, data, err := newBuilder(b, nil).Build(context.Background(), smallInput)
	if err != nil {
		b.Fatal(err)
	}
	docs := corpusEnvelopes(b)
	size := 0
	for _, d := range docs {
		size += len(d)
	}
	for _, dec := range []struct {
		name   string
		decode func([]byte) (*envelope.Envelope, error)
	}{{"reference", envelope.Decode}, {"fast", envelope.DecodeFast}} {
		b.Run("doc=small/decoder="+dec.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := dec.decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("doc=corpus/decoder="+dec.name, func(b *testing.B) {
			b.SetBytes(int64(size / len(docs)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := dec.decode(docs[i%len(docs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
