package rabbitmq_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/rabbitmq"
	"github.com/geodlq/geodlq/internal/testenv"
)

// storeURL returns the test broker's URL naming an exchange and a queue
// prefix no other run uses, with query; the exchange and the queues of
// dests are deleted when the test ends.
func storeURL(t *testing.T, query url.Values, dests ...string) (raw, exchange string) {
	t.Helper()
	server := testenv.AMQP(t)
	u, err := url.Parse(server)
	require.NoError(t, err)
	exchange = uniqueName("geodlqtest")
	q := url.Values{"geodlq_exchange": {exchange}, "geodlq_queue_prefix": {exchange + "."}}
	for k, vs := range query {
		q[k] = vs
	}
	u.RawQuery = q.Encode()
	var queues []string
	for _, d := range dests {
		queues = append(queues, exchange+"."+d)
	}
	t.Cleanup(func() { cleanup(t, server, exchange, queues...) })
	return u.String(), exchange
}

func exchangeExists(t *testing.T, conn *amqp.Connection, name string) bool {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	return ch.ExchangeDeclarePassive(name, amqp.ExchangeDirect, true, false, false, false, nil) == nil
}

func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	require.Contains(t, broker.StoreSchemes(), "amqp")
	require.Contains(t, broker.StoreSchemes(), "amqps")
	raw, exchange := storeURL(t, url.Values{"lease_ttl": {"750ms"}, "max_message_bytes": {"4096"}, "geodlq_queue_type": {"quorum"}}, "d")
	conn := dial(t, testenv.AMQP(t))

	_, err := broker.OpenStore(ctx, raw, nil)
	require.ErrorIs(t, err, broker.ErrNoStore, "without Create a broker without the exchange is no store")
	_, err = broker.OpenStore(ctx, raw, &broker.OpenOptions{ReadOnly: true, Create: true})
	require.ErrorIs(t, err, broker.ErrNoStore, "read-only never declares")
	require.False(t, exchangeExists(t, conn, exchange), "nothing was declared")

	s, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	require.Equal(t, "rabbitmq", s.Name())
	require.Equal(t, 4096, s.MaxMessageBytes("d"), "max_message_bytes")
	var c *amqp.Connection
	require.True(t, s.As(&c), "As reaches the connection the opener made")
	require.NoError(t, s.Publish(ctx, "d", brokertest.Message(t, brokertest.SampleInputs()[0])))
	for want := 1; want <= 2; want++ {
		recs, err := s.Fetch(ctx, "d", broker.Filter{}, 1)
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.Equal(t, want, recs[0].Deliveries, "geodlq_queue_type=quorum: the broker counts deliveries")
		if want == 1 {
			time.Sleep(time.Second) // lease_ttl: the store requeues it
			require.ErrorIs(t, s.Ack(ctx, recs[0]), broker.ErrLeaseLost)
			continue
		}
		require.NoError(t, s.Ack(ctx, recs[0]))
	}

	ro, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{ReadOnly: true})
	require.NoError(t, err)
	require.ErrorIs(t, ro.Publish(ctx, "d", &broker.Message{Body: []byte("x")}), broker.ErrReadOnly)
	require.NoError(t, ro.Close())

	require.NoError(t, s.Close())
	require.True(t, c.IsClosed(), "closing the store closes the connection its opener made")
}

// TestOpenNotAStore: an exchange of another kind, or a virtual host that
// does not exist, is ErrNoStore, read-only or not, and is left as it was.
func TestOpenNotAStore(t *testing.T) {
	ctx := context.Background()
	conn := dial(t, testenv.AMQP(t))
	raw, exchange := storeURL(t, nil)
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil))
	require.NoError(t, ch.Close())
	for _, o := range []*broker.OpenOptions{{Create: true}, nil} {
		_, err := broker.OpenStore(ctx, raw, o)
		require.ErrorIs(t, err, broker.ErrNoStore, "%+v", o)
	}
	ch, err = conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.ExchangeDeclarePassive(exchange, amqp.ExchangeTopic, true, false, false, false, nil), "still there")

	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.Path = "/geodlq-no-such-vhost"
	for _, o := range []*broker.OpenOptions{{ReadOnly: true}, {Create: true}} {
		_, err = broker.OpenStore(ctx, u.String(), o)
		require.ErrorIs(t, err, broker.ErrNoStore, "a virtual host that does not exist")
	}
}

// TestOpenConnectTimeout: a server that accepts TCP connections and never
// answers fails the open within ConnectTimeout.
func TestOpenConnectTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // accepted, never answered
		}
	}()
	defer func() {
		for len(held) > 0 {
			_ = (<-held).Close()
		}
	}()
	for _, o := range []broker.OpenOptions{{ConnectTimeout: 300 * time.Millisecond}, {ConnectTimeout: 300 * time.Millisecond, ReadOnly: true}} {
		start := time.Now()
		_, err = broker.OpenStore(context.Background(), "amqp://guest:guest@"+ln.Addr().String()+"/", &o)
		require.Error(t, err)
		require.ErrorContains(t, err, "connect timeout")
		require.Less(t, time.Since(start), 2*time.Second, "gave up within the connect timeout")
	}
}

func TestOpenURLErrors(t *testing.T) {
	ctx := context.Background()
	for _, raw := range []string{
		"amqp:///",                                        // no host
		"amqp://127.0.0.1:5672/?lease_ttl=soon",           // not a duration
		"amqp://127.0.0.1:5672/?lease_ttl=-1s",            // not positive
		"amqp://127.0.0.1:5672/?max_message_bytes=lots",   // not a number
		"amqp://127.0.0.1:5672/?max_message_bytes=0",      // not positive
		"amqp://127.0.0.1:5672/?geodlq_table=x",           // not ours
		"amqp://127.0.0.1:5672/?geodlq_queue_type=stream", // not a queue type the store can lease from
		"amqp://127.0.0.1:99999/",                         // amqp091-go refuses the port
		"amqp://gu est@127.0.0.1:5672/",                   // net/url refuses it: kept opaque
	} {
		t.Run(raw, func(t *testing.T) {
			start := time.Now()
			_, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{ConnectTimeout: 5 * time.Second})
			require.Error(t, err)
			require.ErrorIs(t, err, broker.ErrInvalidArgument)
			require.Less(t, time.Since(start), 5*time.Second)
		})
	}
}

func TestParseURL(t *testing.T) {
	u, err := broker.ParseStoreURL("amqps://u:p@host/vh?heartbeat=5&geodlq_exchange=X&geodlq_queue_type=quorum&lease_ttl=1m")
	require.NoError(t, err)
	server, o, err := rabbitmq.ParseURL(u, broker.OpenOptions{Create: true})
	require.NoError(t, err)
	require.Equal(t, "amqps://u:p@host/vh?heartbeat=5", server, "amqp091-go's parameters pass through, ours do not")
	require.Equal(t, "X", o.Exchange)
	require.Equal(t, amqp.Table{"x-queue-type": "quorum"}, o.QueueArgs)
	require.Equal(t, time.Minute, o.LeaseTTL)
	require.True(t, o.Create)
}
