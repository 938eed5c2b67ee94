package mysql

import (
	"context"
	"testing"

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
