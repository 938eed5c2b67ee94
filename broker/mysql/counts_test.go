package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/mysql"
	"github.com/geodlq/geodlq/broker/mysql/internal/mysqltest"
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

// countsFromSQL reads the counts and their log summed by fields, and the
// same fields grouped afresh from the records.
func countsFromSQL(t *testing.T, db *sql.DB) (kept, fresh map[string]int64) {
	t.Helper()
	read := func(q string) map[string]int64 {
		rows, err := db.Query(q)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var k string
			var n int64
			require.NoError(t, rows.Scan(&k, &n))
			out[k] = n
		}
		require.NoError(t, rows.Err())
		return out
	}
	const key = `CONCAT_WS(0x1f, HEX(destination), HEX(failure_class), HEX(failed_stage), epsg, HEX(reason_kind), HEX(source), is_envelope, replayed)`
	t0 := mysql.DefaultTable
	kept = read(`SELECT ` + key + `, SUM(n) FROM (SELECT * FROM ` + t0 + `_counts UNION ALL SELECT destination, failure_class, failed_stage, epsg,
		reason_kind, source, is_envelope, replayed, n FROM ` + t0 + `_count_log) AS c GROUP BY 1 HAVING SUM(n) <> 0`)
	fresh = read(`SELECT ` + key + `, COUNT(*) FROM (SELECT destination, COALESCE(failure_class, '') AS failure_class,
		COALESCE(failed_stage, '') AS failed_stage, COALESCE(epsg, 0) AS epsg, COALESCE(reason_kind, '') AS reason_kind,
		COALESCE(source, '') AS source, is_envelope, acked_at IS NOT NULL AS replayed FROM ` + t0 + `) AS r GROUP BY 1`)
	return kept, fresh
}

// checkCounts holds the counts to a fresh GROUP BY of the records, and
// Stats and Page.Total (from the counts) to what the records say, for a
// few selections.
func checkCounts(t *testing.T, db *sql.DB, s *broker.Store, when string) {
	t.Helper()
	ctx := context.Background()
	kept, fresh := countsFromSQL(t, db)
	require.Equal(t, fresh, kept, "%s: the counts and a GROUP BY of the records", when)
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
		{Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}, IncludeReplayed: true},
		{Filter: broker.Filter{Sources: []string{"https://tiles.example/ign/2"}}, IncludeReplayed: true},
	} {
		o.Total, o.Summaries = true, true
		p, err := s.List(ctx, o)
		require.NoError(t, err)
		require.Equal(t, totalOracle(t, s, o), p.Total, "%s: Total of %+v", when, o)
	}
}

func logRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM `+mysql.DefaultTable+`_count_log`).Scan(&n))
	return n
}

// TestCountsFollowWrites: the counts the triggers keep answer Stats and
// Page.Total exactly as the records do, through writes, batches, leases,
// acknowledgements, releases, purges and foldings of the log.
func TestCountsFollowWrites(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	s, err := mysql.New(ctx, db, &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	msgs := brokertest.Messages(t, brokertest.ListingInputs())
	require.NotEmpty(t, msgs)
	checkCounts(t, db, s, "empty")
	for i, m := range msgs {
		require.NoError(t, s.Publish(ctx, "a", m), "Publish #%d", i)
	}
	require.NoError(t, s.Publish(ctx, "a", &broker.Message{Body: []byte("not an envelope")}))
	checkCounts(t, db, s, "published")
	require.NoError(t, s.PublishBatch(ctx, "b", msgs))
	checkCounts(t, db, s, "batched")
	require.NotZero(t, logRows(t, db))
	require.NoError(t, mysql.CompactForTest(ctx, s))
	require.Zero(t, logRows(t, db), "folded")
	checkCounts(t, db, s, "folded")
	recs, err := s.Fetch(ctx, "a", broker.Filter{}, 5)
	require.NoError(t, err)
	require.Len(t, recs, 5)
	require.Zero(t, logRows(t, db), "a lease changes no count")
	checkCounts(t, db, s, "leased")
	for _, r := range recs[:3] {
		require.NoError(t, s.Ack(ctx, r))
	}
	require.NoError(t, s.Release(ctx, recs[3]))
	checkCounts(t, db, s, "acknowledged")
	_, err = s.Purge(ctx, broker.PurgeRequest{Destination: "a", Filter: broker.Filter{Until: time.Now().Add(time.Hour)}})
	require.NoError(t, err)
	checkCounts(t, db, s, "purged the replayed")
	bs, err := s.List(ctx, broker.ListOptions{Destination: "b", Limit: 2, Summaries: true})
	require.NoError(t, err)
	require.Len(t, bs.Entries, 2)
	_, err = s.Purge(ctx, broker.PurgeRequest{Destination: "b", Filter: broker.Filter{IDs: []string{bs.Entries[0].Record.ID, bs.Entries[1].Record.ID}}, IncludePending: true})
	require.NoError(t, err)
	checkCounts(t, db, s, "purged pending ones")
	require.NoError(t, mysql.CompactForTest(ctx, s))
	checkCounts(t, db, s, "folded again")
}

// TestCountsUnderConcurrentWriters: writers publishing, acknowledging and
// purging records of the same fields while the log is folded again and
// again (and counts are read) leave the counts exact: no change lost,
// none counted twice.
func TestCountsUnderConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	db.SetMaxOpenConns(16)
	s, err := mysql.New(ctx, db, &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	msgs := brokertest.Messages(t, brokertest.ListingInputs())
	const writers, rounds = 4, 15
	errs := make(chan error, writers+2)
	var writing sync.WaitGroup
	for w := range writers {
		writing.Go(func() {
			dest := fmt.Sprintf("w%d", w%2) // two writers per destination
			for i := range rounds {
				if err := s.PublishBatch(ctx, dest, []*broker.Message{msgs[(w+i)%len(msgs)], msgs[0]}); err != nil {
					errs <- err
					return
				}
				recs, err := s.Fetch(ctx, dest, broker.Filter{}, 1)
				if err != nil {
					errs <- err
					return
				}
				for _, r := range recs {
					if err := s.Ack(ctx, r); err != nil {
						errs <- err
						return
					}
				}
				if i%5 == 4 {
					if _, err := s.Purge(ctx, broker.PurgeRequest{Destination: dest, Filter: broker.Filter{Until: time.Now().Add(time.Hour)}}); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	done := make(chan struct{})
	var background sync.WaitGroup
	background.Go(func() { // folds
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := mysql.CompactForTest(ctx, s); err != nil {
				errs <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	background.Go(func() { // reads
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.Stats(ctx, broker.StatsOptions{BySource: true}); err != nil {
				errs <- err
				return
			}
			if _, err := s.List(ctx, broker.ListOptions{Total: true, Summaries: true, Limit: 1}); err != nil {
				errs <- err
				return
			}
		}
	})
	writing.Wait()
	close(done)
	background.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var n int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM `+mysql.DefaultTable).Scan(&n))
	require.NotZero(t, n)
	checkCounts(t, db, s, "after concurrent writers")
	require.NoError(t, mysql.CompactForTest(ctx, s))
	require.Zero(t, logRows(t, db))
	checkCounts(t, db, s, "folded")
}
