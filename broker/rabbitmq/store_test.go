package rabbitmq_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/rabbitmq"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/testenv"
)

// newStore returns a store with a unique exchange and queue prefix; the
// destinations listed are deleted when the test ends.
func newStore(t *testing.T, conn *amqp.Connection, opts rabbitmq.Options, dests ...string) *broker.Store {
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
	opts.Create = true
	s, err := rabbitmq.New(context.Background(), conn, &opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func fetchAll(t *testing.T, s *broker.Store, d string) []*broker.Record {
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
	require.Equal(t, 128<<20, s.MaxMessageBytes("d"), "RabbitMQ's max_message_size")
	var c *amqp.Connection
	require.True(t, s.As(&c))
	require.Same(t, conn, c)
	require.False(t, s.As(new(int)))

	require.NoError(t, rabbitmq.Declare(ctx, s, "d"))
	require.NoError(t, rabbitmq.Declare(ctx, s, "d"), "idempotent")
	require.ErrorIs(t, s.Publish(ctx, strings.Repeat("x", 255), &broker.Message{}), broker.ErrInvalidArgument, "a queue name over 255 bytes with the prefix")
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclarePassive(rabbitmq.Queue(s, "d"), true, false, false, false, nil)
	require.NoError(t, err, "a durable queue named after the destination")
	require.Zero(t, q.Messages)

	m := brokertest.Message(t, brokertest.SampleInputs()[2])
	require.NoError(t, s.Publish(ctx, "d", m))
	d, ok, err := ch.Get(rabbitmq.Queue(s, "d"), false)
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
	require.NoError(t, rabbitmq.Declare(ctx, s, "gone"))
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDelete(rabbitmq.Queue(s, "gone"), false, false, false)
	require.NoError(t, err)
	err = s.Publish(ctx, "gone", &broker.Message{Body: []byte("x")})
	require.ErrorIs(t, err, rabbitmq.ErrUnroutable)
	require.ErrorContains(t, err, "NO_ROUTE")
	// The channel stays usable for the next publish.
	require.NoError(t, rabbitmq.Declare(ctx, s, "other"))
	t.Cleanup(func() { cleanup(t, url, "", rabbitmq.Queue(s, "other")) })
	require.NoError(t, s.Publish(ctx, "other", &broker.Message{Body: []byte("y")}))
}

// TestLeaseBelongsToItsChannel: a delivery tag is only meaningful on the
// channel that received it.
func TestLeaseBelongsToItsChannel(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	a := newStore(t, dial(t, url), rabbitmq.Options{}, "d")
	b, err := rabbitmq.New(ctx, dial(t, url), &rabbitmq.Options{Exchange: rabbitmq.Exchange(a), QueuePrefix: rabbitmq.Queue(a, "")})
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
	opts := rabbitmq.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Hour}}
	crashed := newStore(t, crashedConn, opts, "d")
	opts.Exchange, opts.QueuePrefix = rabbitmq.Exchange(crashed), rabbitmq.Queue(crashed, "")
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

// TestFilteredFetchRequeuesOthers: records a filter passes over are back
// in the queue when Fetch returns, for this handle and others.
func TestFilteredFetchRequeuesOthers(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	s := newStore(t, dial(t, url), rabbitmq.Options{}, "f")
	other, err := rabbitmq.New(ctx, dial(t, url), &rabbitmq.Options{Exchange: rabbitmq.Exchange(s), QueuePrefix: rabbitmq.Queue(s, "")})
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

// TestExchangeSetup: New needs the store's exchange; it declares it only
// with Create, never read-only, and refuses an exchange of another kind.
func TestExchangeSetup(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	conn := dial(t, url)
	name := uniqueName("geodlqtest")
	t.Cleanup(func() { cleanup(t, url, name) })
	exists := func() bool {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		return ch.ExchangeDeclarePassive(name, amqp.ExchangeDirect, true, false, false, false, nil) == nil
	}
	for _, o := range []rabbitmq.Options{{Exchange: name}, {Exchange: name, Create: true, StoreOptions: broker.StoreOptions{ReadOnly: true}}} {
		_, err := rabbitmq.New(ctx, conn, &o)
		require.ErrorIs(t, err, broker.ErrNoStore, "%+v", o)
	}
	require.False(t, exists(), "nothing declared")
	s, err := rabbitmq.New(ctx, conn, &rabbitmq.Options{Exchange: name, Create: true})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.True(t, exists())
	for _, o := range []rabbitmq.Options{{Exchange: name}, {Exchange: name, StoreOptions: broker.StoreOptions{ReadOnly: true}}} {
		s, err := rabbitmq.New(ctx, conn, &o)
		require.NoError(t, err, "an existing exchange is a store")
		require.NoError(t, s.Close())
	}

	fanout := uniqueName("geodlqtest")
	t.Cleanup(func() { cleanup(t, url, fanout) })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDeclare(fanout, amqp.ExchangeFanout, true, false, false, false, nil))
	require.NoError(t, ch.Close())
	for _, o := range []rabbitmq.Options{{Exchange: fanout}, {Exchange: fanout, Create: true}} {
		_, err := rabbitmq.New(ctx, conn, &o)
		require.ErrorIs(t, err, broker.ErrNoStore, "an exchange of another kind is not a store")
	}
	_, err = rabbitmq.New(ctx, nil, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	_, err = rabbitmq.New(ctx, conn, &rabbitmq.Options{Exchange: strings.Repeat("x", 256)})
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
}

// TestNoListing: the store cannot browse a queue, and says so.
func TestNoListing(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	s := newStore(t, dial(t, url), rabbitmq.Options{})
	_, err := s.List(ctx, broker.ListOptions{})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = s.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: time.Now()}})
	require.ErrorIs(t, err, errors.ErrUnsupported)
}
