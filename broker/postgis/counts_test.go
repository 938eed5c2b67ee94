package postgis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/broker/postgis/internal/pgtest"
	"github.com/geodlq/geodlq/classify"
)

// statsOracle is Stats read from the records themselves: bucketed by
// dead-letter time (which the counts cannot answer, so the store groups
// the rows), the buckets merged.
func statsOracle(t *testing.T, s *broker.Store, o broker.StatsOptions) []broker.Count {
	t.Helper()
	o.Bucket = 1000 * time.Hour
	cs, err := s.Stats(context.Background(), o)
	require.NoError(t, err)
	return broker.MergeCounts(cs, func(c *broker.Count) { c.Bucket = time.Time{} })
}

// totalOracle counts the records a listing selects by reading every page.
func totalOracle(t *testing.T, s *broker.Store, o broker.ListOptions) int {
	t.Helper()
	n := 0
	o.Summaries, o.Total, o.Limit = true, false, broker.MaxListLimit
	require.NoError(t, s.ScanAll(context.Background(), o, func(broker.Entry) error { n++; return nil }))
	return n
}

// checkCounts holds Stats and Page.Total (from the counts) to what the
// records say, for a few selections.
func checkCounts(t *testing.T, s *broker.Store, when string) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []broker.StatsOptions{
		{}, {BySource: true}, {BySource: true, SourceDepth: 2}, {Destination: "a"},
		{Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}},
		{Filter: broker.Filter{SourcePrefix: "https://tiles.example/osm"}, BySource: true},
	} {
		got, err := s.Stats(ctx, o)
		require.NoError(t, err)
		require.ElementsMatch(t, statsOracle(t, s, o), got, "%s: Stats(%+v)", when, o)
	}
	for _, o := range []broker.ListOptions{
		{}, {IncludeReplayed: true}, {Destination: "b"},
		{Filter: broker.Filter{EPSG: []int{4326}}},
		{Filter: broker.Filter{Sources: []string{"https://tiles.example/ign/2"}}, IncludeReplayed: true},
	} {
		o.Total, o.Summaries = true, true
		p, err := s.List(ctx, o)
		require.NoError(t, err)
		require.Equal(t, totalOracle(t, s, o), p.Total, "%s: Total of %+v", when, o)
	}
}

// TestCountsFollowWrites: the counts the triggers keep answer Stats and
// Page.Total exactly as the records do, through writes, batches,
// duplicates, leases, acknowledgements, purges and foldings of the log.
func TestCountsFollowWrites(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, nil)
	msgs := brokertest.Messages(t, brokertest.ListingInputs())
	require.NotEmpty(t, msgs)
	checkCounts(t, s, "empty")
	publishAll(t, s, "a", msgs)
	checkCounts(t, s, "published")
	require.NoError(t, s.PublishBatch(ctx, "b", msgs))
	require.NoError(t, s.PublishBatch(ctx, "b", msgs[:3]), "duplicates are absorbed")
	checkCounts(t, s, "batched")
	require.NoError(t, postgis.CompactForTest(ctx, s))
	require.Zero(t, countRows(t, s, "_count_log"), "folded")
	checkCounts(t, s, "folded")
	recs, err := s.Fetch(ctx, "a", broker.Filter{}, 4)
	require.NoError(t, err)
	require.Len(t, recs, 4)
	checkCounts(t, s, "leased")
	for _, r := range recs[:3] {
		require.NoError(t, s.Ack(ctx, r))
	}
	checkCounts(t, s, "acknowledged")
	_, err = s.Purge(ctx, broker.PurgeRequest{Destination: "a", Filter: broker.Filter{Until: time.Now().Add(time.Hour)}})
	require.NoError(t, err)
	checkCounts(t, s, "purged the replayed")
	bs, err := s.List(ctx, broker.ListOptions{Destination: "b", Limit: 2, Summaries: true})
	require.NoError(t, err)
	require.Len(t, bs.Entries, 2)
	_, err = s.Purge(ctx, broker.PurgeRequest{Destination: "b", Filter: broker.Filter{IDs: []string{bs.Entries[0].Record.ID, bs.Entries[1].Record.ID}}, IncludePending: true})
	require.NoError(t, err)
	checkCounts(t, s, "purged pending ones")
	require.NoError(t, postgis.CompactForTest(ctx, s))
	checkCounts(t, s, "folded again")
}

// TestMigrateToCounts: records written at schema version 3 are counted by
// the migration to version 4.
func TestMigrateToCounts(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.NewPool(t, 4)
	old, err := postgis.New(ctx, pool, &postgis.Options{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, postgis.MigrateToForTest(ctx, old, 3))
	msgs := brokertest.Messages(t, brokertest.ListingInputs())
	publishAll(t, old, "a", msgs)
	recs, err := old.Fetch(ctx, "a", broker.Filter{}, 2)
	require.NoError(t, err)
	require.NoError(t, old.Ack(ctx, recs[0]))
	s, err := postgis.New(ctx, pool, &postgis.Options{Schema: schema, Create: true})
	require.NoError(t, err)
	v, err := postgis.VersionForTest(ctx, s)
	require.NoError(t, err)
	require.Equal(t, 5, v)
	require.NotZero(t, countRows(t, s, "_counts"))
	checkCounts(t, s, "migrated")
}

// countRows counts the rows of one of the store's side tables.
func countRows(t *testing.T, s *broker.Store, suffix string) int {
	t.Helper()
	var n int
	require.NoError(t, poolOf(t, s).QueryRow(context.Background(), `SELECT count(*) FROM `+postgis.Table(s)[:len(postgis.Table(s))-1]+suffix+`"`).Scan(&n))
	return n
}
