package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// listFixture is a store holding, in "a", the brokertest filter events
// (ids 1-9), an event whose reason kind is too_few_points (10) and a
// message that is not an envelope (11); in "b", one record, replayed (12).
// Records 1 and 2 are replayed, 3 is leased.
type listFixture struct {
	s    *broker.Store
	envs map[string]*envelope.Envelope // by record id
}

func newListFixture(t *testing.T) listFixture {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "list.db"), &sqlite.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Hour}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	in := brokertest.FilterInputs()
	in = append(in, brokertest.Input{
		Payload:        []byte(`{"event_id":"evt-few","geometry":{"type":"LineString","coordinates":[[0,0]]}}`),
		IdempotencyKey: "idem:test:few",
		Err: &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation, Err: errors.New("Too few points"),
			Geometry: &classify.GeometryDetail{Reason: "Too few points", Kind: classify.KindTooFewPoints, Location: &orb.Point{0, 0}}},
		At: brokertest.FilterBaseTime.Add(-24 * time.Hour),
	})
	f := listFixture{s: s, envs: map[string]*envelope.Envelope{}}
	for i, m := range brokertest.Messages(t, in) {
		require.NoError(t, s.Publish(ctx, "a", m))
		env, err := envelope.Decode(m.Body)
		require.NoError(t, err)
		f.envs[strconv.Itoa(i+1)] = env
	}
	require.NoError(t, s.Publish(ctx, "a", &broker.Message{Body: []byte("not an envelope")}))
	require.NoError(t, s.Publish(ctx, "b", brokertest.Message(t, brokertest.SampleInputs()[0])))
	recs, err := s.Fetch(ctx, "a", broker.Filter{}, 3)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, recs[0]))
	require.NoError(t, s.Ack(ctx, recs[1]))
	recs, err = s.Fetch(ctx, "b", broker.Filter{}, 1)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, recs[0]))
	return f
}

func ids(es []broker.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Record.ID)
	}
	return out
}

func seq(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, strconv.Itoa(i))
	}
	return out
}

// TestList: pages in both directions, with and without replayed records,
// statuses and times, and every filter field applied by the driver itself
// (the portable store would filter what a driver missed: the driver is
// called directly).
func TestList(t *testing.T) {
	t.Parallel()
	f := newListFixture(t)
	ctx := context.Background()
	lister := f.s.Driver().(broker.Lister)
	page := func(opts broker.ListOptions) []string {
		t.Helper()
		var got []string
		for range 100 {
			p, err := lister.List(ctx, opts)
			require.NoError(t, err)
			require.LessOrEqual(t, len(p.Entries), opts.Limit)
			got = append(got, ids(p.Entries)...)
			if p.Next == "" {
				return got
			}
			opts.After = p.Next
		}
		t.Fatal("no last page")
		return nil
	}
	rev := func(s []string) []string { s = slices.Clone(s); slices.Reverse(s); return s }
	for _, limit := range []int{1, 2, 5, 100} {
		require.Equal(t, seq(3, 11), page(broker.ListOptions{Destination: "a", Limit: limit}), "pending, oldest first, by %d", limit)
		require.Equal(t, rev(seq(3, 11)), page(broker.ListOptions{Destination: "a", Limit: limit, Descending: true}), "newest first, by %d", limit)
		require.Equal(t, seq(1, 12), page(broker.ListOptions{IncludeReplayed: true, Limit: limit}), "replayed too, every destination")
		require.Equal(t, rev(seq(1, 12)), page(broker.ListOptions{IncludeReplayed: true, Descending: true, Limit: limit}))
	}

	p, err := lister.List(ctx, broker.ListOptions{IncludeReplayed: true, Limit: 100})
	require.NoError(t, err)
	status := map[string]broker.Status{}
	for _, e := range p.Entries {
		status[e.Record.ID] = e.Status
		require.Empty(t, e.Record.Lease, "listing shows no lease")
		require.False(t, e.PublishedAt.IsZero())
		require.Equal(t, e.Status == broker.StatusReplayed, !e.ReplayedAt.IsZero())
	}
	require.Equal(t, broker.StatusReplayed, status["1"])
	require.Equal(t, broker.StatusReplayed, status["2"])
	require.Equal(t, broker.StatusLeased, status["3"])
	require.Equal(t, broker.StatusPending, status["4"])
	require.Equal(t, broker.StatusReplayed, status["12"])
	require.Equal(t, []byte("not an envelope"), p.Entries[10].Record.Message.Body)

	t0 := brokertest.FilterBaseTime
	filters := map[string]broker.Filter{
		"ids":          {IDs: []string{"11", "4", "1", "x", "04", "99"}},
		"reason kinds": {ReasonKinds: []classify.ReasonKind{classify.KindTooFewPoints}},
		"kind+class":   {ReasonKinds: []classify.ReasonKind{classify.KindSelfIntersection}, Classes: []classify.Class{classify.ClassCRSMismatch}},
		"ids+class":    {IDs: []string{"4", "5", "6"}, Classes: []classify.Class{classify.ClassCRSMismatch}},
		"epsg":         {EPSG: []int{3857}},
		"stages":       {Stages: []classify.Stage{classify.StageParse, classify.StagePersist}},
		"event ids":    {EventIDs: []string{"evt-filter-0", "evt-few"}},
		"window":       {Since: t0.Add(2 * time.Hour), Until: t0.Add(5 * time.Hour)},
		"bbox":         {BBox: &orb.Bound{Min: orb.Point{0, 0}, Max: orb.Point{1, 1}}},
	}
	for name, flt := range filters {
		t.Run(name, func(t *testing.T) {
			var want []string
			for _, id := range seq(1, 12) {
				r := &broker.Record{ID: id, Envelope: f.envs[id]}
				if id == "11" {
					r.Message = &broker.Message{Body: []byte("not an envelope")}
				}
				if id != "12" && flt.MatchRecord(r) {
					want = append(want, id)
				}
			}
			require.NotEmpty(t, want, "the filter selects something")
			require.Equal(t, want, page(broker.ListOptions{Destination: "a", Filter: flt, IncludeReplayed: true, Limit: 3}), "List")
			counts, err := f.s.Driver().(broker.Statser).Stats(ctx, broker.StatsOptions{Destination: "a", Filter: flt})
			require.NoError(t, err)
			total := 0
			for _, c := range counts {
				total += c.Total()
			}
			require.Equal(t, len(want), total, "Stats")
		})
	}

	_, err = f.s.List(ctx, broker.ListOptions{After: "not-a-cursor"})
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	_, err = f.s.List(ctx, broker.ListOptions{After: "-3"})
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	ds, err := f.s.Destinations(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, ds, "a destination holding only replayed records is listed")
}

// TestFetchFilters: the driver's Fetch applies record ids and reason kinds
// in SQL, and leases nothing else.
func TestFetchFilters(t *testing.T) {
	t.Parallel()
	f := newListFixture(t)
	ctx := context.Background()
	drv := f.s.Driver()
	recs, err := drv.Fetch(ctx, "a", broker.Filter{IDs: []string{"11", "5", "1", "3", "x"}}, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"5", "11"}, []string{recs[0].ID, recs[1].ID}, "not the replayed one, not the leased one, in id order")
	require.Len(t, recs, 2)
	recs, err = drv.Fetch(ctx, "a", broker.Filter{ReasonKinds: []classify.ReasonKind{classify.KindTooFewPoints}}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "10", recs[0].ID)
	recs, err = drv.Fetch(ctx, "a", broker.Filter{IDs: []string{"10", "4"}, ReasonKinds: []classify.ReasonKind{classify.KindSelfIntersection}}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "4", recs[0].ID)
	require.Equal(t, 1, recs[0].Deliveries)
}

// TestStats: counts by status and by time bucket, floored to multiples of
// the bucket since the epoch.
func TestStats(t *testing.T) {
	t.Parallel()
	f := newListFixture(t)
	ctx := context.Background()
	counts, err := f.s.Stats(ctx, broker.StatsOptions{})
	require.NoError(t, err)
	var pending, leased, replayed int
	perDest := map[string]int{}
	for _, c := range counts {
		pending += c.Pending
		leased += c.Leased
		replayed += c.Replayed
		perDest[c.Destination] += c.Total()
		require.True(t, c.Bucket.IsZero())
	}
	require.Equal(t, []int{8, 1, 3}, []int{pending, leased, replayed})
	require.Equal(t, map[string]int{"a": 11, "b": 1}, perDest)
	require.True(t, slices.IsSortedFunc(counts, func(a, b broker.Count) int {
		if a.Destination != b.Destination {
			return compare(a.Destination, b.Destination)
		}
		return compare(string(a.Class), string(b.Class))
	}), "sorted by destination, then class")

	week := 7 * 24 * time.Hour
	counts, err = f.s.Stats(ctx, broker.StatsOptions{Destination: "a", Bucket: week,
		Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}})
	require.NoError(t, err)
	buckets := map[time.Time]int{}
	for _, c := range counts {
		require.Equal(t, classify.ClassInvalidGeometry, c.Class)
		require.Zero(t, c.Bucket.UnixNano()%int64(week), "a bucket starts at a multiple of the bucket since the epoch")
		buckets[c.Bucket] += c.Total()
	}
	for at, n := range buckets {
		require.False(t, at.After(brokertest.FilterBaseTime))
		require.Less(t, brokertest.FilterBaseTime.Sub(at), week+24*time.Hour)
		require.Positive(t, n)
	}
	total := 0
	for _, n := range buckets {
		total += n
	}
	require.Equal(t, 5, total, "the four invalid geometries of the filter events, and too_few_points")

	hourly, err := f.s.Stats(ctx, broker.StatsOptions{Destination: "a", Bucket: time.Hour})
	require.NoError(t, err)
	byHour := map[time.Time]int{}
	for _, c := range hourly {
		byHour[c.Bucket] += c.Total()
	}
	require.Equal(t, 1, byHour[time.Time{}], "the record that is not an envelope has no time")
	require.Equal(t, 1, byHour[brokertest.FilterBaseTime.Add(3*time.Hour)])
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
