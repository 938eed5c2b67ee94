package enginetest

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/warehouse"
	"github.com/geodlq/geodlq/warehouse/internal/fixture"
)

// benchRecords is the store size of BenchmarkSync: 100,000, or
// $GEODLQ_WAREHOUSE_BENCH_RECORDS.
func benchRecords(b *testing.B) int {
	if v := os.Getenv("GEODLQ_WAREHOUSE_BENCH_RECORDS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		return n
	}
	return 100_000
}

// BenchmarkSync exports a store of 100,000 dead letters (ten weeks of a
// busy pipeline: fixture.DenseStep apart) to a new dataset,
// from SQLite and from PostGIS, and reports rows per second. Its baseline,
// list, reads the same records the same way (pages of 1000, envelopes
// decoded with envelope.DecodeFast, as the sync decodes them) and writes nothing: the difference is the cost of the rows,
// bounding boxes and Parquet files.
//
//	go test -run '^$' -bench Sync -benchtime 3x ./warehouse/enginetest/
func BenchmarkSync(b *testing.B) {
	n := benchRecords(b)
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			readURL, writeURL := be.open(b)
			fillStep(b, openStore(b, writeURL, true), 0, n, fixture.DenseStep)
			s := openStore(b, readURL, false)
			ctx := context.Background()
			b.Run("list", func(b *testing.B) {
				for b.Loop() {
					rows := 0
					err := s.ScanAll(ctx, broker.ListOptions{IncludeReplayed: true, Limit: broker.MaxListLimit}, func(e broker.Entry) error {
						if _, err := envelope.DecodeFast(e.Record.Message.Body); err == nil {
							rows++
						}
						return nil
					})
					require.NoError(b, err)
					require.Equal(b, n, rows)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			})
			b.Run("sync", func(b *testing.B) {
				for b.Loop() {
					res, err := warehouse.Sync(ctx, s, b.TempDir(), nil)
					require.NoError(b, err)
					require.EqualValues(b, n, res.Rows)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			})
		})
	}
}
