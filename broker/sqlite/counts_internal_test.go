package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/classify"
)

// slowStats is Stats by the GROUP BY over the records, whatever the
// options: what the counts must agree with.
func (d *drv) slowStats(ctx context.Context, opts broker.StatsOptions) ([]broker.Count, error) {
	opts.Bucket = time.Nanosecond // not counted from dlq_counts; every time its own bucket
	counts, err := d.Stats(ctx, opts)
	if err != nil {
		return nil, err
	}
	return broker.MergeCounts(counts, func(c *broker.Count) { c.Bucket = time.Time{} }), nil
}

// TestStatsFromCounts: Stats read from dlq_counts (kept by triggers) agree
// with Stats over the records after writes, leases, an ack, a release, a
// purge and a backfill, for every option the counts answer.
func TestStatsFromCounts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "counts.db")
	s, err := Open(ctx, path, &Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Hour}})
	require.NoError(t, err)
	defer s.Close()
	d := s.Driver().(*drv)
	msgs := brokertest.Messages(t, brokertest.ListingInputs())
	require.NoError(t, s.PublishBatch(ctx, "a", msgs[:6]))
	require.NoError(t, s.PublishBatch(ctx, "b", append(msgs[6:], &broker.Message{Body: []byte("not an envelope")})))
	recs, err := s.Fetch(ctx, "a", broker.Filter{}, 3)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, recs[0]))
	require.NoError(t, s.Release(ctx, recs[2]))
	_, err = s.Purge(ctx, broker.PurgeRequest{Destination: "b", Filter: broker.Filter{EventIDs: []string{"evt-list-7"}}, IncludePending: true})
	require.NoError(t, err)
	// A row an older geodlq wrote, then indexed by the backfill.
	var db *sql.DB
	require.True(t, s.As(&db))
	_, err = db.Exec(`INSERT INTO dlq_records (destination, headers, body, is_envelope, published_at) VALUES ('a', '{}', ?, 1, 1)`, msgs[9].Body)
	require.NoError(t, err)
	require.NoError(t, d.backfill(ctx, d.db))

	for _, opts := range []broker.StatsOptions{
		{}, {Destination: "a"}, {BySource: true}, {BySource: true, SourceDepth: 1},
		{Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}, BySource: true, SourceDepth: 2},
		{Filter: broker.Filter{SourcePrefix: "https://tiles.example/osm"}},
		{Filter: broker.Filter{Sources: []string{"https://tiles.example/ign/1"}}, Destination: "a"},
	} {
		require.True(t, countable(opts.Filter))
		fast, err := s.Stats(ctx, opts)
		require.NoError(t, err)
		slow, err := d.slowStats(ctx, opts)
		require.NoError(t, err)
		require.Equal(t, slow, fast, "options %+v", opts)
	}
	all, err := s.Stats(ctx, broker.StatsOptions{})
	require.NoError(t, err)
	var pending, leased, replayed int
	for _, c := range all {
		pending, leased, replayed = pending+c.Pending, leased+c.Leased, replayed+c.Replayed
	}
	require.Equal(t, [3]int{9, 1, 1}, [3]int{pending, leased, replayed}, "12 records, 1 purged: 1 leased, 1 replayed")
	p, err := s.List(ctx, broker.ListOptions{Total: true, Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}})
	require.NoError(t, err)
	require.Equal(t, len(p.Entries), p.Total, "Total from the counts")
}

// TestMigrateFromVersion2: a file of version 2 (no counts, a contentless
// text index) is brought to version 3 with counts and a text index of
// every record.
func TestMigrateFromVersion2(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v2.db")
	s, err := Open(ctx, path, nil)
	require.NoError(t, err)
	require.NoError(t, s.PublishBatch(ctx, "a", brokertest.Messages(t, brokertest.ListingInputs())))
	var db *sql.DB
	require.True(t, s.As(&db))
	_, err = db.Exec(`DROP TRIGGER dlq_text_insert; DROP TRIGGER dlq_text_delete; DROP TRIGGER dlq_text_update; DROP TABLE dlq_text;
		DROP TRIGGER dlq_counts_insert; DROP TRIGGER dlq_counts_delete; DROP TRIGGER dlq_counts_update; DROP TABLE dlq_counts;
		DROP INDEX dlq_leases; PRAGMA user_version = 2;`)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s, err = Open(ctx, path, nil)
	require.NoError(t, err)
	defer s.Close()
	p, err := s.List(ctx, broker.ListOptions{Filter: broker.Filter{Text: "sudan"}, Total: true})
	require.NoError(t, err)
	require.Equal(t, 2, p.Total, "the text index covers the records of version 2")
	counts, err := s.Stats(ctx, broker.StatsOptions{})
	require.NoError(t, err)
	n := 0
	for _, c := range counts {
		n += c.Total()
	}
	require.Equal(t, 10, n, "the counts cover the records of version 2")
}
