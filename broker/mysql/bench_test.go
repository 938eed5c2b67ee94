package mysql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/mysql"
	"github.com/geodlq/geodlq/broker/mysql/internal/mysqltest"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/benchenv"
)

const benchDest = "spatial.parcels.poison.dlt"

// openBench returns a store in a database of its own (dropped at the
// end), and its pool.
func openBench(b *testing.B) (*broker.Store, *sql.DB) {
	b.Helper()
	db := mysqltest.NewDB(b)
	s, err := mysql.New(context.Background(), db, &mysql.Options{Create: true,
		StoreOptions: broker.StoreOptions{LeaseTTL: 2 * time.Second, MaxMessageBytes: 256 << 10}})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	return s, db
}

// BenchmarkWrite publishes 2 KiB dlq.v1 envelopes, one at a time: each an
// INSERT in its own transaction, committed when Publish returns.
func BenchmarkWrite(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		return s.Publish(ctx, benchDest, m)
	})
}

// BenchmarkReplay fetches (leases) and acknowledges envelopes, 100 at a
// time.
func BenchmarkReplay(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Replay(b, s, s, benchDest)
}

// BenchmarkBareClientWrite is the ceiling: database/sql with
// go-sql-driver inserting the same row into the same table (with its
// indexes) — body, headers as JSON, the indexed fields known to the
// writer — in one autocommitted INSERT, whose outcome a cut connection
// leaves unknown (the store's transaction and COMMIT check are what the
// difference buys).
func BenchmarkBareClientWrite(b *testing.B) {
	set := benchenv.New(b)
	_, db := openBench(b)
	env := set.Envelope
	ge := env.GeometryError
	at := env.DeadLetteredAt
	insert := "INSERT INTO `" + mysql.DefaultTable + "` (destination, msg_key, headers, body, is_envelope, event_id, idempotency_key," +
		" failure_class, failed_stage, epsg, reason_kind, dead_lettered_us, dead_lettered_ns, loc_x, loc_y, published_at)" +
		" VALUES (?, ?, ?, ?, TRUE, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))"
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		hj, err := json.Marshal(m.Headers)
		if err != nil {
			return err
		}
		_, err = db.ExecContext(ctx, insert, []byte(benchDest), m.Key, hj, m.Body, []byte(env.EventID),
			[]byte(m.Headers[broker.HeaderIdempotencyKey]), []byte(env.FailureClass), []byte(env.FailedStage),
			int64(broker.EPSGOf(env)), []byte(ge.Kind), at.UnixMicro(), int64(at.Nanosecond()%1000), ge.Location[0], ge.Location[1])
		return err
	})
}

// BenchmarkStats is Stats over 20,000 records (5 destinations) from the
// counts the triggers keep, against the baseline in the same run: the
// same counts by a GROUP BY over every record (a time bucket, which the
// counts cannot answer), and Page.Total of a class filter, by the counts
// and by COUNT(*) (the same filter with an Until that every record
// passes: a dead-letter time the counts cannot answer).
func BenchmarkStats(b *testing.B) {
	ctx := context.Background()
	s, _ := openBench(b)
	msgs := brokertest.Messages(b, brokertest.ListingInputs())
	batch := make([]*broker.Message, 0, 500)
	for i := 0; len(batch) < cap(batch); i++ {
		batch = append(batch, msgs[i%len(msgs)])
	}
	for i := range 40 {
		require.NoError(b, s.PublishBatch(ctx, fmt.Sprintf("d%d", i%5), batch))
	}
	for _, bc := range []struct {
		name string
		opts broker.StatsOptions
	}{
		{"counts", broker.StatsOptions{BySource: true}},
		{"groupby", broker.StatsOptions{BySource: true, Bucket: 1000 * time.Hour}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				cs, err := s.Stats(ctx, bc.opts)
				require.NoError(b, err)
				require.NotEmpty(b, cs)
			}
		})
	}
	for _, bc := range []struct {
		name string
		f    broker.Filter
	}{
		{"total-counts", broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}},
		{"total-count", broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}, Until: time.Now().Add(1000 * time.Hour)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				p, err := s.List(ctx, broker.ListOptions{Filter: bc.f, Total: true, Summaries: true, Limit: 10})
				require.NoError(b, err)
				require.NotZero(b, p.Total)
			}
		})
	}
}
