package kafka_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
)

func (c *cluster) url(query string) string {
	u := "kafka://" + strings.Join(c.c.Addrs(), ",")
	if query != "" {
		u += "?" + query
	}
	return u
}

func TestOpenURL(t *testing.T) {
	require.Contains(t, broker.StoreSchemes(), "kafka", "importing the package registers the scheme")
	c := newCluster(t)
	ctx := context.Background()
	host := strings.Join(c.c.Addrs(), ",")
	for name, raw := range map[string]string{
		"no brokers":        "kafka://",
		"only commas":       "kafka://,,",
		"path":              "kafka://" + host + "/topic",
		"credentials":       "kafka://user:secret@" + host,
		"unknown parameter": "kafka://" + host + "?lease=5m",
		"bad duration":      "kafka://" + host + "?lease_ttl=soon",
		"negative":          "kafka://" + host + "?lease_ttl=-1s",
		"zero size":         "kafka://" + host + "?max_message_bytes=0",
		"huge size":         "kafka://" + host + "?max_message_bytes=99999999999",
		"tiny budget":       "kafka://" + host + "?header_budget=10",
		"bad partitions":    "kafka://" + host + "?partitions=x",
		"too many seeds":    "kafka://" + strings.Repeat("h:1,", 65),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := broker.OpenStore(ctx, raw, nil)
			require.Error(t, err)
			require.NotContains(t, err.Error(), "secret", "the password is redacted")
			if name != "tiny budget" {
				require.ErrorIs(t, err, broker.ErrInvalidArgument)
			}
		})
	}

	s, err := broker.OpenStore(ctx, c.url("max_message_bytes=4096&lease_ttl=2s&join_wait=1s"), nil)
	require.NoError(t, err)
	require.Equal(t, 4096, s.MaxMessageBytes("any"), "max_message_bytes sets the limit")
	var cl *kgo.Client
	require.True(t, s.As(&cl))
	require.NoError(t, cl.Ping(ctx))
	require.NoError(t, s.Close())
	require.Error(t, cl.Ping(ctx), "the store closes the client the opener made")
}

// Create makes missing topics (with the URL's partition count); without
// it a missing topic is "no store here".
func TestOpenCreate(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	m := brokertest.Message(t, brokertest.SampleInputs()[0])

	plain, err := broker.OpenStore(ctx, c.url(""), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Close() })
	d := unique("create") + ".poison.dlt"
	require.ErrorIs(t, plain.Publish(ctx, d, m), broker.ErrNoStore)
	ok, err := topicExists(c, d)
	require.NoError(t, err)
	require.False(t, ok)

	cr, err := broker.OpenStore(ctx, c.url("partitions=3"), &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cr.Close() })
	require.NoError(t, cr.Publish(ctx, d, m))
	td, err := c.admin().ListTopics(ctx, d)
	require.NoError(t, err)
	require.Len(t, td[d].Partitions, 3)
	require.NoError(t, plain.Publish(ctx, d, m), "the topic exists now")
	require.Len(t, drain(t, plain, d), 2)
}

// Read-only on a cluster that holds no store: every operation that needs
// a topic says "no store here", writes and leases are refused, and
// nothing — no topic, no group, no offset — is written.
func TestOpenReadOnly(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	ro, err := broker.OpenStore(ctx, c.url("partitions=3"), &broker.OpenOptions{ReadOnly: true, Create: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ro.Close() })
	d := unique("ro") + ".poison.dlt"
	_, err = ro.List(ctx, broker.ListOptions{Destination: d})
	require.ErrorIs(t, err, broker.ErrNoStore)
	_, err = ro.Stats(ctx, broker.StatsOptions{Destination: d})
	require.ErrorIs(t, err, broker.ErrNoStore)
	ds, err := ro.Destinations(ctx)
	require.NoError(t, err)
	require.Empty(t, ds)
	require.ErrorIs(t, ro.Publish(ctx, d, brokertest.Message(t, brokertest.SampleInputs()[0])), broker.ErrReadOnly)
	_, err = ro.Fetch(ctx, d, broker.Filter{}, 1)
	require.ErrorIs(t, err, broker.ErrReadOnly)
	require.ErrorIs(t, ro.Ack(ctx, &broker.Record{ID: "0/0", Destination: d}), broker.ErrReadOnly)

	td, err := c.admin().ListTopics(ctx)
	require.NoError(t, err)
	require.Empty(t, td.Names(), "no topic created")
	groups, err := c.admin().ListGroups(ctx)
	require.NoError(t, err)
	require.Empty(t, groups.Groups(), "no group joined")
}

// silentBroker accepts TCP connections and never answers.
func silentBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, cn) // held open, never read or written
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, cn := range conns {
			_ = cn.Close()
		}
	})
	return ln.Addr().String()
}

// A broker that accepts the connection and never answers fails the open
// within ConnectTimeout; so does one that refuses connections, and a
// caller's context that ends first.
func TestOpenConnectTimeout(t *testing.T) {
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		return addr
	}()
	tests := []struct {
		name     string
		url      string
		timeout  time.Duration
		ctx      time.Duration
		deadline bool // the error is the deadline's
	}{
		{"silent", "kafka://" + silentBroker(t), 500 * time.Millisecond, 0, true},
		{"two silent seeds", "kafka://" + silentBroker(t) + "," + silentBroker(t), 500 * time.Millisecond, 0, true},
		{"refused", "kafka://" + refused, 500 * time.Millisecond, 0, false},
		{"not kafka", "kafka://" + garbageServer(t), 500 * time.Millisecond, 0, false},
		{"caller's deadline first", "kafka://" + silentBroker(t), 10 * time.Second, 300 * time.Millisecond, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			start := time.Now()
			s, err := broker.OpenStore(ctx, tc.url, &broker.OpenOptions{ConnectTimeout: tc.timeout, ReadOnly: true})
			took := time.Since(start)
			if s != nil {
				_ = s.Close()
			}
			require.Error(t, err)
			if tc.deadline {
				require.ErrorIs(t, err, context.DeadlineExceeded)
			}
			bound := min(tc.timeout, cmpNonZero(tc.ctx, tc.timeout))
			require.Less(t, took, bound+time.Second, "the open gave up within its timeout (%v)", took)
		})
	}
}

// garbageServer answers every connection as an HTTP server would, and
// hangs up.
func garbageServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = cn.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
			_ = cn.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String()
}

func cmpNonZero(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
