package rabbitmq_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/rabbitmq"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/testenv"
)

// newStore returns a store with a unique exchange and queue prefix; the
// destinations listed are deleted when the test ends.
func newStore(t *testing.T, conn *amqp.Connection, opts rabbitmq.Options, dests ...string) *rabbitmq.Store {
	t.Helper()
	url := testenv.AMQP(t)
	if opts.Exchange == "" {
		opts.Exchange = uniqueName("geodlqtest")
		opts.QueuePrefix = opts.Exchange + "."
		t.Cleanup(func() {
			var qs []string
			for _, d := range dests {
				qs = append(qs, opts.QueuePrefix+d)
			}
			cleanup(t, url, opts.Exchange, qs...)
		})
	}
	s, err := rabbitmq.New(context.Background(), conn, &opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func fetchAll(t *testing.T, s *rabbitmq.Store, d string) []*broker.Record {
	t.Helper()
	var all []*broker.Record
	for {
		recs, err := s.Fetch(context.Background(), d, broker.Filter{}, 100)
		require.NoError(t, err)
		if len(recs) == 0 {
			return all
		}
		all = append(all, recs...)
	}
}

func TestStoreBasics(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	conn := dial(t, url)
	s := newStore(t, conn, rabbitmq.Options{}, "d")
	require.Equal(t, rabbitmq.DefaultMaxMessageBytes, s.MaxMessageBytes("d"), "RabbitMQ's max_message_size")
	var c *amqp.Connection
	require.True(t, s.As(&c))
	require.Same(t, conn, c)
	require.Same(t, conn, s.Connection())
	require.False(t, s.As(new(int)))

	require.NoError(t, s.Declare(ctx, "d"))
	require.NoError(t, s.Declare(ctx, "d"), "idempotent")
	require.Error(t, s.Declare(ctx, ""), "empty destination")
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclarePassive(s.Queue("d"), true, false, false, false, nil)
	require.NoError(t, err, "a durable queue named after the destination")
	require.Zero(t, q.Messages)

	m := brokertest.Message(t, brokertest.SampleInputs()[2])
	require.NoError(t, s.Publish(ctx, "d", m))
	d, ok, err := ch.Get(s.Queue("d"), false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, amqp.Persistent, d.DeliveryMode, "persistent delivery mode")
	require.Equal(t, m.Body, d.Body)
	require.Equal(t, m.Key, d.Headers[rabbitmq.HeaderKey], "the key as a byte array")
	require.NotEmpty(t, d.MessageId)
	require.NoError(t, d.Nack(false, true))
	require.NoError(t, ch.Close())

	recs := fetchAll(t, s, "d")
	require.Len(t, recs, 1)
	require.Equal(t, d.MessageId, recs[0].ID, "the record id is the message id")
	require.Zero(t, recs[0].Deliveries, "a classic queue does not count deliveries")
	require.NoError(t, s.Ack(ctx, recs[0]))

	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Publish(ctx, "d", m), broker.ErrClosed)
	_, err = s.Fetch(ctx, "d", broker.Filter{}, 1)
	require.ErrorIs(t, err, broker.ErrClosed)
}

// TestUnroutable: the mandatory flag turns a message no queue receives into
// an error, not a silent drop.
func TestUnroutable(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	conn := dial(t, url)
	s := newStore(t, conn, rabbitmq.Options{}, "gone")
	require.NoError(t, s.Declare(ctx, "gone"))
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDelete(s.Queue("gone"), false, false, false)
	require.NoError(t, err)
	err = s.Publish(ctx, "gone", &broker.Message{Body: []byte("x")})
	require.ErrorIs(t, err, rabbitmq.ErrUnroutable)
	require.ErrorContains(t, err, "NO_ROUTE")
	// The channel stays usable for the next publish.
	require.NoError(t, s.Declare(ctx, "other"))
	t.Cleanup(func() { cleanup(t, url, "", s.Queue("other")) })
	require.NoError(t, s.Publish(ctx, "other", &broker.Message{Body: []byte("y")}))
}

// TestLeaseBelongsToItsChannel: a delivery tag is only meaningful on the
// channel that received it.
func TestLeaseBelongsToItsChannel(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	a := newStore(t, dial(t, url), rabbitmq.Options{}, "d")
	b, err := rabbitmq.New(ctx, dial(t, url), &rabbitmq.Options{Exchange: a.Exchange(), QueuePrefix: a.Queue("")})
	require.NoError(t, err)
	for _, m := range brokertest.Messages(t, brokertest.SampleInputs()[:2]) {
		require.NoError(t, a.Publish(ctx, "d", m))
	}
	recs := fetchAll(t, a, "d")
	require.Len(t, recs, 2)
	require.ErrorIs(t, b.Ack(ctx, recs[0]), broker.ErrLeaseLost, "another handle cannot ack")
	require.ErrorIs(t, b.Release(ctx, recs[0]), broker.ErrLeaseLost)
	require.NoError(t, a.Ack(ctx, recs[0]))
	require.ErrorIs(t, a.Ack(ctx, recs[0]), broker.ErrLeaseLost, "settled already")
	bad := *recs[1]
	bad.Lease = "nonsense"
	require.ErrorIs(t, a.Ack(ctx, &bad), broker.ErrLeaseLost)
	require.NoError(t, a.Release(ctx, recs[1]))
	again := fetchAll(t, b, "d")
	require.Len(t, again, 1)
	require.Equal(t, recs[1].ID, again[0].ID)
	require.NoError(t, b.Ack(ctx, again[0]))
}

// TestCrashedConnection: a replayer whose TCP connection dies gives its
// records back at once — long before its lease TTL.
func TestCrashedConnection(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	var sock net.Conn
	crashedConn, err := amqp.DialConfig(url, amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, 5*time.Second)
		sock = c
		return c, err
	}})
	require.NoError(t, err)
	opts := rabbitmq.Options{LeaseTTL: time.Hour}
	crashed := newStore(t, crashedConn, opts, "d")
	opts.Exchange, opts.QueuePrefix = crashed.Exchange(), crashed.Queue("")
	survivor, err := rabbitmq.New(ctx, dial(t, url), &opts)
	require.NoError(t, err)
	for _, m := range brokertest.Messages(t, brokertest.SampleInputs()[:3]) {
		require.NoError(t, survivor.Publish(ctx, "d", m))
	}
	held := fetchAll(t, crashed, "d")
	require.Len(t, held, 3)
	require.Empty(t, fetchAll(t, survivor, "d"), "leased")

	start := time.Now()
	require.NoError(t, sock.Close(), "the process dies: its socket closes without an AMQP goodbye")
	var back []*broker.Record
	require.Eventually(t, func() bool {
		back = append(back, fetchAll(t, survivor, "d")...)
		return len(back) == 3
	}, 60*time.Second, 20*time.Millisecond)
	t.Logf("records back %v after the crash (lease TTL 1h)", time.Since(start).Round(time.Millisecond))
	for i := range back {
		require.Equal(t, held[i].ID, back[i].ID)
		require.Equal(t, held[i].Message.Body, back[i].Message.Body)
		require.NoError(t, survivor.Ack(ctx, back[i]))
	}
	require.Eventually(t, crashedConn.IsClosed, 60*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, crashed.Ack(ctx, held[0]), broker.ErrLeaseLost, "its channel is gone")
}

// TestQuorumDestination: with quorum dead-letter queues the broker counts
// deliveries, and Record.Deliveries reports them.
func TestQuorumDestination(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	s := newStore(t, dial(t, url), rabbitmq.Options{QueueArgs: amqp.Table{"x-queue-type": "quorum"}}, "q")
	require.NoError(t, s.Publish(ctx, "q", brokertest.Message(t, brokertest.SampleInputs()[0])))
	for want := 1; want <= 3; want++ {
		recs := fetchAll(t, s, "q")
		require.Len(t, recs, 1)
		require.Equal(t, want, recs[0].Deliveries)
		require.Equal(t, want, recs[0].Message.DeliveryAttempt)
		if want < 3 {
			require.NoError(t, s.Release(ctx, recs[0]))
		} else {
			require.NoError(t, s.Ack(ctx, recs[0]))
		}
	}
}

// flaky fails its first n publishes, then delegates.
type flaky struct {
	n     int32
	calls atomic.Int32
	next  broker.Publisher
}

func (f *flaky) Publish(ctx context.Context, d string, m *broker.Message) error {
	if f.calls.Add(1) <= f.n {
		return errors.New("dead-letter store unavailable")
	}
	return f.next.Publish(ctx, d, m)
}

// TestConsumerConfirmBeforeAck: the source delivery is acknowledged only
// after the dead-letter publish was confirmed; when the write fails the
// delivery is nacked with requeue and comes back.
func TestConsumerConfirmBeforeAck(t *testing.T) {
	url := testenv.AMQP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := dial(t, url)
	srcQ := uniqueName("geodlqtest") + ".parcels"
	dest := srcQ + ".poison.dlt"
	dlq := newStore(t, conn, rabbitmq.Options{}, dest)
	t.Cleanup(func() { cleanup(t, url, "", srcQ) })
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(srcQ, true, false, false, false, nil)
	require.NoError(t, err)
	payload := []byte(`{"event_id":"evt-bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`)
	require.NoError(t, ch.PublishWithContext(ctx, "", srcQ, false, false, amqp.Publishing{Body: payload, MessageId: "src-1", DeliveryMode: amqp.Persistent}))

	pub := &flaky{n: 1, next: dlq}
	var mu sync.Mutex
	var attempts []int
	h := func(_ context.Context, m *broker.Message) error {
		mu.Lock()
		attempts = append(attempts, m.DeliveryAttempt)
		mu.Unlock()
		return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
	}
	cch, err := conn.Channel()
	require.NoError(t, err)
	c, err := rabbitmq.NewConsumer(cch, srcQ, h, &rabbitmq.ConsumerOptions{Processor: broker.ProcessorOptions{Publisher: pub}})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()

	var recs []*broker.Record
	require.Eventually(t, func() bool {
		recs = append(recs, fetchAll(t, dlq, dest)...)
		return len(recs) == 1
	}, 60*time.Second, 20*time.Millisecond)
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, cch.Close(), "unacknowledged deliveries would now be requeued")

	require.EqualValues(t, 2, pub.calls.Load(), "the failed write, then the confirmed one")
	mu.Lock()
	require.Equal(t, []int{1, 2}, attempts, "nacked with requeue, the message came back (redelivered)")
	mu.Unlock()
	q, err := ch.QueueDeclarePassive(srcQ, true, false, false, false, nil)
	require.NoError(t, err)
	require.Zero(t, q.Messages, "acknowledged once the dead-letter write was confirmed")

	env, err := envelope.Decode(recs[0].Message.Body)
	require.NoError(t, err)
	require.Equal(t, classify.ClassInvalidGeometry, env.FailureClass)
	require.Equal(t, 2, env.Attempts)
	require.Equal(t, "rabbitmq", env.Source.System)
	require.Equal(t, srcQ, env.Source.Topic)
	require.Equal(t, "src-1", env.Source.MessageID)
	restored, err := env.Restore(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, payload, restored)
	require.NoError(t, dlq.Ack(ctx, recs[0]))
}

// TestConsumerRejectsToBrokerDLX: with RejectOnFailure, a message whose
// dead-letter write keeps failing goes to the source queue's own
// dead-letter exchange, where x-death records it.
func TestConsumerRejectsToBrokerDLX(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	conn := dial(t, url)
	name := uniqueName("geodlqtest")
	src, dlx, park := name+".src", name+".dlx", name+".parking"
	t.Cleanup(func() { cleanup(t, url, dlx, src, park) })
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = rabbitmq.DeclareSourceQueue(ctx, ch, src, &rabbitmq.SourceQueueOptions{DeadLetterExchange: dlx, ParkingQueue: park})
	require.NoError(t, err)
	require.NoError(t, ch.PublishWithContext(ctx, "", src, false, false, amqp.Publishing{Body: []byte("payload"), DeliveryMode: amqp.Persistent}))

	c, err := rabbitmq.NewConsumer(ch, src, func(context.Context, *broker.Message) error {
		return classify.SchemaViolation(errors.New("not GeoJSON"))
	}, &rabbitmq.ConsumerOptions{Processor: broker.ProcessorOptions{Publisher: &flaky{n: 1 << 30}}, RejectOnFailure: true})
	require.NoError(t, err)
	var d amqp.Delivery
	require.Eventually(t, func() bool {
		var ok bool
		d, ok, err = ch.Get(src, false)
		require.NoError(t, err)
		return ok
	}, 60*time.Second, 20*time.Millisecond)
	out, err := c.Handle(ctx, d)
	require.ErrorIs(t, err, broker.ErrNotAcked)
	require.False(t, out.Ack)
	require.Eventually(t, func() bool {
		d, ok, err := ch.Get(park, true)
		require.NoError(t, err)
		if !ok {
			return false
		}
		deaths, err := rabbitmq.ParseXDeath(d.Headers)
		require.NoError(t, err)
		require.Equal(t, src, deaths[0].Queue)
		require.Equal(t, rabbitmq.ReasonRejected, deaths[0].Reason)
		return true
	}, 60*time.Second, 20*time.Millisecond)
}

// TestFilteredFetchRequeuesOthers: records a filter passes over are back
// in the queue when Fetch returns, for this handle and others.
func TestFilteredFetchRequeuesOthers(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	s := newStore(t, dial(t, url), rabbitmq.Options{}, "f")
	other, err := rabbitmq.New(ctx, dial(t, url), &rabbitmq.Options{Exchange: s.Exchange(), QueuePrefix: s.Queue("")})
	require.NoError(t, err)
	msgs := brokertest.Messages(t, brokertest.FilterInputs())
	for _, m := range msgs {
		require.NoError(t, s.Publish(ctx, "f", m))
	}
	f := broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}
	one, err := s.Fetch(ctx, "f", f, 1)
	require.NoError(t, err)
	require.Len(t, one, 1)
	require.NotNil(t, one[0].Envelope)
	require.True(t, f.Match(one[0].Envelope))
	rest := fetchAll(t, other, "f")
	require.Len(t, rest, len(msgs)-1)
	require.NoError(t, s.Ack(ctx, one[0]))
	for _, r := range rest {
		require.NoError(t, other.Ack(ctx, r))
	}
}
