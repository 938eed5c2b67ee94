package rabbitmq_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/broker/rabbitmq"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/testenv"
)

// TestSourcePublisherRoundTrip publishes to a source queue and reads the
// message back as NewConsumer does (MessageOf): body, headers and key
// whole, persistent, confirmed before Publish returned.
func TestSourcePublisherRoundTrip(t *testing.T) {
	url := testenv.AMQP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := dial(t, url)
	q, ch := sourceQueue(t, url, conn)
	pub := rabbitmq.SourcePublisher(newStore(t, conn, rabbitmq.Options{}))

	cases := []struct {
		name string
		m    *broker.Message
	}{
		{"headers and a key", &broker.Message{Body: []byte(`{"event_id":"evt-1"}`), Key: []byte{0xff, 0, 'k'},
			Headers: map[string]string{broker.HeaderIdempotencyKey: "idem:v1:abc", broker.HeaderReplayOf: "q.poison.dlt/7"}}},
		{"a bare body that is not JSON", &broker.Message{Body: []byte("not json\x00\xfe")}},
		{"an empty body", &broker.Message{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, pub.Publish(ctx, q, tc.m))
			require.Equal(t, 1, ready(t, ch, q), "confirmed, so already in the queue")
			d, ok, err := ch.Get(q, true)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, amqp.Persistent, d.DeliveryMode)
			require.NotEmpty(t, d.MessageId)
			got := rabbitmq.MessageOf(d, q)
			require.Equal(t, string(tc.m.Body), string(got.Body))
			require.Equal(t, tc.m.Key, got.Key)
			for k, v := range tc.m.Headers {
				require.Equal(t, v, got.Header(k), k)
			}
			require.Equal(t, q, got.Source.Topic)
		})
	}
}

// TestSourcePublisherConcurrent publishes from many goroutines at once
// through the store's channel pool; every message arrives once.
func TestSourcePublisherConcurrent(t *testing.T) {
	url := testenv.AMQP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := dial(t, url)
	q, ch := sourceQueue(t, url, conn)
	pub := rabbitmq.SourcePublisher(newStore(t, conn, rabbitmq.Options{PublishChannels: 3}))
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- pub.Publish(ctx, q, &broker.Message{Body: []byte(strconv.Itoa(i))})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, n, ready(t, ch, q))
	seen := map[string]bool{}
	for range n {
		d, ok, err := ch.Get(q, true)
		require.NoError(t, err)
		require.True(t, ok)
		require.False(t, seen[string(d.Body)], "delivered twice: %s", d.Body)
		seen[string(d.Body)] = true
	}
}

// TestSourcePublisherRefuses checks every refusal and the error it
// wraps; nothing refused reaches the queue.
func TestSourcePublisherRefuses(t *testing.T) {
	url := testenv.AMQP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := dial(t, url)
	q, ch := sourceQueue(t, url, conn)
	store := newStore(t, conn, rabbitmq.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: 16}})
	readOnly, err := rabbitmq.New(ctx, conn, &rabbitmq.Options{Exchange: rabbitmq.Exchange(store), StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = readOnly.Close() })
	closed := newStore(t, conn, rabbitmq.Options{})
	require.NoError(t, closed.Close())
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	small := &broker.Message{Body: []byte("x")}

	cases := []struct {
		name  string
		s     *broker.Store
		ctx   context.Context
		queue string
		m     *broker.Message
		want  error
	}{
		{"a queue that does not exist", store, ctx, q + ".missing", small, rabbitmq.ErrUnroutable},
		{"an empty queue name", store, ctx, "", small, broker.ErrInvalidArgument},
		{"a queue name over 255 bytes", store, ctx, strings.Repeat("q", 256), small, broker.ErrInvalidArgument},
		{"a nil message", store, ctx, q, nil, broker.ErrInvalidArgument},
		{"a body over the store's limit", store, ctx, q, &broker.Message{Body: make([]byte, 17)}, classify.ErrTooLarge},
		{"a read-only store", readOnly, ctx, q, small, broker.ErrReadOnly},
		{"a closed store", closed, ctx, q, small, broker.ErrClosed},
		{"a store of another adapter", memory.New(nil), ctx, q, small, errors.ErrUnsupported},
		{"a nil store", nil, ctx, q, small, errors.ErrUnsupported},
		{"a cancelled context", store, cancelled, q, small, context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := rabbitmq.SourcePublisher(tc.s).Publish(tc.ctx, tc.queue, tc.m)
			require.ErrorIs(t, err, tc.want)
		})
	}
	var tooLarge *classify.TooLargeError
	require.ErrorAs(t, rabbitmq.SourcePublisher(store).Publish(ctx, q, &broker.Message{Body: make([]byte, 17)}), &tooLarge)
	require.Equal(t, 16, tooLarge.Limit)
	require.Zero(t, ready(t, ch, q), "nothing refused was published")
	require.NoError(t, rabbitmq.SourcePublisher(store).Publish(ctx, q, small), "an unroutable message does not spoil the pool")
	require.Equal(t, 1, ready(t, ch, q))
}
