package redisstream_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/classify"
)

// open returns a store on a fresh client, as another process would.
func open(t *testing.T, o redisstream.Options) *broker.Store {
	t.Helper()
	s, err := redisstream.New(newClient(t), &o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// lease returns options with a prefix and a lease.
func lease(prefix string, ttl time.Duration) redisstream.Options {
	return redisstream.Options{Prefix: prefix, StoreOptions: broker.StoreOptions{LeaseTTL: ttl}}
}

// published numbers the messages publishN makes, so that no two are
// byte-identical (which the store's deduplication would store once).
var published atomic.Int64

func publishN(t *testing.T, s *broker.Store, d string, n int) []*broker.Message {
	t.Helper()
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		in := brokertest.SampleInputs()[i%len(brokertest.SampleInputs())]
		in.IdempotencyKey = "idem:test:" + strconv.FormatInt(published.Add(1), 10)
		msgs[i] = brokertest.Message(t, in)
		require.NoError(t, s.Publish(context.Background(), d, msgs[i]))
	}
	return msgs
}

func ids(recs []*broker.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// pending returns the owner and delivery count of every pending entry.
func pending(t *testing.T, s *broker.Store, d string) map[string]redis.XPendingExt {
	t.Helper()
	p, err := redisstream.Client(s).XPendingExt(context.Background(), &redis.XPendingExtArgs{
		Stream: redisstream.StreamKey(s, d), Group: redisstream.Group(s), Start: "-", End: "+", Count: 10_000,
	}).Result()
	require.NoError(t, err)
	out := map[string]redis.XPendingExt{}
	for _, e := range p {
		out[e.ID] = e
	}
	return out
}

// A replayer that crashes holding leases loses nothing: once the lease's
// idle time has passed, another consumer of the group takes the entries
// over with XAUTOCLAIM (filtered or not), oldest first and before newer
// entries, with the delivery count grown; the crashed consumer's late
// acknowledgements fail with ErrLeaseLost.
func TestCrashedConsumerRecoveredByXAUTOCLAIM(t *testing.T) {
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	o := lease(uniquePrefix(t), ttl)
	crashed, survivor := open(t, o), open(t, o)
	require.NotEqual(t, redisstream.Consumer(crashed), redisstream.Consumer(survivor))
	d := "crash"
	publishN(t, crashed, d, 6)

	held, err := crashed.Fetch(ctx, d, broker.Filter{}, 3)
	require.NoError(t, err)
	require.Len(t, held, 3)
	filtered, err := crashed.Fetch(ctx, d, broker.Filter{Classes: []classify.Class{classify.ClassCRSMismatch}}, 10)
	require.NoError(t, err)
	require.Len(t, filtered, 1, "SampleInputs()[4] is the one CRS mismatch")
	for id, p := range pending(t, crashed, d) {
		if id == held[0].ID || id == held[1].ID || id == held[2].ID || id == filtered[0].ID {
			require.Equal(t, redisstream.Consumer(crashed), p.Consumer)
		} else {
			require.Equal(t, redisstream.ParkConsumer, p.Consumer, "passed over by the filtered read")
		}
	}

	// While the leases live the survivor sees only the unleased rest.
	rest, err := survivor.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, rest, 2)
	for _, r := range rest {
		require.NoError(t, survivor.Release(ctx, r))
	}

	time.Sleep(ttl + ttl/2)
	took, err := survivor.Fetch(ctx, d, broker.Filter{Classes: []classify.Class{classify.ClassCRSMismatch}}, 10)
	require.NoError(t, err)
	require.Equal(t, ids(filtered), ids(took), "a filtered fetch takes over the matching expired entry")
	require.Equal(t, 2, took[0].Deliveries)
	require.Equal(t, 2, took[0].Message.DeliveryAttempt)
	again, err := survivor.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, again, 5)
	require.Equal(t, ids(held), ids(again[:3]), "the crashed consumer's entries first, oldest first")
	for i, r := range again {
		require.Equal(t, 2, r.Deliveries, "record %d", i)
		require.Equal(t, redisstream.Consumer(survivor), pending(t, survivor, d)[r.ID].Consumer)
		if i > 0 {
			require.Less(t, idLess(again[i-1].ID, r.ID), 0, "ascending ids")
		}
	}
	for _, r := range append(held, filtered...) {
		require.ErrorIs(t, crashed.Ack(ctx, r), broker.ErrLeaseLost, "the crashed consumer's lease is lost")
		require.ErrorIs(t, crashed.Release(ctx, r), broker.ErrLeaseLost)
	}
	for _, r := range append(again, took...) {
		require.NoError(t, survivor.Ack(ctx, r))
	}
	n, err := redisstream.Len(ctx, survivor, d)
	require.NoError(t, err)
	require.Zero(t, n)
}

func idLess(a, b string) int {
	ams, aseq, _ := strings.Cut(a, "-")
	bms, bseq, _ := strings.Cut(b, "-")
	x, _ := strconv.ParseUint(ams, 10, 64)
	y, _ := strconv.ParseUint(bms, 10, 64)
	if x != y {
		if x < y {
			return -1
		}
		return 1
	}
	p, _ := strconv.ParseUint(aseq, 10, 64)
	q, _ := strconv.ParseUint(bseq, 10, 64)
	switch {
	case p < q:
		return -1
	case p > q:
		return 1
	}
	return 0
}

// Every way of losing a lease is detected on Ack and Release, and a lease
// that merely expired without a takeover can still be settled.
func TestLostLease(t *testing.T) {
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	o := lease(uniquePrefix(t), ttl)
	a, b := open(t, o), open(t, o)
	d := "lease"
	publishN(t, a, d, 4)
	recs, err := a.Fetch(ctx, d, broker.Filter{}, 4)
	require.NoError(t, err)
	require.Len(t, recs, 4)

	t.Run("taken over after expiry", func(t *testing.T) {
		time.Sleep(ttl + ttl/2)
		took, err := b.Fetch(ctx, d, broker.Filter{}, 1)
		require.NoError(t, err)
		require.Equal(t, recs[0].ID, took[0].ID)
		require.ErrorIs(t, a.Ack(ctx, recs[0]), broker.ErrLeaseLost)
		require.NoError(t, b.Ack(ctx, took[0]))
	})
	t.Run("expired without takeover", func(t *testing.T) {
		require.NoError(t, a.Ack(ctx, recs[1]), "nobody took it over: the holder may still ack")
	})
	t.Run("already acknowledged", func(t *testing.T) {
		require.ErrorIs(t, a.Ack(ctx, recs[1]), broker.ErrLeaseLost)
		require.ErrorIs(t, a.Release(ctx, recs[1]), broker.ErrLeaseLost)
	})
	t.Run("released", func(t *testing.T) {
		require.NoError(t, a.Release(ctx, recs[2]))
		require.ErrorIs(t, a.Ack(ctx, recs[2]), broker.ErrLeaseLost, "a released lease is gone")
		again, err := a.Fetch(ctx, d, broker.Filter{}, 1)
		require.NoError(t, err)
		require.Equal(t, recs[2].ID, again[0].ID)
		require.NotEqual(t, recs[2].Lease, again[0].Lease, "the same consumer's new lease differs")
		require.ErrorIs(t, a.Ack(ctx, recs[2]), broker.ErrLeaseLost, "the old lease stays lost")
		require.NoError(t, a.Ack(ctx, again[0]))
	})
	t.Run("settled through another handle", func(t *testing.T) {
		require.NoError(t, b.Ack(ctx, recs[3]), "the lease, not the handle, is what counts")
	})
	t.Run("forged", func(t *testing.T) {
		publishN(t, a, d, 1)
		r, err := a.Fetch(ctx, d, broker.Filter{}, 1)
		require.NoError(t, err)
		for _, l := range []string{"", "x", "1:", "1:" + redisstream.ParkConsumer, "2:" + redisstream.Consumer(a), "1:" + redisstream.Consumer(b), "-1:" + redisstream.Consumer(a)} {
			f := *r[0]
			f.Lease = l
			require.ErrorIs(t, a.Ack(ctx, &f), broker.ErrLeaseLost, "lease %q", l)
		}
		gone := *r[0]
		gone.Destination = "elsewhere"
		require.ErrorIs(t, a.Ack(ctx, &gone), broker.ErrLeaseLost, "no such stream")
		require.NoError(t, a.Ack(ctx, r[0]))
	})
}

// Publish never trims: a stream keeps far more than asynq's 10,000
// entries, oldest included, with no MAXLEN in sight.
func TestNoTrimming(t *testing.T) {
	ctx := context.Background()
	s := open(t, redisstream.Options{Prefix: uniquePrefix(t)})
	d := "notrim"
	const n = 10_500
	var g errGroup
	for w := range 8 {
		g.Go(func() error {
			for i := w; i < n; i += 8 {
				if err := s.Publish(ctx, d, &broker.Message{Body: []byte("entry " + strconv.Itoa(i))}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	got, err := redisstream.Len(ctx, s, d)
	require.NoError(t, err)
	require.EqualValues(t, n, got)
	first, err := redisstream.Client(s).XRangeN(ctx, redisstream.StreamKey(s, d), "-", "+", 1).Result()
	require.NoError(t, err)
	require.Len(t, first, 1)
	info, err := redisstream.Client(s).XInfoStream(ctx, redisstream.StreamKey(s, d)).Result()
	require.NoError(t, err)
	require.Equal(t, first[0].ID, info.FirstEntry.ID)
	require.EqualValues(t, n, info.EntriesAdded, "every write is still there: nothing was trimmed")
}

// With MaxEntries set, a full stream refuses writes with a typed error
// and keeps every entry; the check and the XADD are atomic, so concurrent
// writers never overshoot the limit; replaying makes room again.
func TestMaxEntriesRefusesInsteadOfTrimming(t *testing.T) {
	ctx := context.Background()
	const limit = 20
	s := open(t, redisstream.Options{Prefix: uniquePrefix(t), MaxEntries: limit})
	d := "full"

	var ok, full atomic.Int32
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			err := s.Publish(ctx, d, &broker.Message{Body: []byte("entry " + strconv.Itoa(i))})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, redisstream.ErrStoreFull):
				full.Add(1)
			default:
				t.Errorf("Publish: %v", err)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, limit, ok.Load(), "exactly the limit was written")
	require.EqualValues(t, 40, full.Load())
	n, err := redisstream.Len(ctx, s, d)
	require.NoError(t, err)
	require.EqualValues(t, limit, n)

	err = s.Publish(ctx, d, &broker.Message{Body: []byte("one more")})
	var sf *redisstream.StoreFullError
	require.ErrorAs(t, err, &sf)
	require.Equal(t, redisstream.StoreFullError{Destination: d, Entries: limit, Limit: limit}, *sf)
	require.Contains(t, err.Error(), "nothing is trimmed")
	require.NotErrorIs(t, err, classify.ErrTooLarge)

	recs, err := s.Fetch(ctx, d, broker.Filter{}, 1)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, recs[0]))
	require.NoError(t, s.Publish(ctx, d, &broker.Message{Body: []byte("room again")}), "an acknowledged entry frees its place")
	all, err := s.Fetch(ctx, d, broker.Filter{}, 100)
	require.NoError(t, err)
	require.Len(t, all, limit, "the oldest entries were not dropped for the new one")
	require.Equal(t, "room again", string(all[len(all)-1].Message.Body))
}

// By default Ack deletes the entry; KeepAcked leaves it in the stream,
// never redelivered to the group that acknowledged it.
func TestKeepAcked(t *testing.T) {
	ctx := context.Background()
	prefix := uniquePrefix(t)
	for _, keep := range []bool{false, true} {
		t.Run("keep="+strconv.FormatBool(keep), func(t *testing.T) {
			const ttl = 100 * time.Millisecond
			s := open(t, redisstream.Options{Prefix: prefix, StoreOptions: broker.StoreOptions{LeaseTTL: ttl}, KeepAcked: keep})
			d := "keep-" + strconv.FormatBool(keep)
			publishN(t, s, d, 3)
			recs, err := s.Fetch(ctx, d, broker.Filter{}, 10)
			require.NoError(t, err)
			for _, r := range recs {
				require.NoError(t, s.Ack(ctx, r))
			}
			n, err := redisstream.Len(ctx, s, d)
			require.NoError(t, err)
			if keep {
				require.EqualValues(t, 3, n, "kept in the stream")
			} else {
				require.Zero(t, n, "deleted on ack")
			}
			time.Sleep(2 * ttl)
			recs, err = open(t, lease(prefix, ttl)).Fetch(ctx, d, broker.Filter{}, 10)
			require.NoError(t, err)
			require.Empty(t, recs, "never redelivered to the group")
			require.Empty(t, pending(t, s, d))
		})
	}
}

// Release makes an entry available to every consumer at once, keeping
// its delivery count; parking a filtered-out entry does not count as a
// delivery.
func TestReleaseIsImmediate(t *testing.T) {
	ctx := context.Background()
	o := lease(uniquePrefix(t), time.Hour)
	a, b := open(t, o), open(t, o)
	d := "release"
	publishN(t, a, d, 2)
	recs, err := a.Fetch(ctx, d, broker.Filter{}, 2)
	require.NoError(t, err)
	require.NoError(t, a.Release(ctx, recs[1]))
	p := pending(t, a, d)[recs[1].ID]
	require.Equal(t, redisstream.ParkConsumer, p.Consumer)
	require.EqualValues(t, 1, p.RetryCount)
	require.Greater(t, p.Idle, 24*time.Hour, "idle for decades: claimable by any lease TTL")
	got, err := b.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Equal(t, []string{recs[1].ID}, ids(got), "available at once to another consumer, while recs[0] stays leased")
	require.Equal(t, 2, got[0].Deliveries)
	require.NoError(t, b.Ack(ctx, got[0]))
	require.NoError(t, a.Ack(ctx, recs[0]))
}

// Bodies, keys and headers come back byte for byte: every byte value, a
// nil key versus an empty one, header names with colons and binary
// values, an empty body.
func TestExactBytes(t *testing.T) {
	ctx := context.Background()
	s := open(t, redisstream.Options{Prefix: uniquePrefix(t)})
	d := "bytes"
	all := make([]byte, 256*4)
	for i := range all {
		all[i] = byte(i)
	}
	msgs := []*broker.Message{
		{Body: all, Key: all[:300], Headers: map[string]string{"h:odd": "\x00\xff", "": "empty name", "x": ""}},
		{Body: []byte{}, Key: []byte{}},
		{Body: []byte("nil key"), Key: nil},
		{Body: []byte(`{"schema_version":"dlq.v1"`)},
	}
	for _, m := range msgs {
		require.NoError(t, s.Publish(ctx, d, m))
	}
	recs, err := s.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, len(msgs))
	for i, r := range recs {
		require.Equal(t, msgs[i].Body, r.Message.Body, "body %d", i)
		require.Equal(t, msgs[i].Key, r.Message.Key, "key %d", i)
		require.Equal(t, msgs[i].Key == nil, r.Message.Key == nil, "key %d nil-ness", i)
		if len(msgs[i].Headers) == 0 {
			require.Nil(t, r.Message.Headers)
		} else {
			require.Equal(t, msgs[i].Headers, r.Message.Headers)
		}
		require.Equal(t, 1, r.Message.DeliveryAttempt)
		require.NoError(t, s.Ack(ctx, r))
	}
	require.Equal(t, 64<<20, s.MaxMessageBytes(d), "the default limit")
}

// Entries are indexed for filtering, and readable with XRANGE.
func TestEntryLayout(t *testing.T) {
	ctx := context.Background()
	s := open(t, redisstream.Options{Prefix: uniquePrefix(t)})
	d := "layout"
	m := brokertest.Message(t, brokertest.SampleInputs()[0])
	require.NoError(t, s.Publish(ctx, d, m))
	e, err := redisstream.Client(s).XRange(ctx, redisstream.StreamKey(s, d), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, e, 1)
	v := e[0].Values
	require.Equal(t, "1", v["v"])
	require.Equal(t, "1", v["env"])
	require.Equal(t, "invalid_geometry", v["class"])
	require.Equal(t, "topology_validation", v["stage"])
	require.Equal(t, "0.5", v["loc_x"])
	require.Equal(t, "0.5", v["loc_y"])
	require.Equal(t, string(m.Body), v["body"])
	require.Equal(t, "parcel-7", v["key"])
	require.Equal(t, m.Headers[broker.HeaderIdempotencyKey], v["h:"+broker.HeaderIdempotencyKey])
	require.Equal(t, "1767323045", v["dlq_at_s"])
	require.Equal(t, "6000", v["dlq_at_ns"])
	require.True(t, strings.HasPrefix(redisstream.StreamKey(s, d), redisstream.StreamKey(s, "")), "stream key is <prefix>:<destination>")
}

// WAIT and WAITAOF: a write the server cannot confirm fails Publish with
// ErrDurabilityUnconfirmed (the entry is written, the source must not be
// acknowledged) instead of claiming a durability it does not have.
func TestWaitForDurability(t *testing.T) {
	ctx := context.Background()
	client := newClient(t)
	prefix := uniquePrefix(t)
	info, err := client.Info(ctx, "replication", "server", "persistence").Result()
	require.NoError(t, err)
	replicas := infoInt(info, "connected_slaves")
	aof := infoInt(info, "aof_enabled") == 1
	major, minor := version(infoField(info, "redis_version"))
	waitAOFWorks := aof && (major > 7 || major == 7 && minor >= 2)

	tests := []struct {
		name string
		o    redisstream.Options
		ok   bool
	}{
		{"wait for a replica", redisstream.Options{WaitReplicas: replicas + 1, WaitTimeout: 50 * time.Millisecond}, false},
		{"wait for the replicas there are", redisstream.Options{WaitReplicas: max(replicas, 1), WaitTimeout: 50 * time.Millisecond}, replicas >= 1},
		{"waitaof", redisstream.Options{WaitAOF: true, WaitTimeout: 500 * time.Millisecond}, waitAOFWorks},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Prefix = prefix
			s, err := redisstream.New(client, &tc.o)
			require.NoError(t, err)
			d := "wait" + strconv.Itoa(i)
			err = s.Publish(ctx, d, &broker.Message{Body: []byte("x")})
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, redisstream.ErrDurabilityUnconfirmed)
			}
			n, err := redisstream.Len(ctx, s, d)
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "the entry is written either way, exactly once")
		})
	}

	t.Run("refused by MaxEntries before waiting", func(t *testing.T) {
		s, err := redisstream.New(client, &redisstream.Options{Prefix: prefix, MaxEntries: 1, WaitReplicas: replicas + 1, WaitTimeout: 50 * time.Millisecond})
		require.NoError(t, err)
		require.ErrorIs(t, s.Publish(ctx, "wait0", &broker.Message{Body: []byte("y")}), redisstream.ErrStoreFull)
	})
	t.Run("needs a known client type", func(t *testing.T) {
		_, err := redisstream.New(wrapped{client}, &redisstream.Options{WaitReplicas: 1})
		require.Error(t, err)
		_, err = redisstream.New(wrapped{client}, nil)
		require.NoError(t, err, "without WAIT any UniversalClient does")
	})
}

type wrapped struct{ redis.UniversalClient }

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

func infoInt(info, name string) int {
	n, _ := strconv.Atoi(infoField(info, name))
	return n
}

func version(v string) (major, minor int) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) >= 2 {
		major, _ = strconv.Atoi(parts[0])
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}

// Close removes an idle consumer from the group, keeps one that still
// holds leases (its entries must be taken over, not dropped), and makes
// later calls fail with ErrClosed.
func TestClose(t *testing.T) {
	ctx := context.Background()
	o := redisstream.Options{Prefix: uniquePrefix(t)}
	idle, holding := open(t, o), open(t, o)
	d := "close"
	publishN(t, idle, d, 2)
	recs, err := idle.Fetch(ctx, d, broker.Filter{}, 1)
	require.NoError(t, err)
	require.NoError(t, idle.Ack(ctx, recs[0]))
	held, err := holding.Fetch(ctx, d, broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, held, 1)

	require.NoError(t, idle.Close())
	require.NoError(t, holding.Close())
	require.NoError(t, holding.Close(), "Close is idempotent")
	consumers, err := redisstream.Client(idle).XInfoConsumers(ctx, redisstream.StreamKey(idle, d), redisstream.Group(idle)).Result()
	require.NoError(t, err)
	var names []string
	for _, c := range consumers {
		names = append(names, c.Name)
	}
	require.NotContains(t, names, redisstream.Consumer(idle))
	require.Contains(t, names, redisstream.Consumer(holding))

	require.ErrorIs(t, idle.Publish(ctx, d, &broker.Message{}), broker.ErrClosed)
	_, err = idle.Fetch(ctx, d, broker.Filter{}, 1)
	require.ErrorIs(t, err, broker.ErrClosed)
	require.ErrorIs(t, holding.Ack(ctx, held[0]), broker.ErrClosed)
}

// A stream deleted under the store (an operator's DEL) takes its group
// with it; the next Fetch recreates the group and reads from the start.
func TestStreamDeletedAndRecreated(t *testing.T) {
	ctx := context.Background()
	s := open(t, redisstream.Options{Prefix: uniquePrefix(t)})
	d := "recreate"
	recs, err := s.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Empty(t, recs)
	exists, err := redisstream.Client(s).Exists(ctx, redisstream.StreamKey(s, d)).Result()
	require.NoError(t, err)
	require.Zero(t, exists, "fetching an unknown destination creates nothing")
	publishN(t, s, d, 2)
	recs, err = s.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.NoError(t, redisstream.Client(s).Del(ctx, redisstream.StreamKey(s, d)).Err())
	require.ErrorIs(t, s.Ack(ctx, recs[0]), broker.ErrLeaseLost, "the entry is gone")
	publishN(t, s, d, 1)
	recs, err = s.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.NoError(t, s.Ack(ctx, recs[0]))
}

func TestOptionsAndArguments(t *testing.T) {
	ctx := context.Background()
	client := newClient(t)
	_, err := redisstream.New(nil, nil)
	require.Error(t, err)
	for _, o := range []redisstream.Options{
		{Consumer: redisstream.ParkConsumer}, {StoreOptions: broker.StoreOptions{LeaseTTL: -1}},
		{StoreOptions: broker.StoreOptions{LeaseTTL: time.Microsecond}}, {StoreOptions: broker.StoreOptions{MaxMessageBytes: -1}},
		{MaxEntries: -1}, {WaitReplicas: -1}, {WaitTimeout: -1}, {DedupWindow: time.Microsecond},
	} {
		_, err := redisstream.New(client, &o)
		require.ErrorIs(t, err, broker.ErrInvalidArgument, "%+v", o)
	}
	s, err := redisstream.New(client, nil)
	require.NoError(t, err)
	require.Equal(t, redisstream.DefaultGroup, redisstream.Group(s))
	require.Equal(t, "geodlq:x", redisstream.StreamKey(s, "x"))
	require.NotEmpty(t, redisstream.Consumer(s))
	s2, err := redisstream.New(client, nil)
	require.NoError(t, err)
	require.NotEqual(t, redisstream.Consumer(s), redisstream.Consumer(s2), "default consumer names are unique per handle")

	var uc redis.UniversalClient
	require.True(t, s.As(&uc))
	require.Same(t, client, uc.(*redis.Client))
	var c *redis.Client
	require.True(t, s.As(&c))
	require.Same(t, client, c)
	var cc *redis.ClusterClient
	require.False(t, s.As(&cc))
	var r *redis.Ring
	require.False(t, s.As(&r))
	require.False(t, s.As(new(int)))
	require.Same(t, client, redisstream.Client(s).(*redis.Client))

	s = open(t, redisstream.Options{Prefix: uniquePrefix(t)})
	require.Error(t, s.Publish(ctx, "", &broker.Message{}), "empty destination")
	require.Error(t, s.Publish(ctx, "d", nil), "nil message")
	require.Error(t, s.Ack(ctx, nil), "nil record")
	recs, err := s.Fetch(ctx, "d", broker.Filter{}, 0)
	require.NoError(t, err)
	require.Empty(t, recs)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, s.Ack(canceled, &broker.Record{Destination: "d", ID: "1-1", Lease: "1:x"}), context.Canceled)

	// The size limit is on the body; it is checked before any I/O.
	small := open(t, redisstream.Options{Prefix: uniquePrefix(t), StoreOptions: broker.StoreOptions{MaxMessageBytes: 10}})
	require.Equal(t, 10, small.MaxMessageBytes("d"))
	err = small.Publish(ctx, "d", &broker.Message{Body: make([]byte, 11)})
	var tl *classify.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, classify.TooLargeError{What: "message", Destination: "d", Size: 11, Limit: 10}, *tl)
}

// ptr returns a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }
