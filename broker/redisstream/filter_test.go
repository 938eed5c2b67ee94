package redisstream_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

var (
	filterBase = time.Date(2026, 5, 1, 0, 0, 0, 500, time.UTC)
	// filterTimes are dead-letter times and filter bounds: equal values
	// and values one nanosecond apart test Since <= t < Until exactly.
	filterTimes = []time.Time{
		filterBase.Add(-time.Nanosecond), filterBase, filterBase.Add(time.Nanosecond),
		filterBase.Add(time.Hour), filterBase.Add(time.Hour + time.Nanosecond),
		filterBase.Add(-time.Hour).Truncate(time.Second), time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
	}
	filterPoints = [][]float64{nil, {0, 0}, {1, 1}, {0.5, 0.5}, {-0.0, 1e-300}, {1, 0.9999999999999999}, {-180, 90}, {1e15, -1e15}}
	filterEPSG   = []int{0, 4326, 3857, 2154}
	filterIDs    = []string{"evt-a", "evt-b", "évt ü", "evt-a ", "EVT-A", "evt\x00nul"}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

func subset[T any](r *rand.Rand, s []T) []T {
	n := 1 + r.IntN(2)
	out := make([]T, n)
	for i := range out {
		out[i] = pick(r, s)
	}
	return out
}

// corpus returns envelope bodies spread over every indexed field, plus
// bodies that are not valid envelopes.
func corpus(t *testing.T, r *rand.Rand, n int) [][]byte {
	base, err := envelope.Decode(brokertest.Message(t, brokertest.SampleInputs()[0]).Body)
	require.NoError(t, err)
	bodies := [][]byte{[]byte("not an envelope"), []byte(`{"schema_version":"dlq.v2"}`), {}}
	for i := range n {
		e := *base
		e.IdempotencyKey = fmt.Sprintf("idem:test:filter:%d", i)
		e.FailureClass = pick(r, classify.Classes())
		e.Route = classify.RouteFor(e.FailureClass)
		e.FailedStage = pick(r, classify.Stages())
		e.SourceEPSG = pick(r, filterEPSG)
		e.EventID = pick(r, filterIDs)
		e.DeadLetteredAt = pick(r, filterTimes)
		e.GeometryError = nil
		if r.IntN(4) > 0 {
			ge := &envelope.GeometryError{Reason: "Self-intersection", Kind: "self_intersection", Location: pick(r, filterPoints)}
			if r.IntN(2) == 0 {
				code := pick(r, filterEPSG)
				ge.EPSG = &code
			}
			e.GeometryError = ge
		}
		b, err := e.Encode()
		require.NoError(t, err)
		bodies = append(bodies, b)
	}
	return bodies
}

func randomFilter(r *rand.Rand) broker.Filter {
	var f broker.Filter
	bounds := []orb.Bound{
		{Min: orb.Point{0, 0}, Max: orb.Point{1, 1}},
		{Min: orb.Point{0.5, 0.5}, Max: orb.Point{0.5, 0.5}},
		{Min: orb.Point{1, 1}, Max: orb.Point{0, 0}}, // inverted: matches nothing
		{Min: orb.Point{math.Inf(-1), math.Inf(-1)}, Max: orb.Point{math.Inf(1), math.Inf(1)}},
		{Min: orb.Point{math.NaN(), 0}, Max: orb.Point{1, math.NaN()}},
		{Min: orb.Point{-1e15, -1e15}, Max: orb.Point{1e15, 1e15}},
		{Min: orb.Point{-0.0, 0}, Max: orb.Point{0, 1e-300}},
	}
	for f.IsZero() {
		if r.IntN(3) == 0 {
			f.Classes = subset(r, classify.Classes())
		}
		if r.IntN(3) == 0 {
			f.Stages = subset(r, classify.Stages())
		}
		if r.IntN(3) == 0 {
			f.EPSG = subset(r, append(filterEPSG, 9999))
		}
		if r.IntN(3) == 0 {
			f.EventIDs = subset(r, append(filterIDs, "none"))
		}
		if r.IntN(3) == 0 {
			f.Since = pick(r, filterTimes)
		}
		if r.IntN(3) == 0 {
			f.Until = pick(r, filterTimes)
		}
		if r.IntN(4) == 0 {
			b := pick(r, bounds)
			f.BBox = &b
		}
	}
	return f
}

// Filters evaluated in Redis select exactly what broker.Filter.Match
// selects, over a corpus that hits every field's edge cases (boundary
// times to the nanosecond, points on the bound's edges, NaN and infinite
// bounds, -0, EPSG from the geometry error or the source, event ids
// differing by case or a space, bodies that are not envelopes). Filtered
// fetches strand nothing: every entry is then fetchable, and its delivery
// count is one more than the number of filtered fetches that returned it.
func TestFilterMatchesBrokerFilterMatch(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	s, err := redisstream.New(newClient(t), ptr(lease(uniquePrefix(t), time.Minute)))
	require.NoError(t, err)
	d := "filters"
	bodies := corpus(t, r, 150)
	envs := map[string]*envelope.Envelope{} // by body
	valid := 0
	for _, b := range bodies {
		require.NoError(t, s.Publish(ctx, d, &broker.Message{Body: b}))
		if e, err := envelope.Decode(b); err == nil {
			envs[string(b)] = e
			valid++
		}
	}
	require.Greater(t, valid, 100, "most of the corpus is valid envelopes")

	returned := map[string]int{} // body -> filtered deliveries
	matchedSome := 0
	for i := range 150 {
		f := randomFilter(r)
		if err := f.Validate(); err != nil {
			_, ferr := s.Fetch(ctx, d, f, 1000)
			require.ErrorIs(t, ferr, broker.ErrInvalidArgument, "filter #%d %+v: %v", i, f, err)
			continue
		}
		var want []string
		for _, b := range bodies {
			if e := envs[string(b)]; e != nil && f.Match(e) {
				want = append(want, string(b))
			}
		}
		recs, err := s.Fetch(ctx, d, f, 1000)
		require.NoError(t, err)
		var got []string
		for _, rec := range recs {
			got = append(got, string(rec.Message.Body))
			returned[string(rec.Message.Body)]++
			require.NoError(t, s.Release(ctx, rec))
		}
		slices.Sort(want)
		slices.Sort(got)
		require.Equal(t, want, got, "filter #%d %+v", i, f)
		if len(want) > 0 {
			matchedSome++
		}
	}
	require.Greater(t, matchedSome, 30, "the filters are not all empty")

	all, err := s.Fetch(ctx, d, broker.Filter{}, 1000)
	require.NoError(t, err)
	require.Len(t, all, len(bodies), "filtered fetches left every entry fetchable")
	for _, rec := range all {
		require.Equal(t, returned[string(rec.Message.Body)]+1, rec.Deliveries,
			"entry %s: passing over an entry is not a delivery; each lease is", rec.ID)
		require.NoError(t, s.Ack(ctx, rec))
	}
	n, err := redisstream.Len(ctx, s, d)
	require.NoError(t, err)
	require.Zero(t, n)
}

// A filtered Fetch whose matches sit behind more entries than one script
// call examines still finds them, first among new entries, then among
// the pending (parked) ones.
func TestFilteredFetchScansPastTheBudget(t *testing.T) {
	ctx := context.Background()
	prefix := uniquePrefix(t)
	s, err := redisstream.New(newClient(t), ptr(lease(prefix, time.Minute)))
	require.NoError(t, err)
	d := "budget"
	const n = 2500 // two and a half script budgets
	var wg errGroup
	for w := range 4 {
		wg.Go(func() error {
			for i := w; i < n; i += 4 {
				filler := &broker.Message{Body: []byte("not an envelope " + strconv.Itoa(i))}
				if err := s.Publish(ctx, d, filler); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, wg.Wait())
	target := brokertest.Message(t, brokertest.SampleInputs()[0])
	require.NoError(t, s.Publish(ctx, d, target))
	f := broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}

	recs, err := s.Fetch(ctx, d, f, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1, "found among new entries")
	require.Equal(t, target.Body, recs[0].Message.Body)
	require.NoError(t, s.Release(ctx, recs[0]))

	recs, err = s.Fetch(ctx, d, f, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1, "found again among the pending ones")
	require.Equal(t, 2, recs[0].Deliveries)
	require.NoError(t, s.Ack(ctx, recs[0]))

	other, err := redisstream.New(newClient(t), ptr(lease(prefix, time.Minute)))
	require.NoError(t, err)
	total := 0
	for {
		recs, err := other.Fetch(ctx, d, broker.Filter{}, 1000)
		require.NoError(t, err)
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			require.Equal(t, 1, r.Deliveries, "passed-over entries were never delivered")
		}
		total += len(recs)
	}
	require.Equal(t, n, total, "every passed-over entry is available to another consumer")
}

// Fetching by record id leases those entries only, filtered in Redis:
// the others are neither delivered nor counted as delivered, and entries
// that are not envelopes are found by id too.
func TestFetchByRecordID(t *testing.T) {
	ctx := context.Background()
	s := open(t, lease(uniquePrefix(t), time.Minute))
	d := "byid"
	publishN(t, s, d, 5)
	require.NoError(t, s.Publish(ctx, d, &broker.Message{Body: []byte("not an envelope")}))
	p, err := s.List(ctx, broker.ListOptions{Destination: d})
	require.NoError(t, err)
	require.Len(t, p.Entries, 6)
	want := []string{p.Entries[1].Record.ID, p.Entries[5].Record.ID}
	recs, err := s.Fetch(ctx, d, broker.Filter{IDs: want}, 10)
	require.NoError(t, err)
	require.Equal(t, want, ids(recs))
	require.Equal(t, "not an envelope", string(recs[1].Message.Body))
	for _, r := range recs {
		require.NoError(t, s.Release(ctx, r))
	}
	all, err := s.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, all, 6)
	for _, r := range all {
		wantN := 1
		if slices.Contains(want, r.ID) {
			wantN = 2
		}
		require.Equal(t, wantN, r.Deliveries, "entry %s", r.ID)
		require.NoError(t, s.Ack(ctx, r))
	}
}
