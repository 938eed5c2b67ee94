package warehouse

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/envelope"
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

// BenchmarkSyncDecode syncs 10,000 realistic dead letters (dlqgen: every
// failure class, 4 to 20,000 vertices, geometries over 4 KiB offloaded)
// listed as a SQL store lists them, bodies only, so that each envelope is
// decoded: with envelope.Decode (decoder=reference, the one-record path's)
// and with envelope.DecodeFast (decoder=fast, the sync's), in the same
// run. Its baseline, decode, lists and decodes them and writes nothing:
// the difference is the rows, boxes and files.
//
//	go test -run '^$' -bench SyncDecode -count 10 ./warehouse/ | benchstat -col /decoder -
func BenchmarkSyncDecode(b *testing.B) {
	const n = 10_000
	ctx := context.Background()
	s, _ := realistic(b, n, 0)
	src := bodyLister{s: s}
	for _, dec := range []struct {
		name   string
		decode func(broker.Entry) (*envelope.Envelope, error)
	}{{"reference", envelopeOf}, {"fast", fastEnvelopeOf}} {
		b.Run("op=decode/decoder="+dec.name, func(b *testing.B) {
			for b.Loop() {
				rows := 0
				lo := broker.ListOptions{IncludeReplayed: true, Limit: broker.MaxListLimit}
				for {
					p, err := src.List(ctx, lo)
					require.NoError(b, err)
					for _, e := range p.Entries {
						if _, err := dec.decode(e); err == nil {
							rows++
						}
					}
					if p.Next == "" || p.Next == lo.After {
						break
					}
					lo.After = p.Next
				}
				require.Equal(b, n, rows)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
		b.Run("op=sync/decoder="+dec.name, func(b *testing.B) {
			for b.Loop() {
				res, err := Sync(ctx, src, b.TempDir(), &SyncOptions{decode: dec.decode})
				require.NoError(b, err)
				require.EqualValues(b, n, res.Rows)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
