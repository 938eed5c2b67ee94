package warehouse

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/warehouse/internal/fixture"
)

// BenchmarkSyncMemory syncs 20,000 dead letters from the in-memory store
// into a new dataset; its baseline, list, only reads them. (The SQLite
// and PostGIS benchmarks at 100,000 are in warehouse/enginetest.)
func BenchmarkSyncMemory(b *testing.B) {
	const n = 20_000
	ctx := context.Background()
	s := memory.New(nil)
	require.NoError(b, fixture.Fill(ctx, s, "vector-dlq", n, &fixture.Options{Step: fixture.DenseStep}))
	b.Run("list", func(b *testing.B) {
		for b.Loop() {
			rows := 0
			require.NoError(b, s.ScanAll(ctx, broker.ListOptions{IncludeReplayed: true, Limit: broker.MaxListLimit}, func(e broker.Entry) error {
				if _, err := envelopeOf(e); err == nil {
					rows++
				}
				return nil
			}))
			require.Equal(b, n, rows)
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("sync", func(b *testing.B) {
		for b.Loop() {
			res, err := Sync(ctx, s, b.TempDir(), nil)
			require.NoError(b, err)
			require.EqualValues(b, n, res.Rows)
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}
