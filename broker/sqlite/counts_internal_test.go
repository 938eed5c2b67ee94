package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
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

// countsFixture opens a store at path (leases of an hour) with the
// listing inputs in two destinations and a body that is not an envelope,
// runs spread (SQL, when not "") over the records, then leases three,
// acknowledges one, releases one, purges one, and writes a row as an
// older geodlq did, indexed by the backfill: 12 records, 1 leased, 1
// replayed.
func countsFixture(t *testing.T, path, spread string) (*broker.Store, *drv, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, path, &Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Hour}})
	require.NoError(t, err)
	d := s.Driver().(*drv)
	msgs := brokertest.Messages(t, brokertest.ListingInputs())
	require.NoError(t, s.PublishBatch(ctx, "a", msgs[:6]))
	require.NoError(t, s.PublishBatch(ctx, "b", append(msgs[6:], &broker.Message{Body: []byte("not an envelope")})))
	var db *sql.DB
	require.True(t, s.As(&db))
	if spread != "" {
		_, err = db.Exec(spread)
		require.NoError(t, err)
	}
	recs, err := s.Fetch(ctx, "a", broker.Filter{}, 3)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, recs[0]))
	require.NoError(t, s.Release(ctx, recs[2]))
	_, err = s.Purge(ctx, broker.PurgeRequest{Destination: "b", Filter: broker.Filter{EventIDs: []string{"evt-list-7"}}, IncludePending: true})
	require.NoError(t, err)
	// A row an older geodlq wrote, then indexed by the backfill.
	_, err = db.Exec(`INSERT INTO dlq_records (destination, headers, body, is_envelope, published_at) VALUES ('a', '{}', ?, 1, 1)`, msgs[9].Body)
	require.NoError(t, err)
	require.NoError(t, d.backfill(ctx, d.db))
	return s, d, db
}

// TestStatsFromCounts: Stats read from dlq_counts (kept by triggers) agree
// with Stats over the records after writes, leases, an ack, a release, a
// purge and a backfill, for every option the counts answer.
func TestStatsFromCounts(t *testing.T) {
	ctx := context.Background()
	s, d, _ := countsFixture(t, filepath.Join(t.TempDir(), "counts.db"), "")
	defer s.Close()

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

// TestStatsFromHours: Stats by time read from dlq_hour_counts (kept by
// triggers) agree with the GROUP BY over the records after writes across
// weeks, leases, an ack, a release, a purge and a backfill, for every
// bucket of whole hours and filter the counts answer; a bucket of another
// length, a source filter or grouping by source is counted from the
// records. A file of version 4 is given the counts when opened.
func TestStatsFromHours(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hours.db")
	// The records spread over weeks, before the epoch too (a floor, not a
	// truncation), an hour's last nanosecond and the next hour's first.
	s, d, db := countsFixture(t, path, `UPDATE dlq_records SET dead_lettered_at = CASE id % 5
		WHEN 0 THEN dead_lettered_at - 86400000000000 * (id * 3)
		WHEN 1 THEN -3600000000000 * id - 1
		WHEN 2 THEN 3600000000000 * 500000 - 1
		WHEN 3 THEN 3600000000000 * 500000
		ELSE dead_lettered_at END WHERE is_envelope = 1`)

	buckets := []time.Duration{time.Hour, 3 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour}
	filters := []broker.Filter{{}, {Classes: []classify.Class{classify.ClassInvalidGeometry}},
		{ReasonKinds: []classify.ReasonKind{classify.KindTooFewPoints}, Stages: []classify.Stage{classify.StageTopologyValidation}}}
	check := func(s *broker.Store, d *drv) {
		t.Helper()
		matched := map[int]int{} // counts returned, by the filter's size
		defer func() {
			for _, f := range filters {
				require.Positive(t, matched[len(f.Classes)+len(f.ReasonKinds)], "filter %+v matched records", f)
			}
		}()
		for _, b := range buckets {
			for _, f := range filters {
				for _, dest := range []string{"", "a"} {
					opts := broker.StatsOptions{Destination: dest, Filter: f, Bucket: b}
					require.True(t, hours(opts), "%+v", opts)
					fast, err := s.Stats(ctx, opts)
					require.NoError(t, err)
					slow, err := d.scanStats(ctx, opts)
					require.NoError(t, err)
					slices.SortFunc(slow, broker.CompareCounts)
					require.Equal(t, slow, fast, "options %+v", opts)
					matched[len(f.Classes)+len(f.ReasonKinds)] += len(fast)
				}
			}
		}
	}
	check(s, d)
	total := 0
	hourly, err := s.Stats(ctx, broker.StatsOptions{Bucket: time.Hour})
	require.NoError(t, err)
	var leased, replayed int
	for _, c := range hourly {
		total, leased, replayed = total+c.Total(), leased+c.Leased, replayed+c.Replayed
	}
	require.Equal(t, [3]int{11, 1, 1}, [3]int{total, leased, replayed}, "12 records, 1 purged: 1 leased, 1 replayed")
	for _, opts := range []broker.StatsOptions{
		{Bucket: 90 * time.Minute}, {Bucket: time.Hour, BySource: true},
		{Bucket: time.Hour, Filter: broker.Filter{SourcePrefix: "https://tiles.example/osm"}},
		{Bucket: time.Hour, Filter: broker.Filter{Since: brokertest.FilterBaseTime}},
	} {
		require.False(t, hours(opts), "%+v is counted from the records", opts)
	}

	// Version 4: no hourly counts; opened, the file is brought up to date.
	_, err = db.Exec(`DROP TRIGGER dlq_hour_counts_insert; DROP TRIGGER dlq_hour_counts_delete; DROP TRIGGER dlq_hour_counts_update;
		DROP TABLE dlq_hour_counts; PRAGMA user_version = 4;`)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	ro, err := Open(ctx, path, &Options{StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.NoError(t, err)
	require.False(t, ro.Driver().(*drv).hourly(), "a read-only handle on version 4 counts from the records")
	fromRecords, err := ro.Stats(ctx, broker.StatsOptions{Bucket: time.Hour})
	require.NoError(t, err)
	require.NoError(t, ro.Close())
	s, err = Open(ctx, path, &Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Hour}})
	require.NoError(t, err)
	defer s.Close()
	d = s.Driver().(*drv)
	check(s, d)
	fromHours, err := s.Stats(ctx, broker.StatsOptions{Bucket: time.Hour})
	require.NoError(t, err)
	require.Equal(t, fromRecords, fromHours)
}
