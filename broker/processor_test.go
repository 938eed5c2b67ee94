package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
)

var bowtie = []byte(`{"event_id":"evt-9","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`)

type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func newProcessor(t *testing.T, pub broker.Publisher, opts broker.ProcessorOptions) (*broker.Processor, *sleeps) {
	t.Helper()
	s := &sleeps{}
	opts.Publisher = pub
	opts.Sleep = s.sleep
	if opts.Policy.Rand == nil {
		opts.Policy.Rand = func() float64 { return 0.5 }
	}
	p, err := broker.NewProcessor(&opts)
	require.NoError(t, err)
	return p, s
}

func source(topic string) *envelope.Source {
	return &envelope.Source{System: "memory", Topic: topic}
}

func onlyEnvelope(t *testing.T, b *broker.Store, dest string) *envelope.Envelope {
	t.Helper()
	msgs := memory.Messages(b, dest)
	require.Len(t, msgs, 1, "exactly one envelope in %s", dest)
	env, err := envelope.Decode(msgs[0].Body)
	require.NoError(t, err)
	return env
}

func TestProcessSuccess(t *testing.T) {
	dlq := memory.New(nil)
	p, sl := newProcessor(t, dlq, broker.ProcessorOptions{})
	var sawKey string
	out, err := p.Process(context.Background(), &broker.Message{Body: []byte(`{}`), Source: source("spatial.events")},
		func(_ context.Context, m *broker.Message) error {
			sawKey = m.Header(broker.HeaderIdempotencyKey)
			return nil
		})
	require.NoError(t, err)
	require.True(t, out.Ack)
	require.True(t, out.Processed)
	require.False(t, out.DeadLettered)
	require.Equal(t, 1, out.Attempts)
	require.Empty(t, sl.d)
	require.True(t, strings.HasPrefix(sawKey, "idem:v1:"), "the handler sees a derived key: %q", sawKey)
	require.Equal(t, sawKey, out.IdempotencyKey)
	require.Zero(t, memory.Len(dlq, "spatial.events.retry.dlt")+memory.Len(dlq, "spatial.events.poison.dlt"))
}

// The seed's load-bearing test, in Go: a bowtie goes to the poison
// destination at once, with its reason and its key verbatim.
func TestBowtieGoesToPoison(t *testing.T) {
	dlq := memory.New(nil)
	p, sl := newProcessor(t, dlq, broker.ProcessorOptions{})
	m := &broker.Message{Body: bowtie, Key: []byte("parcel-9"), Source: source("spatial.events"),
		Headers: map[string]string{broker.HeaderIdempotencyKey: "idem:v1:abc"}}
	herr := &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation,
		Err: errors.New("Self-intersection[0.5 0.5]"), Geometry: &classify.GeometryDetail{Reason: "Self-intersection[0.5 0.5]"}}
	calls := 0
	out, err := p.Process(context.Background(), m, func(context.Context, *broker.Message) error { calls++; return herr })
	require.NoError(t, err)
	require.True(t, out.Ack)
	require.True(t, out.DeadLettered)
	require.Equal(t, 1, calls, "deterministic failures are not retried")
	require.Empty(t, sl.d)
	require.Equal(t, "spatial.events.poison.dlt", out.Destination)
	require.Zero(t, memory.Len(dlq, "spatial.events.retry.dlt"), "never the retryable destination")
	env := onlyEnvelope(t, dlq, "spatial.events.poison.dlt")
	require.Equal(t, classify.ClassInvalidGeometry, env.FailureClass)
	require.Equal(t, classify.StageTopologyValidation, env.FailedStage)
	require.Contains(t, env.GeometryError.Reason, "Self-intersection")
	require.Equal(t, "idem:v1:abc", env.IdempotencyKey)
	require.Equal(t, classify.RoutePoison, env.Route)
	msg := memory.Messages(dlq, "spatial.events.poison.dlt")[0]
	require.Equal(t, []byte("parcel-9"), msg.Key, "the dead-letter keeps the source key")
	require.Equal(t, "invalid_geometry", msg.Headers[broker.HeaderClass])
	require.Equal(t, "idem:v1:abc", msg.Headers[broker.HeaderIdempotencyKey])
	restored, err := env.Restore(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, bowtie, restored)
}

func TestTransientRecovers(t *testing.T) {
	dlq := memory.New(nil)
	p, sl := newProcessor(t, dlq, broker.ProcessorOptions{Policy: classify.Policy{MaxAttempts: 5, BaseDelay: 100 * time.Millisecond}})
	calls := 0
	out, err := p.Process(context.Background(), &broker.Message{Body: bowtie, Source: source("t")}, func(context.Context, *broker.Message) error {
		calls++
		if calls < 3 {
			return classify.Transient(errors.New("503"))
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, out.Processed)
	require.Equal(t, 3, out.Attempts)
	require.Equal(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}, sl.d, "full jitter over the doubling ceiling")
	require.Zero(t, memory.Len(dlq, "t.retry.dlt"))
}

func TestTransientBudgetSpent(t *testing.T) {
	dlq := memory.New(nil)
	p, sl := newProcessor(t, dlq, broker.ProcessorOptions{Policy: classify.Policy{MaxAttempts: 4}})
	calls := 0
	out, err := p.Process(context.Background(), &broker.Message{Body: bowtie, Source: source("t")}, func(context.Context, *broker.Message) error {
		calls++
		return fmt.Errorf("db: %w", context.DeadlineExceeded)
	})
	require.NoError(t, err)
	require.True(t, out.Ack)
	require.Equal(t, 4, calls)
	require.Len(t, sl.d, 3)
	require.Equal(t, "t.retry.dlt", out.Destination)
	env := onlyEnvelope(t, dlq, "t.retry.dlt")
	require.Equal(t, classify.ClassTransient, env.FailureClass)
	require.Equal(t, 4, env.Attempts)
	require.Equal(t, classify.RouteRetry, env.Route)
}

func TestAttemptsStartAtDeliveryCount(t *testing.T) {
	dlq := memory.New(nil)
	p, _ := newProcessor(t, dlq, broker.ProcessorOptions{Policy: classify.Policy{MaxAttempts: 5}})
	calls := 0
	out, err := p.Process(context.Background(), &broker.Message{Body: bowtie, DeliveryAttempt: 5, Source: source("q")},
		func(context.Context, *broker.Message) error { calls++; return errors.New("mystery") })
	require.NoError(t, err)
	require.Equal(t, 1, calls, "the broker already delivered it 4 times")
	require.Equal(t, 5, out.Attempts)
	env := onlyEnvelope(t, dlq, "q.retry.dlt")
	require.Equal(t, 5, env.Attempts)
	require.Equal(t, classify.ClassUnknown, env.FailureClass)
	require.Equal(t, 5, env.Source.DeliveryCount)
}

type failingPublisher struct{ err error }

func (f failingPublisher) Publish(context.Context, string, *broker.Message) error { return f.err }

// A failing dead-letter write leaves the source message unacknowledged:
// the consumer leaves it to the broker, which redelivers it.
func TestFailingPublisherLeavesSourceUnacked(t *testing.T) {
	src := memory.New(&memory.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 50 * time.Millisecond}})
	ctx := context.Background()
	require.NoError(t, src.Publish(ctx, "spatial.events", &broker.Message{Body: bowtie}))
	recs, err := src.Fetch(ctx, "spatial.events", broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, recs, 1)

	outage := errors.New("dlq cluster unreachable")
	p, _ := newProcessor(t, failingPublisher{outage}, broker.ProcessorOptions{})
	m := recs[0].Message
	m.Source = source("spatial.events")
	out, err := p.Process(ctx, m, func(context.Context, *broker.Message) error {
		return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
	})
	require.Error(t, err)
	require.False(t, out.Ack)
	require.ErrorIs(t, err, broker.ErrNotAcked)
	require.ErrorIs(t, err, outage, "the error says why")
	var dle *broker.DeadLetterError
	require.ErrorAs(t, err, &dle)
	require.Equal(t, "publish", dle.Op)
	require.Equal(t, "spatial.events.poison.dlt", dle.Destination)
	require.Contains(t, err.Error(), "not acknowledged")

	// The consumer does not ack; the source redelivers after the lease.
	time.Sleep(80 * time.Millisecond)
	again, err := src.Fetch(ctx, "spatial.events", broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, again, 1, "the event is still at its source")
	require.Equal(t, bowtie, again[0].Message.Body)
	require.Equal(t, 2, again[0].Deliveries)
}

func TestCancelDuringRetryLeavesUnacked(t *testing.T) {
	dlq := memory.New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: dlq, Sleep: func(ctx context.Context, _ time.Duration) error {
		cancel()
		return ctx.Err()
	}})
	require.NoError(t, err)
	out, err := p.Process(ctx, &broker.Message{Body: bowtie}, func(context.Context, *broker.Message) error {
		return classify.Transient(errors.New("503"))
	})
	require.ErrorIs(t, err, broker.ErrNotAcked)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, out.Ack)
	require.Zero(t, memory.Len(dlq, "geodlq.retry.dlt"), "shutdown is not a failure of the event")
}

func TestCanceledHandlerIsNotDeadLettered(t *testing.T) {
	dlq := memory.New(nil)
	p, _ := newProcessor(t, dlq, broker.ProcessorOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	out, err := p.Process(ctx, &broker.Message{Body: bowtie}, func(ctx context.Context, _ *broker.Message) error {
		cancel()
		return ctx.Err()
	})
	require.ErrorIs(t, err, broker.ErrNotAcked)
	require.False(t, out.Ack)
	require.Zero(t, memory.Len(dlq, "geodlq.retry.dlt"))
}

func TestPanicIsDeadLettered(t *testing.T) {
	dlq := memory.New(nil)
	p, _ := newProcessor(t, dlq, broker.ProcessorOptions{Policy: classify.Policy{MaxAttempts: 2}})
	out, err := p.Process(context.Background(), &broker.Message{Body: []byte("x"), Source: source("p")},
		func(context.Context, *broker.Message) error { panic("nil map write") })
	require.NoError(t, err)
	require.True(t, out.DeadLettered)
	var pe *broker.PanicError
	require.ErrorAs(t, out.Err, &pe)
	require.NotEmpty(t, pe.Stack)
	env := onlyEnvelope(t, dlq, "p.retry.dlt")
	require.Contains(t, env.ErrorMessage, "nil map write")
}

// Whatever is missing or malformed in the payload, the failure produces an
// envelope (the seed's reference lost events with crs: null).
func TestEveryFailureProducesAnEnvelope(t *testing.T) {
	for name, body := range map[string][]byte{
		"crs null":         []byte(`{"event_id":"e1","crs":null,"geometry":{"type":"Point","coordinates":[0,0]}}`),
		"no geometry":      []byte(`{"event_id":"e2"}`),
		"geometry null":    []byte(`{"geometry":null}`),
		"not json":         []byte(`<xml/>`),
		"empty":            {},
		"invalid utf8":     {0xff, 0xfe, '{'},
		"array":            []byte(`[1,2,3]`),
		"numeric event id": []byte(`{"event_id":42,"geometry":{"type":"Point","coordinates":[NaN,0]}}`),
	} {
		t.Run(name, func(t *testing.T) {
			dlq := memory.New(nil)
			p, _ := newProcessor(t, dlq, broker.ProcessorOptions{})
			out, err := p.Process(context.Background(), &broker.Message{Body: body, Source: source("s")},
				func(context.Context, *broker.Message) error { return classify.SchemaViolation(errors.New("bad")) })
			require.NoError(t, err)
			require.True(t, out.DeadLettered)
			env := onlyEnvelope(t, dlq, "s.poison.dlt")
			require.NotEmpty(t, env.EventID)
			require.NotEmpty(t, env.IdempotencyKey)
			restored, err := env.Restore(context.Background(), nil)
			require.NoError(t, err)
			require.Equal(t, body, restored, "byte-for-byte")
		})
	}
}

// A destination's size limit is honoured by offloading: the 60,000-point
// MultiPoint of the seed goes out under a 256 KiB SQS-like limit.
func TestLimiterOffloads(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"event_id":"big","crs":"EPSG:4326","geometry":{"type":"MultiPoint","coordinates":[`)
	for i := range 60_000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "[%g,%g]", float64(i)*1e-6, float64(i)*1e-6)
	}
	sb.WriteString(`]}}`)
	body := []byte(sb.String())

	store := offload.NewMemStore()
	off, err := offload.New(store, &offload.Options{BaseURI: "mem://dlq-geom"})
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	dlq := memory.New(&memory.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: 256 << 10}})
	p, _ := newProcessor(t, dlq, broker.ProcessorOptions{Builder: b})
	out, err := p.Process(context.Background(), &broker.Message{Body: body, Source: source("s")},
		func(context.Context, *broker.Message) error {
			return classify.ResourceExhausted(errors.New("too many vertices"))
		})
	require.NoError(t, err)
	require.True(t, out.DeadLettered)
	msg := memory.Messages(dlq, "s.poison.dlt")[0]
	require.LessOrEqual(t, len(msg.Body), 256<<10)
	env := onlyEnvelope(t, dlq, "s.poison.dlt")
	require.NotEmpty(t, env.Geometry.OffloadURI)
	restored, err := env.Restore(context.Background(), off)
	require.NoError(t, err)
	require.Equal(t, body, restored)
}

func TestNewProcessorRequiresPublisher(t *testing.T) {
	_, err := broker.NewProcessor(&broker.ProcessorOptions{})
	require.Error(t, err)
	_, err = broker.NewProcessor(nil)
	require.Error(t, err)
	_, err = (&broker.Processor{}).Process(context.Background(), nil, nil)
	require.ErrorIs(t, err, broker.ErrNotAcked)
}

func TestFirstSeenAtCarriedByReplay(t *testing.T) {
	dlq := memory.New(nil)
	p, _ := newProcessor(t, dlq, broker.ProcessorOptions{})
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err := p.Process(context.Background(), &broker.Message{Body: bowtie, Source: source("s"), Headers: map[string]string{
		broker.HeaderFirstSeenAt: first.Format(time.RFC3339Nano), broker.HeaderIdempotencyKey: "idem:v1:keep",
	}}, func(context.Context, *broker.Message) error { return classify.InvalidGeometry(errors.New("x")) })
	require.NoError(t, err)
	env := onlyEnvelope(t, dlq, "s.poison.dlt")
	require.True(t, env.FirstSeenAt.Equal(first))
	require.Equal(t, "idem:v1:keep", env.IdempotencyKey)
}
