package postgis_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/broker/postgis/internal/pgtest"
	"github.com/geodlq/geodlq/internal/benchenv"
)

const benchDest = "spatial.parcels.poison.dlt"

// openBench returns a migrated store in a schema of its own (dropped at
// the end), with the conformance harness's options, and its pool.
func openBench(b *testing.B) (*broker.Store, *pgxpool.Pool) {
	b.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(b, 4)
	s, err := postgis.New(ctx, pool, &postgis.Options{Schema: pgtest.Schema(b), Create: true,
		StoreOptions: broker.StoreOptions{LeaseTTL: 2 * time.Second, MaxMessageBytes: 256 << 10}})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	return s, pool
}

// BenchmarkWrite publishes 2 KiB dlq.v1 envelopes, one at a time: each an
// INSERT committed (synchronous_commit on) when Publish returns.
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

// BenchmarkBareClientWrite is the ceiling: pgx on the same pool settings
// inserting the same row into the same table (made by Create, with its
// indexes) — body, headers, the envelope as jsonb, its indexed fields
// (known to the writer without decoding the envelope), the geometry
// parsed by ST_GeomFromGeoJSON and the location point — in one
// autocommitted INSERT, without the store's duplicate absorption (ON
// CONFLICT) and parse-error capture.
func BenchmarkBareClientWrite(b *testing.B) {
	set := benchenv.New(b)
	s, pool := openBench(b)
	env := set.Envelope
	ge := env.GeometryError
	at := env.DeadLetteredAt
	geom := string(env.Geometry.Inline)
	insert := `INSERT INTO ` + postgis.Table(s) + ` (destination, msg_key, headers, body, is_envelope, envelope,
		event_id, idempotency_key, failure_class, failed_stage, epsg, reason_kind, reason, source_topic,
		dead_lettered_at, dead_lettered_ns, geom, geom_status, location)
	VALUES ($1, $2, $3::jsonb, $4, true, $5::jsonb, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
		ST_SetSRID(ST_GeomFromGeoJSON($16::text), 4326), 'parsed', ST_SetSRID(ST_MakePoint($17, $18), 4326))`
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		hj, err := json.Marshal(m.Headers)
		if err != nil {
			return err
		}
		_, err = pool.Exec(ctx, insert, benchDest, m.Key, string(hj), m.Body, string(m.Body),
			env.EventID, m.Headers[broker.HeaderIdempotencyKey], string(env.FailureClass), string(env.FailedStage),
			int64(broker.EPSGOf(env)), ge.Kind, ge.Reason, env.Source.Topic, at, int16(at.Nanosecond()%1000),
			geom, ge.Location[0], ge.Location[1])
		return err
	})
}
