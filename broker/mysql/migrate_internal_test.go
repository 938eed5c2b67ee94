package mysql

import (
	"context"
	sqldriver "database/sql/driver"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/mysql/internal/mysqltest"
	"github.com/geodlq/geodlq/broker/mysql/internal/schema"
)

// TestMigrateToVersion2: a table of schema version 1 holding records, as
// a geodlq of that version wrote them, is refused read-only, and a
// read-write open migrates it and indexes every record: summaries, sorts,
// the search table.
func TestMigrateToVersion2(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	d := &driver{db: db, name: DefaultTable, table: schema.Quote(DefaultTable), search: schema.Quote(DefaultTable + "_search")}
	require.NoError(t, schema.Migrate(ctx, db, d.target(), migrations[:1], true))
	msgs := brokertest.Messages(t, brokertest.ListingInputs())
	for _, m := range msgs {
		env, err := broker.EnvelopeOf(m)
		require.NoError(t, err)
		hdr, _, err := encodeHeaders(m.Headers)
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, d.render(`INSERT INTO {t} (destination, headers, body, is_envelope, event_id, failure_class,
			dead_lettered_us, dead_lettered_ns, published_at) VALUES ('d', ?, ?, TRUE, ?, ?, ?, 0, UTC_TIMESTAMP(6))`),
			hdr, m.Body, []byte(env.EventID), []byte(env.FailureClass), env.DeadLetteredAt.UnixMicro())
		require.NoError(t, err)
	}
	_, err := New(ctx, db, &Options{StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.ErrorContains(t, err, "a read-write open migrates it", "a read-only open reads only the current version")

	s, err := New(ctx, db, nil)
	require.NoError(t, err)
	defer s.Close()
	v, err := schema.Version(ctx, db, d.target())
	require.NoError(t, err)
	require.Equal(t, SchemaVersion, v)
	var unindexed, searched int
	require.NoError(t, db.QueryRow(d.render(`SELECT COUNT(*) FROM {t} WHERE NOT indexed`)).Scan(&unindexed))
	require.Zero(t, unindexed, "every record indexed")
	require.NoError(t, db.QueryRow(d.render(`SELECT COUNT(*) FROM {s}`)).Scan(&searched))
	require.Equal(t, len(msgs), searched, "every record's search text")
	top, err := s.List(ctx, broker.ListOptions{Sort: broker.SortVertexCount, Descending: true, Limit: 1, Summaries: true, Total: true})
	require.NoError(t, err)
	require.Equal(t, 100, top.Entries[0].Summary.VertexCount)
	require.Equal(t, len(msgs), top.Total)
	found, err := s.List(ctx, broker.ListOptions{Filter: broker.Filter{Text: "sudan"}, Summaries: true})
	require.NoError(t, err)
	require.Len(t, found.Entries, 2)
}

// TestMigrateToCounts: a populated table of schema version 2 is counted
// by migration 3 exactly once, even when a first run was cut short after
// its triggers were created and writers wrote through them before the
// migration ran again; the counts then follow the writes.
func TestMigrateToCounts(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	d := &driver{db: db, name: DefaultTable, table: schema.Quote(DefaultTable), search: schema.Quote(DefaultTable + "_search"), limit: 1 << 20, packet: 64 << 20, ttl: time.Minute}
	d.insertSQL, d.ackSQL = d.render(insertSQL), d.render(ackSQL)
	require.NoError(t, schema.Migrate(ctx, db, d.target(), migrations[:2], true))
	msgs := brokertest.Messages(t, brokertest.ListingInputs())
	require.NoError(t, d.PublishBatch(ctx, "a", msgs))
	require.NoError(t, d.PublishBatch(ctx, "b", msgs[:4]))
	recs, err := d.Fetch(ctx, "a", broker.Filter{}, 3)
	require.NoError(t, err)
	require.NoError(t, d.Ack(ctx, recs[0]))

	// A first run cut short: the step's statements up to the insert
	// trigger, on a connection that then goes away (and its table locks
	// with it), and a write through the trigger meanwhile.
	step := migrations[2]
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	for _, stmt := range step.Statements {
		_, err := conn.ExecContext(ctx, d.render(stmt))
		require.NoError(t, err)
		if strings.Contains(stmt, "CREATE TRIGGER {n}_count_insert") {
			break
		}
	}
	// The connection is discarded, not returned to the pool.
	require.ErrorIs(t, conn.Raw(func(any) error { return sqldriver.ErrBadConn }), sqldriver.ErrBadConn)
	_ = conn.Close()
	require.NoError(t, d.PublishBatch(ctx, "c", msgs[:2]))

	s, err := New(ctx, db, nil)
	require.NoError(t, err)
	defer s.Close()
	v, err := schema.Version(ctx, db, d.target())
	require.NoError(t, err)
	require.Equal(t, SchemaVersion, v)
	var all, counted int
	require.NoError(t, db.QueryRow(d.render(`SELECT COUNT(*) FROM {t}`)).Scan(&all))
	require.NoError(t, db.QueryRow(d.render(`SELECT COALESCE(SUM(n), 0) FROM `+countsFrom)).Scan(&counted))
	require.Equal(t, len(msgs)+4+2, all)
	require.Equal(t, all, counted, "every record counted once")
	var leasedIndex int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = 'leased'`, DefaultTable).Scan(&leasedIndex))
	require.Equal(t, 1, leasedIndex)

	stats, err := s.Stats(ctx, broker.StatsOptions{})
	require.NoError(t, err)
	var pending, leased, replayed int
	for _, c := range stats {
		pending, leased, replayed = pending+c.Pending, leased+c.Leased, replayed+c.Replayed
	}
	require.Equal(t, [3]int{all - 3, 2, 1}, [3]int{pending, leased, replayed})
	p, err := s.List(ctx, broker.ListOptions{Destination: "a", Total: true, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, len(msgs)-1, p.Total)
}
