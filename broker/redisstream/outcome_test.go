package redisstream_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/broker/redisstream/internal/redistest"
)

// count returns how many entries of key have body.
func count(t *testing.T, c *redis.Client, key, body string) int {
	t.Helper()
	xs, err := c.XRange(context.Background(), key, "-", "+").Result()
	require.NoError(t, err)
	n := 0
	for _, x := range xs {
		if x.Values["body"] == body {
			n++
		}
	}
	return n
}

// A write whose reply is lost — the connection drops after Redis ran the
// XADD, or the reply comes after the client's ReadTimeout — is retried,
// by go-redis or by the store, and the retry finds the first write by
// its digest: Publish reports success and the entry is there once. The
// cases without deduplication show the fault it closes: go-redis's retry
// writes a second entry, and without retries the write is reported
// failed although it was written (issue 9, item 3).
func TestWriteOutcomeIsCertain(t *testing.T) {
	direct := newClient(t)
	tests := []struct {
		name        string
		dedup       time.Duration
		maxRetries  int
		readTimeout time.Duration
		drop        bool
		delay       time.Duration
		wantErr     bool
		wantEntries int
	}{
		{name: "dropped reply, go-redis retries", maxRetries: 0, drop: true, wantEntries: 1},
		{name: "dropped reply, the store retries", maxRetries: -1, drop: true, wantEntries: 1},
		{name: "reply after the client's ReadTimeout", maxRetries: -1, readTimeout: 100 * time.Millisecond, delay: 400 * time.Millisecond, wantEntries: 1},
		{name: "slow reply, go-redis retries", maxRetries: 0, readTimeout: 100 * time.Millisecond, delay: 400 * time.Millisecond, wantEntries: 1},
		{name: "without dedup: go-redis's retry writes twice", dedup: -1, maxRetries: 0, drop: true, wantEntries: 2},
		{name: "without dedup or retries: written but reported failed", dedup: -1, maxRetries: -1, drop: true, wantErr: true, wantEntries: 1},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			p := redistest.NewFaultProxy(t)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: tc.maxRetries, ReadTimeout: tc.readTimeout})
			t.Cleanup(func() { _ = c.Close() })
			s, err := redisstream.New(c, &redisstream.Options{Prefix: uniquePrefix(t), DedupWindow: tc.dedup})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			d := "outcome"
			// Warm up: a connection in the pool, the script in Redis's cache.
			require.NoError(t, s.Publish(ctx, d, &broker.Message{Body: []byte("warm-up")}))
			body := "the-one-write-" + strconv.Itoa(i)
			if tc.drop {
				p.DropReply(body)
			} else {
				p.DelayReply(body, tc.delay)
			}
			start := time.Now()
			err = s.Publish(ctx, d, &broker.Message{Body: []byte(body), Key: []byte("k")})
			t.Logf("Publish returned %v after %v", err, time.Since(start))
			require.Equal(t, 1, p.Hits(), "the fault was injected")
			if tc.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantEntries, count(t, direct, redisstream.StreamKey(s, d), body))
		})
	}
}

// Ack and Release whose reply is lost after Redis settled the entry
// succeed on retry (the call's nonce marks it settled), instead of
// reporting a lease they did not lose; a second call of the same lease
// still fails with ErrLeaseLost.
func TestSettleOutcomeIsCertain(t *testing.T) {
	for _, mode := range []string{"ack", "release"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			p := redistest.NewFaultProxy(t)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			s, err := redisstream.New(c, &redisstream.Options{Prefix: uniquePrefix(t)})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			d := "settle"
			publishN(t, s, d, 2)
			recs, err := s.Fetch(ctx, d, broker.Filter{}, 2)
			require.NoError(t, err)
			require.Len(t, recs, 2)
			require.NoError(t, s.Ack(ctx, recs[1]), "warm-up: the script in Redis's cache")
			settle := s.Ack
			if mode == "release" {
				settle = s.Release
			}
			p.DropReply(recs[0].ID)
			require.NoError(t, settle(ctx, recs[0]), "the retry finds the call's own mark")
			require.Equal(t, 1, p.Hits())
			require.ErrorIs(t, settle(ctx, recs[0]), broker.ErrLeaseLost, "a second call of the lease")
			again, err := s.Fetch(ctx, d, broker.Filter{}, 10)
			require.NoError(t, err)
			if mode == "ack" {
				require.Empty(t, again, "acknowledged once, for good")
				n, err := redisstream.Len(ctx, s, d)
				require.NoError(t, err)
				require.Zero(t, n)
			} else {
				require.Len(t, again, 1, "released: available at once")
				require.Equal(t, recs[0].ID, again[0].ID)
				require.NoError(t, s.Ack(ctx, again[0]))
			}
		})
	}
}

// A byte-identical message (key, headers, body) published again within
// DedupWindow is stored once; any difference, or the window's end, makes
// a new entry. The digest's key lives in the stream's hash slot and
// expires with the window.
func TestDedupWindow(t *testing.T) {
	ctx := context.Background()
	const window = 300 * time.Millisecond
	s := open(t, redisstream.Options{Prefix: uniquePrefix(t), DedupWindow: window})
	base := &broker.Message{Key: []byte("k"), Body: []byte("body"), Headers: map[string]string{"a": "1"}}
	tests := []struct {
		name    string
		again   func(*broker.Message)
		entries int64
	}{
		{"identical", func(*broker.Message) {}, 1},
		{"another body", func(m *broker.Message) { m.Body = []byte("body2") }, 2},
		{"another key", func(m *broker.Message) { m.Key = []byte("k2") }, 2},
		{"nil key vs empty", func(m *broker.Message) { m.Key = nil }, 2},
		{"another header value", func(m *broker.Message) { m.Headers = map[string]string{"a": "2"} }, 2},
		{"header moved into the body", func(m *broker.Message) { m.Headers = nil; m.Body = []byte("a1body") }, 2},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := "dedup-" + strconv.Itoa(i)
			require.NoError(t, s.Publish(ctx, d, base))
			m := base.Clone()
			tc.again(m)
			require.NoError(t, s.Publish(ctx, d, m))
			n, err := redisstream.Len(ctx, s, d)
			require.NoError(t, err)
			require.Equal(t, tc.entries, n)
		})
	}
	t.Run("after the window", func(t *testing.T) {
		d := "dedup-window"
		require.NoError(t, s.Publish(ctx, d, base))
		key := redisstream.StreamKey(s, d)
		marks, err := redisstream.Client(s).Keys(ctx, "{"+key+"}:dedup:*").Result()
		require.NoError(t, err)
		require.Len(t, marks, 1, "one digest key, in the stream's slot")
		ttl, err := redisstream.Client(s).PTTL(ctx, marks[0]).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0))
		require.LessOrEqual(t, ttl, window)
		time.Sleep(window + 100*time.Millisecond)
		require.NoError(t, s.Publish(ctx, d, base))
		n, err := redisstream.Len(ctx, s, d)
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "a new entry once the window passed")
	})
}

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM).
func crc16(b string) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc ^= uint16(b[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slot is the Redis Cluster hash slot of key.
func slot(key string) uint16 {
	if s := bytes.IndexByte([]byte(key), '{'); s >= 0 {
		if e := bytes.IndexByte([]byte(key[s+1:]), '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return crc16(key) % 16384
}

// The store's bookkeeping keys share the stream's hash slot, so its
// scripts run on Redis Cluster, for every destination name but those
// with a "}" and no hash tag (the package doc says so).
func TestSameSlotKey(t *testing.T) {
	require.Equal(t, uint16(12739), slot("123456789"), "CRC-16/XMODEM check value 0x31C3 mod 16384")
	tests := []struct {
		key      string
		sameSlot bool
	}{
		{"geodlq:parcels.poison.dlt", true},
		{"geodlq:{tenant-1}:parcels", true},
		{"{x}", true},
		{"geodlq:a{b", true},
		{"geodlq:a{}b", false},
		{"geodlq:{}x}y", false},
		{"geodlq:a}b", false},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			k := redisstream.SameSlotKey(tc.key, ":dedup:0123")
			require.Equal(t, tc.sameSlot, slot(k) == slot(tc.key), "%q and %q", tc.key, k)
		})
	}
}

// The uncertainty that remains: the caller gives up, the grace runs out,
// and Redis has not answered. Publish then fails with ErrOutcomeUnknown —
// although Redis did write — and the caller's retry of the same message
// (a redelivery dead-lettering it again) finds the write by its digest:
// one entry.
func TestOutcomeUnknownThenRetryStoresOnce(t *testing.T) {
	ctx := context.Background()
	direct := newClient(t)
	p := redistest.NewFaultProxy(t)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstream.New(c, &redisstream.Options{Prefix: uniquePrefix(t), StoreOptions: broker.StoreOptions{CancelGrace: 200 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	d := "unknown"
	require.NoError(t, s.Publish(ctx, d, &broker.Message{Body: []byte("warm-up")}))
	m := &broker.Message{Body: []byte("written-but-unanswered"), Headers: map[string]string{broker.HeaderIdempotencyKey: "idem:test:unknown"}}
	p.DelayReply(string(m.Body), time.Second)
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = s.Publish(cctx, d, m)
	require.ErrorIs(t, err, broker.ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the caller's own deadline")
	require.Equal(t, 1, count(t, direct, redisstream.StreamKey(s, d), string(m.Body)), "Redis wrote it")
	require.NoError(t, s.Publish(ctx, d, m.Clone()), "the retry")
	require.Equal(t, 1, count(t, direct, redisstream.StreamKey(s, d), string(m.Body)), "stored once")
}
