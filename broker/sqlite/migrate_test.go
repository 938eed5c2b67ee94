package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
)

// schemaV0 is the table every geodlq before schema version 2 made, as it
// made it: its body comes before the triage columns.
const schemaV0 = `
CREATE TABLE IF NOT EXISTS dlq_records (
	id               INTEGER PRIMARY KEY AUTOINCREMENT,
	destination      TEXT    NOT NULL,
	msg_key          BLOB,
	headers          TEXT    NOT NULL DEFAULT '{}',
	body             BLOB    NOT NULL,
	is_envelope      INTEGER NOT NULL DEFAULT 0,
	event_id         TEXT,
	idempotency_key  TEXT,
	failure_class    TEXT,
	failed_stage     TEXT,
	epsg             INTEGER,
	reason_kind      TEXT,
	loc_x            REAL,
	loc_y            REAL,
	source_topic     TEXT,
	dead_lettered_at INTEGER,
	published_at     INTEGER NOT NULL,
	lease_token      TEXT,
	lease_until      INTEGER,
	deliveries       INTEGER NOT NULL DEFAULT 0,
	acked_at         INTEGER
);
CREATE INDEX IF NOT EXISTS dlq_pending ON dlq_records (destination, acked_at, id);
CREATE INDEX IF NOT EXISTS dlq_class ON dlq_records (destination, failure_class, failed_stage);
CREATE INDEX IF NOT EXISTS dlq_epsg ON dlq_records (destination, epsg);
CREATE INDEX IF NOT EXISTS dlq_time ON dlq_records (destination, dead_lettered_at);
CREATE INDEX IF NOT EXISTS dlq_event ON dlq_records (event_id);
`

// v0Store writes msgs into a file of schema version 0, row by row as the
// geodlq of that version did (the columns its Publish wrote), acknowledges
// the first, deletes the last (so that the id sequence runs past the
// highest id left), and returns the file's path.
func v0Store(t *testing.T, msgs []*broker.Message) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "v0.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(schemaV0)
	require.NoError(t, err)
	for i, m := range msgs {
		env, err := broker.EnvelopeOf(m)
		isEnv, class, event, at := 0, any(nil), any(nil), any(nil)
		if err == nil {
			isEnv, class, event, at = 1, string(env.FailureClass), env.EventID, env.DeadLetteredAt.UnixNano()
		}
		h, err := json.Marshal(m.Headers)
		require.NoError(t, err)
		_, err = db.Exec(`INSERT INTO dlq_records (destination, msg_key, headers, body, is_envelope, event_id, failure_class,
			dead_lettered_at, published_at) VALUES (?,?,?,?,?,?,?,?,?)`, "a", m.Key, string(h), m.Body, isEnv, event, class, at, int64(i+1))
		require.NoError(t, err)
	}
	_, err = db.Exec(`UPDATE dlq_records SET acked_at = 99 WHERE id = 1`)
	require.NoError(t, err)
	_, err = db.Exec(`DELETE FROM dlq_records WHERE id = ?`, len(msgs))
	require.NoError(t, err)
	return path
}

func migrationMessages(t *testing.T) []*broker.Message {
	msgs := brokertest.Messages(t, brokertest.ListingInputs())
	off, err := offload.New(offload.NewMemStore(), &offload.Options{Threshold: 16})
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	_, body, err := b.Build(context.Background(), envelope.Input{Payload: []byte(`{"event_id":"big","geometry":{"type":"LineString","coordinates":[[0,0],[1,1],[2,2]]}}`),
		IdempotencyKey: "idem:big", Err: brokertest.ListingInputs()[0].Err})
	require.NoError(t, err)
	msgs = append(msgs, &broker.Message{Body: body}, &broker.Message{Body: []byte("not an envelope")}, brokertest.Message(t, brokertest.SampleInputs()[0]))
	return msgs
}

// TestMigrateFromVersion0 opens a file of schema version 0: read-only it
// lists the old way (the portable store sorts and searches), read-write
// it is rebuilt at version 2 with every row, its id, its status and the
// id sequence kept, and every row's summary filled in.
func TestMigrateFromVersion0(t *testing.T) {
	ctx := context.Background()
	msgs := migrationMessages(t)
	path := v0Store(t, msgs)

	ro, err := sqlite.Open(ctx, path, &sqlite.Options{StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.NoError(t, err)
	before, err := ro.List(ctx, broker.ListOptions{IncludeReplayed: true, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, before.Entries, len(msgs)-1)
	c, ok := ro.Driver().(broker.ListCapabler)
	require.True(t, ok)
	require.Empty(t, c.ListCapabilities().Sorts, "a read-only file of version 0 sorts nothing itself")
	sorted, err := ro.List(ctx, broker.ListOptions{IncludeReplayed: true, Sort: broker.SortVertexCount, Descending: true, Limit: 3, Summaries: true, Total: true})
	require.NoError(t, err, "the portable store sorts a version 0 file")
	require.Equal(t, len(msgs)-1, sorted.Total)
	require.Equal(t, 100, sorted.Entries[0].Summary.VertexCount)
	found, err := ro.List(ctx, broker.ListOptions{IncludeReplayed: true, Filter: broker.Filter{Text: "sudan"}, Limit: 100})
	require.NoError(t, err)
	require.Len(t, found.Entries, 2, "and searches it")
	require.NoError(t, ro.Close())
	var v int
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	require.NoError(t, db.QueryRow(`PRAGMA user_version`).Scan(&v))
	require.Zero(t, v, "a read-only open migrates nothing")

	rw, err := sqlite.Open(ctx, path, nil)
	require.NoError(t, err)
	defer rw.Close()
	require.NoError(t, db.QueryRow(`PRAGMA user_version`).Scan(&v))
	require.Equal(t, 5, v)
	var unindexed int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM dlq_records WHERE summary IS NULL`).Scan(&unindexed))
	require.Zero(t, unindexed, "every row is indexed")
	require.NoError(t, db.Close())

	after, err := rw.List(ctx, broker.ListOptions{IncludeReplayed: true, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, after.Entries, len(before.Entries))
	for i, e := range after.Entries {
		b := before.Entries[i]
		require.Equal(t, b.Record.ID, e.Record.ID, "ids are kept")
		require.Equal(t, b.Record.Message.Body, e.Record.Message.Body, "bodies are kept")
		require.Equal(t, b.Status, e.Status, "statuses are kept")
		require.Equal(t, b.Record.Message.Headers, e.Record.Message.Headers)
	}
	sums, err := rw.List(ctx, broker.ListOptions{IncludeReplayed: true, Limit: 1000, Summaries: true, Sort: broker.SortVertexCount, Descending: true})
	require.NoError(t, err)
	require.Equal(t, 100, sums.Entries[0].Summary.VertexCount, "sorted in SQL after the migration")
	found, err = rw.List(ctx, broker.ListOptions{IncludeReplayed: true, Filter: broker.Filter{Text: "sudan"}, Limit: 100, Summaries: true})
	require.NoError(t, err)
	require.Len(t, found.Entries, 2, "the search index covers the migrated rows")

	// The id sequence went past the deleted last row: a new record does
	// not take its id.
	require.NoError(t, rw.Publish(ctx, "a", msgs[0]))
	p, err := rw.List(ctx, broker.ListOptions{Descending: true, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(len(msgs)+1), p.Entries[0].Record.ID, "ids are never reused")

	// The offloaded blob of the migrated row is found by purge's reference
	// check.
	res, err := rw.Purge(ctx, broker.PurgeRequest{Destination: "a", Filter: broker.Filter{EventIDs: []string{"big"}}, IncludePending: true, DryRun: true})
	require.NoError(t, err)
	require.Len(t, res.BlobURIs, 1)
	require.Len(t, res.Orphaned, 1)
}

// TestBackfillRowsOfAnOlderWriter: rows an older geodlq writes into a
// file of version 2 (without the new columns) are listed with summaries
// read from their bodies, and indexed when the file is next opened
// read-write.
func TestBackfillRowsOfAnOlderWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mixed.db")
	s, err := sqlite.Open(ctx, path, nil)
	require.NoError(t, err)
	m := brokertest.Message(t, brokertest.ListingInputs()[6])
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`INSERT INTO dlq_records (destination, headers, body, is_envelope, published_at) VALUES ('a', '{}', ?, 1, ?)`,
		m.Body, time.Now().UnixNano())
	require.NoError(t, err)
	p, err := s.List(ctx, broker.ListOptions{Summaries: true, Filter: broker.Filter{SourcePointer: "/properties/provider"}})
	require.NoError(t, err)
	require.Len(t, p.Entries, 1)
	require.Equal(t, 100, p.Entries[0].Summary.VertexCount, "summarised from the body")
	require.Equal(t, "usgs", p.Entries[0].Summary.Source)
	require.NoError(t, s.Close())
	s, err = sqlite.Open(ctx, path, nil)
	require.NoError(t, err)
	defer s.Close()
	var n int
	require.NoError(t, db.QueryRow(`SELECT vertex_count FROM dlq_records`).Scan(&n))
	require.Equal(t, 100, n, "indexed when opened read-write")
}
