package redisstream_test

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/broker/redisstream/internal/redistest"
)

// snapshot is every key under a prefix with its type and length: what a
// read-only open must leave unchanged.
func snapshot(t *testing.T, c *redis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range redistest.Keys(t, c, prefix) {
		typ := c.Type(ctx, k).Val()
		v := typ
		switch typ {
		case "stream":
			groups, _ := c.XInfoGroups(ctx, k).Result()
			v += " len=" + itoa(c.XLen(ctx, k).Val()) + " groups=" + itoa(int64(len(groups)))
		case "hash":
			v += " " + itoa(c.HLen(ctx, k).Val())
		}
		out[k] = v
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// openURL returns the test Redis's URL with the prefix and query.
func openURL(t *testing.T, prefix, query string) string {
	q := url.Values{"geodlq_prefix": {prefix}}
	extra, err := url.ParseQuery(query)
	require.NoError(t, err)
	for k, v := range extra {
		q[k] = v
	}
	return redistest.URL(t, q.Encode())
}

// The opener honours ReadOnly and Create: a Redis without the store's
// catalog or streams under the prefix is "no geodlq store here", read-only
// opens write nothing, and Create starts a store.
func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	seedStore := func(t *testing.T, prefix string) {
		s := open(t, redisstream.Options{Prefix: prefix})
		publishN(t, s, "parcels.poison.dlt", 2)
	}
	tests := []struct {
		name    string
		seed    func(t *testing.T, prefix string)
		oo      broker.OpenOptions
		wantErr error
		check   func(t *testing.T, s *broker.Store, prefix string)
	}{
		{name: "nothing, read-only", oo: broker.OpenOptions{ReadOnly: true}, wantErr: broker.ErrNoStore},
		{name: "nothing, without Create", wantErr: broker.ErrNoStore},
		{name: "nothing, read-only with Create", oo: broker.OpenOptions{ReadOnly: true, Create: true}, wantErr: broker.ErrNoStore},
		{name: "nothing, Create", oo: broker.OpenOptions{Create: true}, check: func(t *testing.T, s *broker.Store, prefix string) {
			require.Equal(t, "1", c.HGet(ctx, prefix, "layout").Val(), "the catalog marks the store")
			require.NoError(t, s.Publish(ctx, "d", &broker.Message{Body: []byte("x")}))
			ds, err := s.Destinations(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{"d"}, ds)
		}},
		{name: "a store, read-only", seed: seedStore, oo: broker.OpenOptions{ReadOnly: true}, check: func(t *testing.T, s *broker.Store, prefix string) {
			before := snapshot(t, c, prefix)
			p, err := s.List(ctx, broker.ListOptions{})
			require.NoError(t, err)
			require.Len(t, p.Entries, 2)
			_, err = s.Stats(ctx, broker.StatsOptions{})
			require.NoError(t, err)
			_, err = s.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: time.Now().Add(time.Hour)}, IncludePending: true, DryRun: true})
			require.NoError(t, err)
			require.ErrorIs(t, s.Publish(ctx, "d", &broker.Message{Body: []byte("x")}), broker.ErrReadOnly)
			_, err = s.Fetch(ctx, "parcels.poison.dlt", broker.Filter{}, 1)
			require.ErrorIs(t, err, broker.ErrReadOnly)
			require.ErrorIs(t, s.Release(ctx, &broker.Record{ID: "1-1", Destination: "d", Lease: "1:x"}), broker.ErrReadOnly)
			_, err = s.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: time.Now().Add(time.Hour)}, IncludePending: true})
			require.ErrorIs(t, err, broker.ErrReadOnly)
			require.True(t, s.ReadOnly())
			require.Equal(t, before, snapshot(t, c, prefix), "a read-only store wrote nothing")
		}},
		{name: "a store, read-write", seed: seedStore, check: func(t *testing.T, s *broker.Store, _ string) {
			recs, err := s.Fetch(ctx, "parcels.poison.dlt", broker.Filter{}, 10)
			require.NoError(t, err)
			require.Len(t, recs, 2)
		}},
		{name: "streams without a catalog, read-only", seed: legacy, oo: broker.OpenOptions{ReadOnly: true},
			check: func(t *testing.T, s *broker.Store, prefix string) {
				ds, err := s.Destinations(ctx)
				require.NoError(t, err)
				require.Equal(t, []string{"old"}, ds, "found by SCAN")
				require.Zero(t, c.Exists(ctx, prefix).Val(), "no catalog written")
			}},
		{name: "streams without a catalog, read-write", seed: legacy, check: func(t *testing.T, s *broker.Store, prefix string) {
			require.Equal(t, map[string]string{"layout": "1", "d:old": "1"}, c.HGetAll(ctx, prefix).Val(), "the streams entered the catalog")
		}},
		{name: "a foreign key at the catalog", seed: func(t *testing.T, prefix string) {
			require.NoError(t, c.Set(ctx, prefix, "someone else's", 0).Err())
		}, oo: broker.OpenOptions{Create: true}, wantErr: broker.ErrNoStore},
		{name: "a foreign stream under the prefix", seed: func(t *testing.T, prefix string) {
			require.NoError(t, c.XAdd(ctx, &redis.XAddArgs{Stream: prefix + ":orders", Values: []any{"order", "42"}}).Err())
		}, oo: broker.OpenOptions{ReadOnly: true}, wantErr: broker.ErrNoStore},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			if tc.seed != nil {
				tc.seed(t, prefix)
			}
			before := snapshot(t, c, prefix)
			s, err := broker.OpenStore(ctx, openURL(t, prefix, ""), &tc.oo)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.ErrorContains(t, err, "no geodlq store here")
				require.Equal(t, before, snapshot(t, c, prefix), "a refused open wrote nothing")
				return
			}
			require.NoError(t, err)
			defer s.Close()
			var uc redis.UniversalClient
			require.True(t, s.As(&uc), "As reaches the opener's client")
			tc.check(t, s, prefix)
		})
	}
}

// legacy writes a stream of the store's layout without a catalog, as a
// version before the catalog did.
func legacy(t *testing.T, prefix string) {
	c := newClient(t)
	require.NoError(t, c.XAdd(context.Background(), &redis.XAddArgs{Stream: prefix + ":old", Values: []any{"v", "1", "body", "x"}}).Err())
}

// URL parameters set the store's options; bad ones are refused before
// connecting.
func TestOpenParameters(t *testing.T) {
	ctx := context.Background()
	prefix := uniquePrefix(t)
	s, err := broker.OpenStore(ctx, openURL(t, prefix, "lease_ttl=45s&max_message_bytes=1234&geodlq_group=g1&read_timeout=2s"), &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, 1234, s.MaxMessageBytes("d"))
	require.Equal(t, 45*time.Second, redisstream.LeaseTTL(s))
	require.Equal(t, "g1", redisstream.Group(s))
	require.Equal(t, prefix+":d", redisstream.StreamKey(s, "d"))
	require.Contains(t, broker.StoreSchemes(), "redis")
	require.Contains(t, broker.StoreSchemes(), "rediss")
	for _, q := range []string{"lease_ttl=soon", "lease_ttl=-1s", "max_message_bytes=-5", "max_message_bytes=x", "no_such_option=1"} {
		_, err := broker.OpenStore(ctx, openURL(t, prefix, q), nil)
		require.ErrorIs(t, err, broker.ErrInvalidArgument, q)
	}
	_, err = broker.OpenStore(ctx, "redis:///nohost", nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
}

// silentServer accepts TCP connections and never answers.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// refusedAddr returns an address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

const helperEnv = "GEODLQ_REDISSTREAM_OPEN_HELPER"

// An unreachable or silent server fails the open within ConnectTimeout,
// with one clear error and not a line on stderr: go-redis's own logger
// (process-wide, redis.SetLogger) is never reached. Each open runs in a
// child process, whose stderr the test reads.
func TestOpenUnreachableIsQuickAndQuiet(t *testing.T) {
	if u := os.Getenv(helperEnv); u != "" {
		_, err := broker.OpenStore(context.Background(), u, &broker.OpenOptions{ConnectTimeout: 500 * time.Millisecond, ReadOnly: true})
		os.Stdout.WriteString("error: " + errString(err) + "\n")
		os.Exit(0)
	}
	tests := []struct {
		name, addr, want string
	}{
		{"connection refused", refusedAddr(t), "connection refused"},
		{"accepts TCP, never answers", silentServer(t), "does not answer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestOpenUnreachableIsQuickAndQuiet$")
			cmd.Env = append(os.Environ(), helperEnv+"=redis://"+tc.addr+"/0")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			require.NoError(t, cmd.Run())
			took := time.Since(start)
			t.Logf("%s in %v", bytes.TrimSpace(stdout.Bytes()), took)
			require.Contains(t, stdout.String(), tc.want)
			require.Empty(t, stderr.String(), "nothing but the returned error: no go-redis log lines")
			require.Less(t, took, 5*time.Second, "the child process, ConnectTimeout 500ms included")
		})
	}
	t.Run("in process, within the timeout", func(t *testing.T) {
		for _, addr := range []string{silentServer(t), refusedAddr(t)} {
			start := time.Now()
			_, err := broker.OpenStore(context.Background(), "redis://"+addr+"/0", &broker.OpenOptions{ConnectTimeout: 300 * time.Millisecond})
			require.Error(t, err)
			require.Less(t, time.Since(start), 300*time.Millisecond+time.Second, "%s: %v", addr, err)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
