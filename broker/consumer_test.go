package broker_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

func bound(minX, minY, maxX, maxY float64) *orb.Bound {
	return &orb.Bound{Min: orb.Point{minX, minY}, Max: orb.Point{maxX, maxY}}
}

// envelopeMessage builds a dead-letter message of class for event id.
func envelopeMessage(t *testing.T, c classify.Class, id string) *broker.Message {
	t.Helper()
	b, err := envelope.NewBuilder(nil)
	require.NoError(t, err)
	env, body, err := b.Build(context.Background(), envelope.Input{
		Payload: []byte(`{"event_id":"` + id + `","geometry":{"type":"Point","coordinates":[1,2]}}`),
		Class:   c, Err: errors.New("x"), IdempotencyKey: "k-" + id,
	})
	require.NoError(t, err)
	return &broker.Message{Body: body, Headers: broker.Headers(env), Envelope: env}
}

// listSource is an ordered, scripted Source: it hands out its queue in
// batches, and what is nacked goes back to the front in order, like a
// Kafka partition seeked back or an SQS FIFO group.
type listSource struct {
	mu       sync.Mutex
	queue    []*broker.Delivery
	acked    []string
	nacked   []string
	extended atomic.Int64
	batches  atomic.Int64
	every    time.Duration
}

func (s *listSource) Receive(ctx context.Context, max int) ([]*broker.Delivery, error) {
	s.mu.Lock()
	n := min(max, len(s.queue))
	out := append([]*broker.Delivery(nil), s.queue[:n]...)
	s.queue = s.queue[n:]
	s.mu.Unlock()
	if n == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return out, nil
}

func id(d *broker.Delivery) string { return string(d.Message.Body) }

func (s *listSource) Ack(_ context.Context, d *broker.Delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked = append(s.acked, id(d))
	return nil
}

func (s *listSource) Nack(_ context.Context, d *broker.Delivery, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nacked = append(s.nacked, id(d))
	d.Message.DeliveryAttempt++
	s.queue = append(s.queue, d) // back of the queue; per key order is kept by the consumer
	return nil
}

func (s *listSource) Close() error { return nil }

func (s *listSource) ExtendEvery() time.Duration { return s.every }

func (s *listSource) Extend(context.Context, *broker.Delivery) error { s.extended.Add(1); return nil }

func (s *listSource) EndBatch(context.Context) error { s.batches.Add(1); return nil }

func TestConsumerOrderAckNack(t *testing.T) {
	src := &listSource{}
	for i := range 12 {
		src.queue = append(src.queue, &broker.Delivery{
			Message:     &broker.Message{Body: []byte("e" + strconv.Itoa(i)), DeliveryAttempt: 1},
			OrderingKey: "k" + strconv.Itoa(i%2),
		})
	}
	// The dead-letter store refuses e4 once: e4 and the later events of
	// key k0 in its batch are given back, in order.
	dlq := &refuseOnce{Store: memory.New(nil), event: "e4"}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: dlq})
	require.NoError(t, err)
	c, err := broker.NewConsumer(src, proc, &broker.ConsumerOptions{Concurrency: 2, MaxBatch: 12})
	require.NoError(t, err)
	var mu sync.Mutex
	order := map[string][]string{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- c.Run(ctx, func(_ context.Context, m *broker.Message) error {
			mu.Lock()
			k := "k" + strconv.Itoa(int(m.Body[1]-'0')%2)
			if len(m.Body) > 2 {
				k = "k" + strconv.Itoa(int(m.Body[2]-'0')%2)
			}
			order[k] = append(order[k], string(m.Body))
			mu.Unlock()
			if string(m.Body) == "e4" || string(m.Body) == "e9" {
				return classify.InvalidGeometry(errors.New("bowtie"))
			}
			return nil
		})
	}()
	require.Eventually(t, func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return len(src.acked) == 12
	}, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Equal(t, []string{"e4", "e6", "e8", "e10"}, src.nacked, "the failed write and the rest of its key's batch were given back")
	require.Equal(t, []string{"e0", "e2", "e4", "e4", "e6", "e8", "e10"}, order["k0"], "key k0 resumes at e4, in order")
	require.Equal(t, []string{"e1", "e3", "e5", "e7", "e9", "e11"}, order["k1"])
	require.Equal(t, 2, memory.Len(dlq.Store, "geodlq.poison.dlt"), "e4 (second time) and e9 dead-lettered")
	require.GreaterOrEqual(t, src.batches.Load(), int64(2), "every batch was ended")
}

// refuseOnce fails the first dead-letter write of one event.
type refuseOnce struct {
	*broker.Store
	event string
	done  atomic.Bool
}

func (r *refuseOnce) Publish(ctx context.Context, dest string, m *broker.Message) error {
	// The payloads ("e4") are not JSON: match on the restored payload.
	env, err := broker.EnvelopeOf(m)
	if err != nil {
		return err
	}
	raw, err := env.Restore(ctx, nil)
	if err != nil {
		return err
	}
	if string(raw) == r.event && r.done.CompareAndSwap(false, true) {
		return errors.New("store unavailable")
	}
	return r.Store.Publish(ctx, dest, m)
}

func TestConsumerExtendsLeases(t *testing.T) {
	src := &listSource{every: 5 * time.Millisecond}
	src.queue = []*broker.Delivery{{Message: &broker.Message{Body: []byte("slow")}}}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: memory.New(nil)})
	require.NoError(t, err)
	c, err := broker.NewConsumer(src, proc, nil)
	require.NoError(t, err)
	res := c.Handle(context.Background(), src.queue, func(context.Context, *broker.Message) error {
		time.Sleep(60 * time.Millisecond)
		return nil
	})
	require.Len(t, res, 1)
	require.True(t, res[0].Acked)
	require.GreaterOrEqual(t, src.extended.Load(), int64(3), "the lease was renewed while the handler ran")
	ext := src.extended.Load()
	time.Sleep(30 * time.Millisecond)
	require.Equal(t, ext, src.extended.Load(), "and no longer once it was settled")
}

func TestConsumerArguments(t *testing.T) {
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: memory.New(nil)})
	require.NoError(t, err)
	_, err = broker.NewConsumer(nil, proc, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	_, err = broker.NewConsumer(&listSource{}, proc, &broker.ConsumerOptions{Concurrency: -1})
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	c, err := broker.NewConsumer(&listSource{}, proc, nil)
	require.NoError(t, err)
	require.ErrorIs(t, c.Run(context.Background(), nil), broker.ErrInvalidArgument)
	require.NoError(t, c.Close())
	require.ErrorIs(t, c.Run(context.Background(), func(context.Context, *broker.Message) error { return nil }), broker.ErrClosed)
}

func TestProcessorHonoursRetryAfter(t *testing.T) {
	p, slept := newProcessor(t, memory.New(nil), broker.ProcessorOptions{Policy: classify.Policy{MaxAttempts: 3}})
	calls := 0
	res, err := p.Process(context.Background(), &broker.Message{Body: bowtie}, func(context.Context, *broker.Message) error {
		calls++
		if calls == 1 {
			return classify.RetryAfter(errors.New("HTTP 429"), 7*time.Second)
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, res.Processed)
	require.Equal(t, []time.Duration{7 * time.Second}, slept.d, "the processor waited what the server asked")
}
