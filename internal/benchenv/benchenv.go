// Package benchenv is the shared fixture of the dead-letter stores'
// throughput benchmarks (broker/*/bench_test.go): a realistic dlq.v1
// envelope of exactly [EnvelopeBytes] bytes with the headers the
// [broker.Processor] sets, one distinct copy per message, and the loops
// that time a write path and the replay read path and report envelopes/s.
// It is for benchmarks only.
//
// The envelope is what envelope.Builder makes of a small invalid parcel:
// a self-intersecting polygon (a bowtie) in EPSG:4326, with the location
// and fault GEOS reports for it, received from Kafka. Every message gets
// its own idempotency key, of fixed width, so that stores which absorb
// duplicate writes (PostGIS's unique key, JetStream's Nats-Msg-Id) store
// every one, and every body has the same length.
package benchenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// EnvelopeBytes is the length of every envelope body: 2 KiB.
const EnvelopeBytes = 2048

// BatchSize is how many records [Set.Replay] fetches at a time, the
// replay.Replayer's default.
const BatchSize = 100

// chunk is how many messages [Set.Loop] makes at a time, with the timer
// stopped.
const chunk = 4096

// keyPrefix starts every idempotency key; 16 hex digits of the message
// number follow, so keys look like the ones geodlq derives
// ("idem:v1:" and 64 hex digits).
const keyPrefix = "idem:v1:5f0c1e9a7b3d24c68e01f7a9b2c4d6e8f0a1b3c5d7e9f1a3"

// MessageKey is the source message's key, which the Processor keeps on the
// dead-letter message.
const MessageKey = "parcel/DE-BE-11000-0042-17"

// SourceTopic is the topic the dead-lettered event came from.
const SourceTopic = "spatial.parcels"

// Times recorded in the envelope, fixed so that every body has the same
// length and a rebuilt envelope is byte-identical.
var (
	firstSeen    = time.Date(2026, 11, 30, 8, 15, 2, 123456789, time.UTC)
	deadLettered = time.Date(2026, 11, 30, 8, 15, 4, 987654321, time.UTC)
)

// Set is the fixture: a template envelope and the messages made from it.
// It is immutable and safe for concurrent use.
type Set struct {
	// Envelope is the decoded template envelope (message 0).
	Envelope *envelope.Envelope
	body     []byte // message 0's body
	keyAt    int    // offset of the key's 16 counter digits in body
	headers  map[string]string
	payload  []byte
}

var shared = sync.OnceValues(build)

// New returns the fixture, built once per process; it fails tb if the
// envelope cannot be built.
func New(tb testing.TB) *Set {
	tb.Helper()
	s, err := shared()
	if err != nil {
		tb.Fatalf("benchenv: %v", err)
	}
	return s
}

// Key returns the idempotency key of message i.
func Key(i int) string {
	var d [16]byte
	putCounter(d[:], i)
	return keyPrefix + string(d[:])
}

func putCounter(dst []byte, i int) {
	const digits = "0123456789abcdef"
	u := uint64(i)
	for j := len(dst) - 1; j >= 0; j-- {
		dst[j] = digits[u&0xf]
		u >>= 4
	}
}

// Payload returns the event that failed: a GeoJSON Feature whose polygon
// is a bowtie. The returned slice is a copy.
func (s *Set) Payload() []byte { return bytes.Clone(s.payload) }

// Body returns the encoded envelope of message i: the template with
// idempotency key [Key](i), byte-identical to what envelope.Builder builds
// for it. The returned slice is the caller's.
func (s *Set) Body(i int) []byte {
	b := bytes.Clone(s.body)
	putCounter(b[s.keyAt:s.keyAt+16], i)
	return b
}

// Headers returns the headers the Processor sets on message i
// ([broker.Headers] of its envelope). The returned map is the caller's.
func (s *Set) Headers(i int) map[string]string {
	h := maps.Clone(s.headers)
	h[broker.HeaderIdempotencyKey] = Key(i)
	return h
}

// Message returns dead-letter message i as the Processor hands it to a
// store: the source message's key, the encoded envelope, its headers, and
// the envelope itself (Message.Envelope), which the Processor has built
// anyway.
func (s *Set) Message(i int) *broker.Message {
	env := *s.Envelope
	env.IdempotencyKey = Key(i)
	return &broker.Message{Key: []byte(MessageKey), Body: s.Body(i), Headers: s.Headers(i), Envelope: &env}
}

// Name returns prefix followed by "-" and 12 random hex digits: a
// destination, queue, stream or topic name no other run uses. It contains
// only letters, digits and hyphens when prefix does.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// Loop times op over messages 0 to b.N-1 and reports envelopes/s and the
// process's CPU time per envelope. The messages are made in chunks with
// the timer stopped, so op's time is all that is measured; op must not
// retain m.
func (s *Set) Loop(b *testing.B, op func(ctx context.Context, i int, m *broker.Message) error) {
	b.Helper()
	ctx := context.Background()
	b.SetBytes(EnvelopeBytes)
	b.ReportAllocs()
	msgs := make([]*broker.Message, 0, min(b.N, chunk))
	var cpu cpuMeter
	b.ResetTimer()
	for base := 0; base < b.N; base += chunk {
		b.StopTimer()
		msgs = msgs[:0]
		for i := base; i < min(base+chunk, b.N); i++ {
			msgs = append(msgs, s.Message(i))
		}
		cpu.start()
		b.StartTimer()
		for j, m := range msgs {
			if err := op(ctx, base+j, m); err != nil {
				b.Fatalf("message %d: %v", base+j, err)
			}
		}
		b.StopTimer()
		cpu.stop()
	}
	report(b, &cpu)
}

// report reports the envelopes/s metric, b.N over the timed duration, and
// the process's CPU time per envelope (cpu-µs/op: client, adapter and any
// in-process server, on every core), which the load of other processes on
// the machine disturbs much less than the elapsed time.
func report(b *testing.B, cpu *cpuMeter) {
	b.Helper()
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)/sec, "envelopes/s")
	}
	if cpu.ok && b.N > 0 {
		b.ReportMetric(float64(cpu.total.Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

// cpuMeter adds up the process's CPU time over the timed sections.
type cpuMeter struct {
	total, at time.Duration
	ok        bool
}

func (c *cpuMeter) start() { c.at, c.ok = processCPU() }

func (c *cpuMeter) stop() {
	if now, ok := processCPU(); ok && c.ok {
		c.total += now - c.at
	} else {
		c.ok = false
	}
}

// warmUp is the number of the message [Set.Replay] publishes and replays
// before timing anything.
const warmUp = 1 << 40

// publishers is how many goroutines publish the records a replay
// benchmark reads.
const publishers = 4

// Replay benchmarks the replay read path of a store. Untimed, it
// publishes one message to destination and fetches and acknowledges it
// (joining a consumer group, creating a consumer: whatever a store does on
// its first fetch), then publishes messages 0 to b.N-1. Timed, it fetches
// [BatchSize] records at a time and acknowledges each, until all b.N are
// acknowledged, and reports envelopes/s and the process's CPU time per
// envelope. Every record's body must be
// [EnvelopeBytes] long. Replay fails the benchmark when a minute passes
// without a record.
func (s *Set) Replay(b *testing.B, pub broker.Publisher, src broker.DeadLetterSource, destination string) {
	b.Helper()
	ctx := context.Background()
	if err := pub.Publish(ctx, destination, s.Message(warmUp)); err != nil {
		b.Fatalf("warm-up publish: %v", err)
	}
	if n, err := drain(ctx, src, destination, 1); err != nil || n != 1 {
		b.Fatalf("warm-up replay: %d records, %v", n, err)
	}
	if err := s.PublishAll(ctx, pub, destination, b.N); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(EnvelopeBytes)
	b.ReportAllocs()
	var cpu cpuMeter
	cpu.start()
	b.ResetTimer()
	n, err := drain(ctx, src, destination, b.N)
	b.StopTimer()
	cpu.stop()
	if err != nil {
		b.Fatalf("replayed %d of %d records: %v", n, b.N, err)
	}
	if n != b.N {
		b.Fatalf("replayed %d records, want %d", n, b.N)
	}
	report(b, &cpu)
}

// PublishAll publishes messages 0 to n-1 to destination, a few at a time.
func (s *Set) PublishAll(ctx context.Context, pub broker.Publisher, destination string, n int) error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range publishers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := pub.Publish(ctx, destination, s.Message(i)); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("publishing message %d: %w", i, err))
					mu.Unlock()
					next.Store(int64(n)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// drain fetches and acknowledges records of destination, BatchSize at a
// time, until want were acknowledged. It returns how many were.
func drain(ctx context.Context, src broker.DeadLetterSource, destination string, want int) (int, error) {
	n := 0
	last := time.Now()
	for n < want {
		recs, err := src.Fetch(ctx, destination, broker.Filter{}, min(BatchSize, want-n))
		if err != nil {
			return n, fmt.Errorf("fetch: %w", err)
		}
		if len(recs) == 0 {
			if time.Since(last) > time.Minute {
				return n, errors.New("no record for a minute")
			}
			continue
		}
		last = time.Now()
		for _, r := range recs {
			if len(r.Message.Body) != EnvelopeBytes {
				return n, fmt.Errorf("record %s: body of %d bytes, want %d", r.ID, len(r.Message.Body), EnvelopeBytes)
			}
			if err := src.Ack(ctx, r); err != nil {
				return n, fmt.Errorf("ack %s: %w", r.ID, err)
			}
			n++
		}
	}
	return n, nil
}

// event returns the failed event, its note padded to pad bytes: a parcel
// Feature whose polygon's edges cross at (13.4055 52.5205).
func event(pad int) []byte {
	note := strings.Repeat("Boundary re-surveyed after the merger of lots 17 and 18; the eastern fence line was digitised twice. ", pad/100+1)[:pad]
	return []byte(`{"type":"Feature","event_id":"evt-parcel-DE-BE-11000-0042-17-v7","crs":"EPSG:4326",` +
		`"geometry":{"type":"Polygon","coordinates":[[[13.4050,52.5200],[13.4060,52.5210],[13.4060,52.5200],[13.4050,52.5210],[13.4050,52.5200]]]},` +
		`"properties":{"parcel_id":"DE-BE-11000-0042-17","land_use":"residential","area_m2":1184.6,` +
		`"surveyed_at":"2026-11-29T16:40:00Z","surveyor":"Vermessungsbüro Nord","revision":7,"note":"` + note + `"}}`)
}

// failure is the error spatial.Checker reports for the bowtie.
func failure() error {
	return &classify.Error{
		Class: classify.ClassInvalidGeometry,
		Stage: classify.StageTopologyValidation,
		Geometry: &classify.GeometryDetail{
			Reason:       "Self-intersection[13.4055 52.5205]",
			Kind:         classify.KindSelfIntersection,
			Location:     &orb.Point{13.4055, 52.5205},
			Fault:        &classify.Fault{Part: -1, Ring: 0, Vertex: 0, OnSegment: true},
			GeometryType: "Polygon",
			VertexCount:  5,
		},
	}
}

// BuildEnvelope builds the envelope of the bowtie event, its note padded
// to pad bytes, with idempotency key [Key](i), as the Processor would
// after one attempt.
func BuildEnvelope(pad, i int) (*envelope.Envelope, []byte, error) {
	bld, err := envelope.NewBuilder(&envelope.BuilderOptions{Now: func() time.Time { return deadLettered }})
	if err != nil {
		return nil, nil, err
	}
	part, off := int32(3), int64(48_213_077)
	ts := firstSeen.Add(-time.Second)
	return bld.Build(context.Background(), envelope.Input{
		Payload:        event(pad),
		IdempotencyKey: Key(i),
		Err:            failure(),
		Attempts:       1,
		FirstSeenAt:    firstSeen,
		Source: &envelope.Source{
			System: "kafka", Topic: SourceTopic, Partition: &part, Offset: &off,
			Key: []byte(MessageKey), Timestamp: &ts,
		},
	})
}

// Pad returns the note length that makes the envelope [EnvelopeBytes]
// long.
func Pad() (int, error) {
	pad := 0
	for range 8 {
		_, body, err := BuildEnvelope(pad, 0)
		if err != nil {
			return 0, err
		}
		if len(body) == EnvelopeBytes {
			return pad, nil
		}
		pad += EnvelopeBytes - len(body)
		if pad < 0 {
			return 0, fmt.Errorf("the envelope without a note is %d bytes, over %d", len(body), EnvelopeBytes)
		}
	}
	return 0, fmt.Errorf("no note length makes the envelope %d bytes", EnvelopeBytes)
}

func build() (*Set, error) {
	pad, err := Pad()
	if err != nil {
		return nil, err
	}
	env, body, err := BuildEnvelope(pad, 0)
	if err != nil {
		return nil, err
	}
	field := []byte(`"idempotency_key":` + strconv.Quote(Key(0)))
	at := bytes.Index(body, field)
	if at < 0 || bytes.Count(body, []byte(Key(0))) != 1 {
		return nil, errors.New("the idempotency key is not in the envelope exactly once")
	}
	return &Set{
		Envelope: env,
		body:     body,
		keyAt:    at + len(field) - 1 - 16,
		headers:  broker.Headers(env),
		payload:  event(pad),
	}, nil
}
