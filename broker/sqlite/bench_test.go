package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/internal/benchenv"
)

// openBench opens a store in a new file with the conformance harness's
// options (WAL, synchronous=FULL).
func openBench(b *testing.B) (*broker.Store, string) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "dlq.db")
	s, err := sqlite.Open(context.Background(), path, opts)
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	return s, path
}

// BenchmarkWrite publishes 2 KiB dlq.v1 envelopes, one at a time: each a
// transaction on disk (fsync) when Publish returns.
func BenchmarkWrite(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	dest := "spatial.parcels.poison.dlt"
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		return s.Publish(ctx, dest, m)
	})
}

// BenchmarkReplay fetches and acknowledges envelopes, 100 at a time.
func BenchmarkReplay(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Replay(b, s, s, "spatial.parcels.poison.dlt")
}

// BenchmarkBareClientWrite is the ceiling: database/sql on the same
// driver, file settings (WAL, synchronous=FULL, one connection) and table
// (made by sqlite.Open, with its indexes), inserting the same row — the
// body, headers and the envelope's indexed fields, known to the writer
// without decoding the envelope.
func BenchmarkBareClientWrite(b *testing.B) {
	set := benchenv.New(b)
	_, path := openBench(b)
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	require.NoError(b, err)
	b.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	env := set.Envelope
	ge := env.GeometryError
	const dest = "spatial.parcels.poison.dlt"
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		hj, err := json.Marshal(m.Headers)
		if err != nil {
			return err
		}
		_, err = db.ExecContext(ctx, `INSERT INTO dlq_records
			(destination, msg_key, headers, body, is_envelope, event_id, idempotency_key, failure_class, failed_stage,
			 epsg, reason_kind, loc_x, loc_y, source_topic, dead_lettered_at, published_at)
			VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
			dest, m.Key, string(hj), m.Body, 1, env.EventID, m.Headers[broker.HeaderIdempotencyKey],
			string(env.FailureClass), string(env.FailedStage), broker.EPSGOf(env), ge.Kind,
			ge.Location[0], ge.Location[1], env.Source.Topic, env.DeadLetteredAt.UnixNano(), time.Now().UnixNano())
		return err
	})
}
