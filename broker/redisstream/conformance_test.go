package redisstream_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/broker/redisstream/internal/redistest"
)

// opts are the conformance harness's store options.
var opts = redisstream.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Second, MaxMessageBytes: 256 << 10}}

type harness struct {
	t      *testing.T
	prefix string
	stores []*broker.Store
}

func (h *harness) MakeStore(ctx context.Context) (*broker.Store, error) { return h.Reopen(ctx) }

// Reopen connects a new client and joins the group under a new consumer
// name, as another process would.
func (h *harness) Reopen(context.Context) (*broker.Store, error) {
	o := opts
	o.Prefix = h.prefix
	s, err := redisstream.New(redistest.Client(h.t), &o)
	if err != nil {
		return nil, err
	}
	h.stores = append(h.stores, s)
	return s, nil
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: opts.LeaseTTL, MaxMessageBytes: opts.MaxMessageBytes}
}

func (h *harness) Close() {
	for _, s := range h.stores {
		_ = s.Close()
	}
}

func TestConformance(t *testing.T) {
	brokertest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (brokertest.Harness, error) {
		return &harness{t: t, prefix: uniquePrefix(t)}, nil
	})
}

// consumerHarness sends to a destination of a store and consumes it with
// NewConsumer, each consumer on a store of its own (another process).
type consumerHarness struct {
	t      *testing.T
	prefix string
	send   *broker.Store
	stores []*broker.Store
}

const consumerLease = 500 * time.Millisecond

func (h *consumerHarness) store() (*broker.Store, error) {
	s, err := redisstream.New(redistest.Client(h.t), &redisstream.Options{Prefix: h.prefix,
		StoreOptions: broker.StoreOptions{LeaseTTL: consumerLease}})
	if err == nil {
		h.stores = append(h.stores, s)
	}
	return s, err
}

func (h *consumerHarness) Send(ctx context.Context, msgs []*broker.Message) error {
	for _, m := range msgs {
		if err := h.send.Publish(ctx, "source", m); err != nil {
			return err
		}
	}
	return nil
}

func (h *consumerHarness) MakeConsumer(_ context.Context, proc *broker.Processor) (*broker.Consumer, error) {
	s, err := h.store()
	if err != nil {
		return nil, err
	}
	return redisstream.NewConsumer(s, "source", proc, &redisstream.ConsumerOptions{PollInterval: 10 * time.Millisecond,
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}})
}

func (h *consumerHarness) ConsumerCapabilities() brokertest.ConsumerCapabilities {
	// A store source does not hold back a key's later entries while an
	// earlier one waits for redelivery, so it does not promise order.
	return brokertest.ConsumerCapabilities{DeliveryCount: true, Redelivery: consumerLease}
}

func (h *consumerHarness) Close() {
	for _, s := range h.stores {
		_ = s.Close()
	}
}

func TestConsumerConformance(t *testing.T) {
	brokertest.RunConsumerTests(t, func(context.Context, *testing.T) (brokertest.ConsumerHarness, error) {
		h := &consumerHarness{t: t, prefix: uniquePrefix(t)}
		var err error
		h.send, err = h.store()
		return h, err
	})
}

// The consumer reads a producer's own stream through a RawKeys store: the
// documented way to consume a source stream with the same shape.
func TestConsumerOfARawStream(t *testing.T) {
	ctx := context.Background()
	client := newClient(t)
	stream := uniquePrefix(t) + ":spatial.events"
	for _, v := range [][]any{
		{"body", `{"event_id":"e1"}`, "key", "k", "h:idempotency-key", "idem:1"},
		{"body", `{"event_id":"e2"}`},
		{"sensor", "7", "reading", "41.5"}, // no body field
	} {
		require.NoError(t, client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: v}).Err())
	}
	src, err := redisstream.New(client, &redisstream.Options{RawKeys: true, KeepAcked: true, Group: "app", Consumer: "w1"})
	require.NoError(t, err)
	defer src.Close()
	dlq := memory.New(nil)
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: dlq})
	require.NoError(t, err)
	c, err := redisstream.NewConsumer(src, stream, proc, &redisstream.ConsumerOptions{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	var mu sync.Mutex
	var got []*broker.Message
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Run(runCtx, func(_ context.Context, m *broker.Message) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, m)
			return nil
		})
	}()
	require.Eventually(t, func() bool {
		p, err := client.XPending(ctx, stream, "app").Result()
		mu.Lock()
		defer mu.Unlock()
		return err == nil && p.Count == 0 && len(got) == 3
	}, 30*time.Second, 20*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Equal(t, `{"event_id":"e1"}`, string(got[0].Body))
	require.Equal(t, "k", string(got[0].Key))
	require.Equal(t, "idem:1", got[0].Header(broker.HeaderIdempotencyKey))
	require.Equal(t, 1, got[0].DeliveryAttempt)
	require.Equal(t, stream, got[0].Source.Topic)
	require.JSONEq(t, `{"sensor":"7","reading":"41.5"}`, string(got[2].Body), "an entry without a body is its fields")
	n, err := client.XLen(ctx, stream).Result()
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "KeepAcked: the producer's entries stay")
	keys, err := client.Keys(ctx, stream+"*").Result()
	require.NoError(t, err)
	require.Equal(t, []string{stream}, keys, "no catalog or other key of the store's next to the producer's stream")
}
