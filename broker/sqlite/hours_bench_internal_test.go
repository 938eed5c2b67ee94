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
)

// BenchmarkStatsByTime is the console's time line (Stats with a bucket of
// a day) over 100,000 records dead-lettered across 30 days: read from
// dlq_hour_counts (hours) against the GROUP BY over the records (scan),
// the same store in the same run.
//
//	go test -run '^$' -bench BenchmarkStatsByTime -count 6 ./broker/sqlite | benchstat -col /path -
func BenchmarkStatsByTime(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"), nil)
	require.NoError(b, err)
	defer s.Close()
	d := s.Driver().(*drv)
	msgs := brokertest.Messages(b, brokertest.ListingInputs())
	batch := make([]*broker.Message, 0, 500)
	for i := 0; len(batch) < cap(batch); i++ {
		batch = append(batch, msgs[i%len(msgs)])
	}
	for range n / len(batch) {
		require.NoError(b, s.PublishBatch(ctx, "spatial.events.poison.dlt", batch))
	}
	var db *sql.DB
	require.True(b, s.As(&db))
	_, err = db.Exec(`UPDATE dlq_records SET dead_lettered_at = dead_lettered_at - 3600000000000 * (id % 720) WHERE is_envelope = 1`)
	require.NoError(b, err)
	_, err = db.Exec(`ANALYZE`)
	require.NoError(b, err)
	opts := broker.StatsOptions{Bucket: 24 * time.Hour}
	for _, bc := range []struct {
		name  string
		stats func(context.Context, broker.StatsOptions) ([]broker.Count, error)
	}{{"path=hours", d.Stats}, {"path=scan", d.scanStats}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				cs, err := bc.stats(ctx, opts)
				require.NoError(b, err)
				total := 0
				for _, c := range cs {
					total += c.Total()
				}
				require.Equal(b, n, total)
			}
		})
	}
}
