package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/kafka"
	"github.com/geodlq/geodlq/classify"
)

// listIDs pages through a listing and returns the record ids.
func listIDs(t *testing.T, s *broker.Store, opts broker.ListOptions) []string {
	t.Helper()
	var ids []string
	require.NoError(t, s.ScanAll(context.Background(), opts, func(e broker.Entry) error {
		ids = append(ids, e.Record.ID)
		return nil
	}))
	return ids
}

// readOnly opens the cluster by URL, read-only.
func (c *cluster) readOnly() *broker.Store {
	c.t.Helper()
	s, err := broker.OpenStore(context.Background(), "kafka://"+strings.Join(c.c.Addrs(), ","), &broker.OpenOptions{ReadOnly: true})
	require.NoError(c.t, err)
	c.t.Cleanup(func() { _ = s.Close() })
	return s
}

// Listing reads without a group: it leases nothing, commits nothing,
// creates no group, and works on a store opened read-only; acknowledged
// records are replayed, and listed only when asked for.
func TestListStatuses(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(readerOpts(1))
	d := unique("statuses") + ".poison.dlt"
	for _, m := range brokertest.Messages(t, brokertest.FilterInputs()[:6]) {
		require.NoError(t, s.Publish(ctx, d, m))
	}
	ro := c.readOnly()
	require.Equal(t, []string{"0/0", "0/1", "0/2", "0/3", "0/4", "0/5"}, listIDs(t, ro, broker.ListOptions{Destination: d, Limit: 4}))
	groups, err := c.admin().ListGroups(ctx)
	require.NoError(t, err)
	require.Empty(t, groups.Groups(), "listing joined no group")

	// Acknowledge 0/3 and 0/4 (past the unacknowledged 0/0: commit
	// metadata) and lease 0/5.
	only := broker.Filter{Classes: []classify.Class{classify.ClassCRSMismatch}}
	got, err := s.Fetch(ctx, d, only, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	for _, r := range got {
		require.NoError(t, s.Ack(ctx, r))
	}
	held, err := s.Fetch(ctx, d, broker.Filter{IDs: []string{"0/5"}}, 10)
	require.NoError(t, err)
	require.Len(t, held, 1)

	// The store that acknowledged sees its acks at once (it commits before
	// it lists), and its own lease.
	statuses := func(s *broker.Store, replayed bool) map[string]broker.Status {
		out := map[string]broker.Status{}
		require.NoError(t, s.ScanAll(ctx, broker.ListOptions{Destination: d, IncludeReplayed: replayed, Limit: 2}, func(e broker.Entry) error {
			out[e.Record.ID] = e.Status
			return nil
		}))
		return out
	}
	require.Equal(t, map[string]broker.Status{"0/0": broker.StatusPending, "0/1": broker.StatusPending, "0/2": broker.StatusPending, "0/5": broker.StatusLeased},
		statuses(s, false))
	require.Equal(t, map[string]broker.Status{"0/0": broker.StatusPending, "0/1": broker.StatusPending, "0/2": broker.StatusPending,
		"0/3": broker.StatusReplayed, "0/4": broker.StatusReplayed, "0/5": broker.StatusLeased}, statuses(s, true))
	// Another process sees the acknowledgements too, and other leases as
	// pending.
	require.Equal(t, map[string]broker.Status{"0/0": broker.StatusPending, "0/1": broker.StatusPending, "0/2": broker.StatusPending,
		"0/3": broker.StatusReplayed, "0/4": broker.StatusReplayed, "0/5": broker.StatusPending}, statuses(ro, true))

	counts, err := ro.Stats(ctx, broker.StatsOptions{Destination: d})
	require.NoError(t, err)
	var pending, replayed int
	for _, n := range counts {
		pending += n.Pending
		replayed += n.Replayed
	}
	require.Equal(t, 4, pending)
	require.Equal(t, 2, replayed)

	// The read-only store wrote nothing and leases nothing.
	_, err = ro.Fetch(ctx, d, broker.Filter{}, 1)
	require.ErrorIs(t, err, broker.ErrReadOnly)
	require.ErrorIs(t, ro.Publish(ctx, d, &broker.Message{Body: []byte("x")}), broker.ErrReadOnly)
	groups, err = c.admin().ListGroups(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"geodlq-replay." + d}, groups.Groups(), "only the replaying store's group exists")
}

// Pages cover every record once in both directions, whatever the page
// size, across partitions and across gaps in the offsets (transaction
// markers), with records larger than the newest-first window, and with
// records written while paging.
func TestListPaging(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(&kafka.Options{Topics: &kafka.TopicOptions{Partitions: 3}})
	d := unique("paging") + ".retry.dlt"
	c.createTopic(d, 3)
	var want []string
	body := func(i, size int) []byte {
		b := []byte(fmt.Sprintf(`{"n":%d,"pad":"`, i))
		b = append(b, strings.Repeat("x", max(0, size-len(b)-2))...)
		return append(b, `"}`...)
	}
	// Small records through the store, large ones (300 KiB: the
	// newest-first window holds 1 MiB per partition), and a transaction
	// whose commit markers leave offsets without records.
	for i := range 40 {
		require.NoError(t, s.Publish(ctx, d, &broker.Message{Key: []byte("k" + strconv.Itoa(i%5)), Body: body(i, 100)}))
		want = append(want, strconv.Itoa(i))
	}
	for i := 40; i < 52; i++ {
		require.NoError(t, s.Publish(ctx, d, &broker.Message{Key: []byte("big"), Body: body(i, 300<<10)}))
		want = append(want, strconv.Itoa(i))
	}
	tx := c.client(kgo.TransactionalID(unique("tx")), kgo.ProducerBatchMaxBytes(1<<20))
	for round := range 3 {
		require.NoError(t, tx.BeginTransaction())
		for j := range 4 {
			i := 52 + round*4 + j
			r := &kgo.Record{Topic: d, Key: []byte("k" + strconv.Itoa(j)), Value: body(i, 50)}
			require.NoError(t, tx.ProduceSync(ctx, r).FirstErr())
			want = append(want, strconv.Itoa(i))
		}
		require.NoError(t, tx.EndTransaction(ctx, kgo.TryCommit))
	}
	seqOf := func(s *broker.Store, opts broker.ListOptions) []string {
		var seqs []string
		require.NoError(t, s.ScanAll(ctx, opts, func(e broker.Entry) error {
			b := e.Record.Message.Body
			n, _, _ := strings.Cut(strings.TrimPrefix(string(b), `{"n":`), ",")
			seqs = append(seqs, n)
			return nil
		}))
		return seqs
	}
	ro := c.readOnly()
	all := seqOf(ro, broker.ListOptions{Destination: d, Limit: 1000})
	require.ElementsMatch(t, want, all, "every record listed once")
	for _, limit := range []int{1, 3, 10} {
		require.Equal(t, all, seqOf(ro, broker.ListOptions{Destination: d, Limit: limit}), "pages of %d", limit)
		rev := seqOf(ro, broker.ListOptions{Destination: d, Limit: limit, Descending: true})
		slices.Reverse(rev)
		require.Equal(t, all, rev, "newest first, pages of %d", limit)
	}

	// A cursor is a position: records written after a page are listed by
	// the next pages, and nothing is listed twice.
	p, err := ro.List(ctx, broker.ListOptions{Destination: d, Limit: 20})
	require.NoError(t, err)
	require.Len(t, p.Entries, 20)
	require.NotEmpty(t, p.Next)
	for i := 64; i < 70; i++ {
		require.NoError(t, s.Publish(ctx, d, &broker.Message{Key: []byte("k" + strconv.Itoa(i%5)), Body: body(i, 100)}))
		want = append(want, strconv.Itoa(i))
	}
	seen := len(p.Entries)
	rest := seqOf(ro, broker.ListOptions{Destination: d, Limit: 7, After: p.Next})
	require.Len(t, rest, len(want)-seen)
	var first []string
	for _, e := range p.Entries {
		n, _, _ := strings.Cut(strings.TrimPrefix(string(e.Record.Message.Body), `{"n":`), ",")
		first = append(first, n)
	}
	require.ElementsMatch(t, want, append(first, rest...))

	// Retention deleting the start of a partition while a cursor points
	// there: the listing goes on from the new start.
	p, err = ro.List(ctx, broker.ListOptions{Destination: d, Limit: 1})
	require.NoError(t, err)
	del := kadm.Offsets{}
	for part := range int32(3) {
		del.Add(kadm.Offset{Topic: d, Partition: part, At: 2})
	}
	_, err = c.admin().DeleteRecords(ctx, del)
	require.NoError(t, err)
	after := seqOf(ro, broker.ListOptions{Destination: d, Limit: 5, After: p.Next})
	fresh := seqOf(ro, broker.ListOptions{Destination: d, Limit: 1000})
	require.Less(t, len(fresh), len(want), "retention deleted records")
	listed := strings.TrimSuffix(strings.TrimPrefix(string(p.Entries[0].Record.Message.Body), `{"n":`), ",")
	listed, _, _ = strings.Cut(listed, ",")
	require.Equal(t, slices.DeleteFunc(fresh, func(n string) bool { return n == listed }), after,
		"the cursor goes on from the partitions' new starts")
}

// A filter that matches little is still answered in bounded pieces: a
// page stops after 20,000 records examined and says where to go on.
func TestListScanBound(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	d := unique("scan") + ".poison.dlt"
	c.createTopic(d, 1)
	const n = 25_000
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: d, Value: []byte(`not an envelope`)}
	}
	c.produce(rs...)
	ro := c.readOnly()
	f := broker.Filter{Classes: []classify.Class{classify.ClassTransient}}
	p, err := ro.List(ctx, broker.ListOptions{Destination: d, Filter: f, Limit: 10})
	require.NoError(t, err)
	require.Empty(t, p.Entries)
	require.NotEmpty(t, p.Next, "the scan stopped at its bound, and the cursor goes on")
	p, err = ro.List(ctx, broker.ListOptions{Destination: d, Filter: f, Limit: 10, After: p.Next})
	require.NoError(t, err)
	require.Empty(t, p.Entries)
	require.Empty(t, p.Next, "the rest of the topic fits in the second page's bound")
	require.Len(t, listIDs(t, ro, broker.ListOptions{Destination: d, Limit: 1000}), n)
}

// Cursors come back from callers: anything but a cursor this store made
// for these options is refused, never trusted.
func TestListCursors(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(readerOpts(2))
	d := unique("cursor") + ".poison.dlt"
	for _, m := range brokertest.Messages(t, brokertest.SampleInputs()[:4]) {
		require.NoError(t, s.Publish(ctx, d, m))
	}
	p, err := s.List(ctx, broker.ListOptions{Destination: d, Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, p.Next)
	for name, cur := range map[string]string{
		"garbage":           "garbage",
		"other direction":   "n1" + strings.TrimPrefix(p.Next, "o1"),
		"other topic":       "o1:other.topic:0=0",
		"bad topic":         "o1:a/b:0=0",
		"negative offset":   "o1:" + d + ":0=-1",
		"negative part":     "o1:" + d + ":-1=0",
		"twice":             "o1:" + d + ":0=1,0=2",
		"not a number":      "o1:" + d + ":0=x",
		"huge":              "o1:" + d + ":" + strings.Repeat("0=1,", 20_000),
		"overflow":          "o1:" + d + ":0=99999999999999999999",
		"partition overflo": "o1:" + d + ":4294967296=0",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.List(ctx, broker.ListOptions{Destination: d, After: cur})
			require.ErrorIs(t, err, broker.ErrInvalidArgument)
		})
	}
	// A cursor past the end, or of a partition that does not exist,
	// lists nothing more.
	p, err = s.List(ctx, broker.ListOptions{Destination: d, After: "o1:" + d + ":0=999,1=999,7=3"})
	require.NoError(t, err)
	require.Empty(t, p.Entries)
	require.Empty(t, p.Next)
}

// Destinations are the topics a geodlq store wrote with records still
// pending: not a topic other producers write, not one fully replayed.
func TestListDestinations(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(readerOpts(2))
	dlt, done, foreign := unique("a")+".poison.dlt", unique("b")+".retry.dlt", unique("source")
	c.createTopic(foreign, 2)
	c.produce(&kgo.Record{Topic: foreign, Value: []byte(`{"event_id":"e1"}`)})
	for _, d := range []string{dlt, done} {
		require.NoError(t, s.Publish(ctx, d, brokertest.Message(t, brokertest.SampleInputs()[0])))
	}
	ro := c.readOnly()
	ds, err := ro.Destinations(ctx)
	require.NoError(t, err)
	require.Equal(t, sorted(dlt, done), ds)
	require.Len(t, drain(t, s, done), 1)
	require.Eventually(t, func() bool { // the acknowledgement is committed within about 100ms
		ds, err = ro.Destinations(ctx)
		require.NoError(t, err)
		return slices.Equal([]string{dlt}, ds)
	}, 10*time.Second, 50*time.Millisecond, "a topic whose records were all replayed holds nothing pending")

	// Listing every destination goes through them one after another.
	all := listIDs(t, ro, broker.ListOptions{Limit: 1, IncludeReplayed: true})
	require.Len(t, all, 2)
	p, err := ro.List(ctx, broker.ListOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, p.Entries, 1)
	require.Equal(t, dlt, p.Entries[0].Record.Destination)
	require.Empty(t, p.Next)
}

func sorted(ss ...string) []string {
	slices.Sort(ss)
	return ss
}

// A store opened read-only on a cluster without the topic: "no store
// here", and nothing created.
func TestListMissingTopic(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	ro := c.readOnly()
	missing := unique("missing") + ".poison.dlt"
	_, err := ro.List(ctx, broker.ListOptions{Destination: missing})
	require.ErrorIs(t, err, broker.ErrNoStore)
	ds, err := ro.Destinations(ctx)
	require.NoError(t, err)
	require.Empty(t, ds)
	ok, err := topicExists(c, missing)
	require.NoError(t, err)
	require.False(t, ok)
}

// Newest first, a partition is read in windows of which only the highest
// records within 1 MiB are held; records of mixed sizes around that bound
// are each listed once, in order.
func TestListNewestLargeRecords(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(&kafka.Options{Topics: &kafka.TopicOptions{Partitions: 1}})
	d := unique("large") + ".poison.dlt"
	sizes := []int{900 << 10, 200 << 10, 900 << 10, 200 << 10, 50, 900 << 10, 600 << 10, 600 << 10, 10, 200 << 10}
	for i, n := range sizes {
		b := fmt.Appendf(nil, "%03d", i)
		b = append(b, strings.Repeat("x", n)...)
		require.NoError(t, s.Publish(ctx, d, &broker.Message{Body: b}))
	}
	order := func(newest bool, limit int) []string {
		var out []string
		require.NoError(t, s.ScanAll(ctx, broker.ListOptions{Destination: d, Descending: newest, Limit: limit}, func(e broker.Entry) error {
			out = append(out, string(e.Record.Message.Body[:3]))
			return nil
		}))
		return out
	}
	var want []string
	for i := range sizes {
		want = append(want, fmt.Sprintf("%03d", len(sizes)-1-i))
	}
	for _, limit := range []int{1, 2, 5, 100} {
		require.Equal(t, want, order(true, limit), "newest first, pages of %d", limit)
	}
}
