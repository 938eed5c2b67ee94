package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
)

// listAll pages through List and returns "dest/id" of every entry.
func listAll(t *testing.T, s *broker.Store, o broker.ListOptions) []string {
	t.Helper()
	var out []string
	require.NoError(t, s.ScanAll(context.Background(), o, func(e broker.Entry) error {
		require.Empty(t, e.Record.Lease, "listing leases nothing")
		out = append(out, e.Record.Destination+"/"+e.Record.ID)
		return nil
	}))
	return out
}

// streamOrder returns "dest/id" of every entry of dests, ordered by id
// then destination: the order List merges destinations in.
func streamOrder(t *testing.T, s *broker.Store, dests ...string) []string {
	t.Helper()
	type item struct {
		ms, seq  uint64
		dest, id string
	}
	var items []item
	for _, d := range dests {
		xs, err := redisstream.Client(s).XRange(context.Background(), redisstream.StreamKey(s, d), "-", "+").Result()
		require.NoError(t, err)
		for _, x := range xs {
			var it item
			_, err := fmt.Sscanf(x.ID, "%d-%d", &it.ms, &it.seq)
			require.NoError(t, err)
			it.dest, it.id = d, x.ID
			items = append(items, it)
		}
	}
	slices.SortFunc(items, func(a, b item) int {
		switch {
		case a.ms != b.ms:
			return cmpU(a.ms, b.ms)
		case a.seq != b.seq:
			return cmpU(a.seq, b.seq)
		}
		return cmpS(a.dest, b.dest)
	})
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.dest + "/" + it.id
	}
	return out
}

func cmpU(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}

func cmpS(a, b string) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// List merges destinations by stream id in both orders with any page
// size, reads statuses from the group without leasing anything, and
// hides acknowledged entries kept by KeepAcked unless asked.
func TestListAcrossDestinations(t *testing.T) {
	ctx := context.Background()
	prefix := uniquePrefix(t)
	o := redisstream.Options{Prefix: prefix, KeepAcked: true, StoreOptions: broker.StoreOptions{LeaseTTL: time.Hour}}
	s := open(t, o)
	for i := range 4 {
		publishN(t, s, "a", 2)
		publishN(t, s, "b", 1)
		if i == 1 {
			publishN(t, s, "c", 1)
		}
	}
	all := streamOrder(t, s, "a", "b", "c")
	require.Len(t, all, 13)
	ds, err := s.Destinations(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, ds)

	for _, limit := range []int{1, 2, 5, 13, 100} {
		require.Equal(t, all, listAll(t, s, broker.ListOptions{Limit: limit}), "oldest first, %d a page", limit)
		rev := listAll(t, s, broker.ListOptions{Limit: limit, Descending: true})
		slices.Reverse(rev)
		require.Equal(t, all, rev, "newest first, %d a page", limit)
	}

	// Statuses: leased, released (pending), acknowledged (replayed),
	// passed over by a filtered fetch (pending), expired (pending).
	other := open(t, redisstream.Options{Prefix: prefix, KeepAcked: true, StoreOptions: broker.StoreOptions{LeaseTTL: 50 * time.Millisecond}})
	recs, err := s.Fetch(ctx, "a", broker.Filter{}, 3)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, recs[1]))
	require.NoError(t, s.Ack(ctx, recs[2]))
	expired, err := other.Fetch(ctx, "b", broker.Filter{}, 1)
	require.NoError(t, err)
	_, err = s.Fetch(ctx, "c", broker.Filter{Classes: []classify.Class{classify.ClassResourceExhausted}}, 1)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	owners := func() map[string]string {
		out := map[string]string{}
		for id, p := range pending(t, s, "a") {
			out[id] = p.Consumer + "/" + strconv.FormatInt(p.RetryCount, 10)
		}
		return out
	}
	before := owners()

	status := map[string]broker.Status{}
	deliveries := map[string]int{}
	require.NoError(t, s.ScanAll(ctx, broker.ListOptions{IncludeReplayed: true, Limit: 4}, func(e broker.Entry) error {
		status[e.Record.Destination+"/"+e.Record.ID] = e.Status
		deliveries[e.Record.ID] = e.Record.Deliveries
		require.WithinDuration(t, time.Now(), e.PublishedAt, time.Minute)
		require.NotNil(t, e.Record.Envelope, "envelopes are decoded")
		return nil
	}))
	require.Len(t, status, 13)
	require.Equal(t, broker.StatusLeased, status["a/"+recs[0].ID])
	require.Equal(t, 1, deliveries[recs[0].ID])
	require.Equal(t, broker.StatusPending, status["a/"+recs[1].ID], "released")
	require.Equal(t, broker.StatusReplayed, status["a/"+recs[2].ID], "acknowledged, kept")
	require.Equal(t, broker.StatusLeased, status["b/"+expired[0].ID], "this store would not take it over for an hour")
	for id, st := range status {
		if id != "a/"+recs[0].ID && id != "a/"+recs[2].ID && id != "b/"+expired[0].ID {
			require.Equal(t, broker.StatusPending, st, id)
		}
	}
	p, err := other.List(ctx, broker.ListOptions{Destination: "b", Filter: broker.Filter{IDs: []string{expired[0].ID}}})
	require.NoError(t, err)
	require.Equal(t, broker.StatusPending, p.Entries[0].Status, "its lease expired for a store of a 50ms lease")
	require.Equal(t, before, owners(), "listing changed no pending entry")

	withoutReplayed := listAll(t, s, broker.ListOptions{Limit: 3})
	require.Len(t, withoutReplayed, 12)
	require.NotContains(t, withoutReplayed, "a/"+recs[2].ID)

	p, err = s.List(ctx, broker.ListOptions{Destination: "a", Filter: broker.Filter{IDs: []string{recs[0].ID, "nonsense", "9-9"}}})
	require.NoError(t, err)
	require.Len(t, p.Entries, 1)
	require.Equal(t, recs[0].ID, p.Entries[0].Record.ID)

	for _, bad := range []string{"x", "1-2", "1/a", "-1-2/a", "1-x/a"} {
		_, err := s.List(ctx, broker.ListOptions{After: bad})
		require.ErrorIs(t, err, broker.ErrInvalidArgument, "cursor %q", bad)
	}

	// An emptied destination is not listed.
	gone := open(t, redisstream.Options{Prefix: prefix})
	rest, err := gone.Fetch(ctx, "c", broker.Filter{}, 10)
	require.NoError(t, err)
	for _, r := range rest {
		require.NoError(t, gone.Ack(ctx, r))
	}
	ds, err = s.Destinations(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, ds)
}

// A selective filter over a long stream pages on with short pages
// instead of examining the whole stream at once, and finds the match.
func TestListFilterPagesPastTheBudget(t *testing.T) {
	ctx := context.Background()
	s := open(t, redisstream.Options{Prefix: uniquePrefix(t), DedupWindow: -1})
	d := "sparse"
	var g errGroup
	for w := range 4 {
		g.Go(func() error {
			for i := w; i < 2500; i += 4 {
				if err := s.Publish(ctx, d, &broker.Message{Body: []byte("filler " + strconv.Itoa(i))}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	target := brokertest.Message(t, brokertest.SampleInputs()[4])
	require.NoError(t, s.Publish(ctx, d, target))
	f := broker.Filter{Classes: []classify.Class{classify.ClassCRSMismatch}}
	first, err := s.List(ctx, broker.ListOptions{Destination: d, Filter: f, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, first.Entries, "the first page examined a budget of fillers")
	require.NotEmpty(t, first.Next)
	var found []string
	require.NoError(t, s.ScanAll(ctx, broker.ListOptions{Destination: d, Filter: f, Limit: 10}, func(e broker.Entry) error {
		found = append(found, string(e.Record.Message.Body))
		return nil
	}))
	require.Equal(t, []string{string(target.Body)}, found)
	counts, err := s.Stats(ctx, broker.StatsOptions{Destination: d})
	require.NoError(t, err)
	total := 0
	for _, c := range counts {
		total += c.Total()
	}
	require.Equal(t, 2501, total, "Stats counts by listing")
}

// A RawKeys store has no catalog: it lists one named destination.
func TestListRawKeys(t *testing.T) {
	ctx := context.Background()
	client := newClient(t)
	stream := uniquePrefix(t) + ":events"
	require.NoError(t, client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"body", "x"}}).Err())
	s, err := redisstream.New(client, &redisstream.Options{RawKeys: true})
	require.NoError(t, err)
	_, err = s.Destinations(ctx)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = s.List(ctx, broker.ListOptions{})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	p, err := s.List(ctx, broker.ListOptions{Destination: stream})
	require.NoError(t, err)
	require.Len(t, p.Entries, 1)
	require.Equal(t, "x", string(p.Entries[0].Record.Message.Body))
	require.Equal(t, broker.StatusPending, p.Entries[0].Status)
}

// offloaded returns envelopes whose geometry was offloaded: even ones
// share one blob, odd ones another.
func offloaded(t *testing.T, n int) []*broker.Message {
	t.Helper()
	ctx := context.Background()
	off, err := offload.New(offload.NewMemStore(), &offload.Options{Threshold: 16})
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	var msgs []*broker.Message
	for i := range n {
		_, body, err := b.Build(ctx, envelope.Input{
			Payload:        fmt.Appendf(nil, `{"event_id":"evt-purge-%d","geometry":{"type":"LineString","coordinates":[[0,0],[%d,1],[2,2]]}}`, i, i%2),
			IdempotencyKey: fmt.Sprintf("idem:test:purge:%d:%d", i, published.Add(1)), Err: classify.InvalidGeometry(errors.New("x")),
		})
		require.NoError(t, err)
		msgs = append(msgs, &broker.Message{Body: body})
	}
	return msgs
}

// Purge deletes acknowledged entries kept by KeepAcked by default, and
// with IncludePending parked and expired ones too (taking them off the
// pending list), never an entry under a live lease; a blob another
// destination still references is not orphaned.
func TestPurge(t *testing.T) {
	ctx := context.Background()
	prefix := uniquePrefix(t)
	const ttl = time.Second
	s := open(t, redisstream.Options{Prefix: prefix, KeepAcked: true, StoreOptions: broker.StoreOptions{LeaseTTL: ttl}})
	holder := open(t, redisstream.Options{Prefix: prefix, KeepAcked: true, StoreOptions: broker.StoreOptions{LeaseTTL: ttl}})
	msgs := offloaded(t, 7)
	for _, m := range msgs[:6] {
		require.NoError(t, s.Publish(ctx, "d", m))
	}
	require.NoError(t, s.Publish(ctx, "keep", msgs[6])) // references the even blob
	recs, err := s.Fetch(ctx, "d", broker.Filter{}, 6)
	require.NoError(t, err)
	require.Len(t, recs, 6)
	require.NoError(t, s.Ack(ctx, recs[0]))     // replayed (even blob)
	require.NoError(t, s.Ack(ctx, recs[1]))     // replayed (odd blob)
	require.NoError(t, s.Release(ctx, recs[2])) // parked: pending
	require.NoError(t, s.Release(ctx, recs[3]))
	time.Sleep(ttl + 100*time.Millisecond)                  // recs[4] and recs[5]: expired leases
	live, err := holder.Fetch(ctx, "d", broker.Filter{}, 1) // recs[2]: a live lease
	require.NoError(t, err)
	require.Equal(t, recs[2].ID, live[0].ID)

	even, odd := blobOf(t, msgs[0]), blobOf(t, msgs[1])
	until := broker.Filter{Until: time.Now().Add(time.Hour)}
	res, err := s.Purge(ctx, broker.PurgeRequest{Destination: "d", Filter: until})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{recs[0].ID, recs[1].ID}, res.IDs, "only acknowledged entries by default")
	require.ElementsMatch(t, []string{even, odd}, res.BlobURIs)
	require.Empty(t, res.Orphaned, "both blobs are still referenced")

	dry, err := s.Purge(ctx, broker.PurgeRequest{Filter: until, IncludePending: true, DryRun: true})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"d/" + recs[3].ID, "d/" + recs[4].ID, "d/" + recs[5].ID, "keep/" + mustID(t, s, "keep")}, dry.IDs,
		"every destination, with their names; never the live lease")
	require.Equal(t, []string{odd}, dry.Orphaned, "the live lease still references the even blob")

	res, err = s.Purge(ctx, broker.PurgeRequest{Destination: "d", Filter: until, IncludePending: true})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{recs[3].ID, recs[4].ID, recs[5].ID}, res.IDs)
	require.Equal(t, []string{odd}, res.Orphaned, "the even blob is referenced by the live lease and the other destination")
	for id := range pending(t, s, "d") {
		require.Equal(t, recs[2].ID, id, "deleted entries left the pending list; the live lease stays")
	}
	require.ErrorIs(t, s.Ack(ctx, recs[4]), broker.ErrLeaseLost, "the expired holder's entry is gone")
	require.NoError(t, holder.Ack(ctx, live[0]), "the live lease was never touched")
	n, err := redisstream.Len(ctx, s, "d")
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "recs[2], acknowledged and kept")
}

func mustID(t *testing.T, s *broker.Store, d string) string {
	t.Helper()
	p, err := s.List(context.Background(), broker.ListOptions{Destination: d})
	require.NoError(t, err)
	require.Len(t, p.Entries, 1)
	return p.Entries[0].Record.ID
}

// blobOf returns the offload URI of the geometry of m's envelope.
func blobOf(t *testing.T, m *broker.Message) string {
	t.Helper()
	env, err := envelope.Decode(m.Body)
	require.NoError(t, err)
	require.NotEmpty(t, env.Geometry.OffloadURI)
	return env.Geometry.OffloadURI
}
