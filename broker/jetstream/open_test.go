package jetstream_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/jetstream"
	"github.com/geodlq/geodlq/internal/testenv"
)

// storeURL returns a nats:// URL of the test server naming a stream no
// other run uses (deleted when the test ends), with query.
func storeURL(t *testing.T, query url.Values) (raw, stream string) {
	t.Helper()
	server := testenv.NATS(t)
	u, err := url.Parse(server)
	require.NoError(t, err)
	stream = uniqueName("OPEN")
	q := url.Values{"geodlq_stream": {stream}, "geodlq_prefix": {"geodlqtest." + stream}}
	for k, vs := range query {
		q[k] = vs
	}
	u.RawQuery = q.Encode()
	t.Cleanup(func() { deleteStream(t, server, stream) })
	return u.String(), stream
}

func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	require.Contains(t, broker.StoreSchemes(), "nats")
	raw, stream := storeURL(t, url.Values{"lease_ttl": {"750ms"}, "max_message_bytes": {"4096"}, "geodlq_replayer": {"ops"}})
	_, js := connect(t, testenv.NATS(t))

	_, err := broker.OpenStore(ctx, raw, nil)
	require.ErrorIs(t, err, broker.ErrNoStore, "without Create a missing stream is no store")
	_, err = broker.OpenStore(ctx, raw, &broker.OpenOptions{ReadOnly: true, Create: true})
	require.ErrorIs(t, err, broker.ErrNoStore, "read-only never creates")
	_, err = js.Stream(ctx, stream)
	require.ErrorIs(t, err, natsjs.ErrStreamNotFound, "nothing was created")

	s, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	require.Equal(t, "jetstream", s.Name())
	require.Equal(t, 4096, s.MaxMessageBytes("d"), "max_message_bytes")
	require.Equal(t, "ops_d", jetstream.ConsumerName(s, "d"), "geodlq_replayer")
	var nc *nats.Conn
	require.True(t, s.As(&nc), "As reaches the connection the opener made")
	require.NoError(t, s.Publish(ctx, "d", brokertest.Message(t, brokertest.SampleInputs()[0])))
	recs, err := s.Fetch(ctx, "d", broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	cons, err := js.Consumer(ctx, stream, "ops_d")
	require.NoError(t, err)
	require.Equal(t, 750*time.Millisecond, cons.CachedInfo().Config.AckWait, "lease_ttl")

	ro, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{ReadOnly: true})
	require.NoError(t, err)
	p, err := ro.List(ctx, broker.ListOptions{})
	require.NoError(t, err)
	require.Len(t, p.Entries, 1, "a leased record is listed")
	require.ErrorIs(t, ro.Publish(ctx, "d", &broker.Message{Body: []byte("x")}), broker.ErrReadOnly)
	require.NoError(t, ro.Close())

	require.NoError(t, s.Ack(ctx, recs[0]))
	require.NoError(t, s.Close())
	require.True(t, nc.IsClosed(), "closing the store closes the connection its opener made")
}

// TestOpenNotAStore: a stream that is not a dead-letter store (limits
// retention, or not capturing the prefix) is ErrNoStore, read-only or
// not, and is left as it was; so is a server without JetStream's stream.
func TestOpenNotAStore(t *testing.T) {
	ctx := context.Background()
	_, js := connect(t, testenv.NATS(t))
	raw, stream := storeURL(t, nil)
	_, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: stream, Subjects: []string{"geodlqtest.other." + stream}})
	require.NoError(t, err)
	for _, o := range []*broker.OpenOptions{{ReadOnly: true}, {ReadOnly: true, Create: true}, {Create: true}, nil} {
		_, err := broker.OpenStore(ctx, raw, o)
		require.ErrorIs(t, err, broker.ErrNoStore, "%+v", o)
	}
	st, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	require.Equal(t, []string{"geodlqtest.other." + stream}, cfg.Subjects, "nothing changed")
	require.Equal(t, natsjs.LimitsPolicy, cfg.Retention)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "nothing written")
	require.Zero(t, info.State.Consumers, "no consumer created")
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
		_, err = broker.OpenStore(context.Background(), "nats://"+ln.Addr().String(), &o)
		require.Error(t, err)
		require.ErrorContains(t, err, "connect timeout")
		require.Less(t, time.Since(start), 2*time.Second, "gave up within the connect timeout")
	}
}

func TestOpenURLErrors(t *testing.T) {
	ctx := context.Background()
	for _, raw := range []string{
		"nats:///",                                     // no host
		"nats://127.0.0.1:4222/GEODLQ",                 // a path
		"nats://127.0.0.1:4222?lease_ttl=soon",         // not a duration
		"nats://127.0.0.1:4222?lease_ttl=-1s",          // not positive
		"nats://127.0.0.1:4222?max_message_bytes=lots", // not a number
		"nats://127.0.0.1:4222?max_message_bytes=0",    // not positive
		"nats://127.0.0.1:4222?geodlq_table=x",         // not ours
		"nats://127.0.0.1:4222?timeout=5s",             // nor the client's
		"nats://127.0.0.1:4222?geodlq_stream=a.b",      // not a stream name
		"nats://127.0.0.1:4222?geodlq_prefix=a.>",      // a wildcard
		"nats://127.0.0.1:99999",                       // not a port
		"nats://ro ot@127.0.0.1:4222",                  // net/url refuses it: kept opaque
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
	tests := []struct {
		raw, server string
	}{
		{"nats://host", "nats://host:4222"},
		{"nats://host:4333", "nats://host:4333"},
		{"nats://user:pw@[::1]", "nats://user:pw@[::1]:4222"},
		{"nats://token@host:1?geodlq_stream=S", "nats://token@host:1"},
	}
	for _, tc := range tests {
		u, err := broker.ParseStoreURL(tc.raw)
		require.NoError(t, err)
		server, _, err := jetstream.ParseURL(u, broker.OpenOptions{})
		require.NoError(t, err)
		require.Equal(t, tc.server, server)
	}
}
