package postgis_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/broker/postgis/internal/pgtest"
	"github.com/geodlq/geodlq/internal/testenv"
)

// storeURL returns dsn with the query parameters set.
func storeURL(t *testing.T, dsn string, params map[string]string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// schemaExists reports whether the schema is in the database.
func schemaExists(t *testing.T, pool *pgxpool.Pool, schema string) bool {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n))
	return n == 1
}

// TestOpenStore: the postgres:// opener reads its parameters, migrates
// only with Create, writes nothing otherwise, and answers ErrNoStore where
// there is no store.
func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	require.Contains(t, broker.StoreSchemes(), "postgres")
	require.Contains(t, broker.StoreSchemes(), "postgresql")
	admin := pgtest.NewPool(t, 2)
	schema := pgtest.Schema(t)
	raw := storeURL(t, testenv.Postgres(t), map[string]string{"geodlq_schema": schema, "lease_ttl": "1500ms", "max_message_bytes": "2048"})

	for _, oo := range []broker.OpenOptions{{ReadOnly: true}, {}, {ReadOnly: true, Create: true}} {
		_, err := broker.OpenStore(ctx, raw, &oo)
		require.ErrorIs(t, err, broker.ErrNoStore, "%+v: no table, no store", oo)
		require.False(t, schemaExists(t, admin, schema), "%+v: nothing was written", oo)
	}

	s, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	require.Equal(t, "postgis", s.Name())
	require.Equal(t, pgx.Identifier{schema, "dead_letters"}.Sanitize(), postgis.Table(s))
	require.Equal(t, 2048, s.MaxMessageBytes("d"), "max_message_bytes")
	require.NoError(t, s.Publish(ctx, "d", bowtie(t, "idem:open:1")))
	recs, err := s.Fetch(ctx, "d", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	var left time.Duration
	require.NoError(t, admin.QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM lease_until - now()) * 1e9 FROM `+postgis.Table(s)+` WHERE id = $1`,
		mustID(t, recs[0])).Scan(&left))
	require.True(t, left > time.Second && left <= 1500*time.Millisecond, "lease_ttl: %v left", left)
	require.NoError(t, s.Ack(ctx, recs[0]))
	var pool *pgxpool.Pool
	require.True(t, s.As(&pool))
	require.NoError(t, s.Close())
	require.Error(t, pool.Ping(ctx), "the store closes the pool it opened")

	// Open again, without Create: the store is there.
	s, err = broker.OpenStore(ctx, "postgresql"+raw[len("postgres"):], nil)
	require.NoError(t, err)
	require.NoError(t, s.Publish(ctx, "d", bowtie(t, "idem:open:2")))
	require.NoError(t, s.Close())

	// Read-only: reads work, the server refuses every write.
	ro, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	p, err := ro.List(ctx, broker.ListOptions{IncludeReplayed: true})
	require.NoError(t, err)
	require.Len(t, p.Entries, 2)
	_, err = ro.Stats(ctx, broker.StatsOptions{})
	require.NoError(t, err)
	_, err = ro.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: time.Now().Add(time.Hour)}, DryRun: true})
	require.NoError(t, err, "a dry run reads only")
	require.Error(t, ro.Publish(ctx, "d", bowtie(t, "idem:open:3")))
	_, err = ro.Fetch(ctx, "d", broker.Filter{}, 10)
	require.Error(t, err, "leasing is a write")
	_, err = ro.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: time.Now().Add(time.Hour)}})
	require.Error(t, err)
	require.Equal(t, 2, count(t, ro, "true"), "nothing written")

	// Another table in the same schema, by geodlq_table.
	other := storeURL(t, raw, map[string]string{"geodlq_table": "other_dlq"})
	_, err = broker.OpenStore(ctx, other, nil)
	require.ErrorIs(t, err, broker.ErrNoStore)
	s, err = broker.OpenStore(ctx, other, &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	require.Equal(t, pgx.Identifier{schema, "other_dlq"}.Sanitize(), postgis.Table(s))
	require.NoError(t, s.Close())
}

// TestOpenStoreRefuses: bad parameters are invalid arguments; a table of
// someone else's, or a database that does not exist, is no store.
func TestOpenStoreRefuses(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.Postgres(t)
	for _, params := range []map[string]string{
		{"lease_ttl": "soon"}, {"lease_ttl": "-1s"}, {"lease_ttl": "0s"},
		{"max_message_bytes": "0"}, {"max_message_bytes": "1e6"}, {"max_message_bytes": "-5"},
		{"geodlq_schema": "Bad"}, {"geodlq_table": "a-b"},
	} {
		_, err := broker.OpenStore(ctx, storeURL(t, dsn, params), &broker.OpenOptions{Create: true})
		require.ErrorIs(t, err, broker.ErrInvalidArgument, "%v", params)
	}

	// A table by the store's name that is not a geodlq store.
	schema := pgtest.Schema(t)
	admin := pgtest.NewPool(t, 2)
	_, err := admin.Exec(ctx, `CREATE SCHEMA `+schema+`; CREATE TABLE `+schema+`.dead_letters (id int)`)
	require.NoError(t, err)
	_, err = broker.OpenStore(ctx, storeURL(t, dsn, map[string]string{"geodlq_schema": schema}), &broker.OpenOptions{ReadOnly: true})
	require.ErrorIs(t, err, broker.ErrNoStore)

	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Path = "/geodlq_no_such_database"
	_, err = broker.OpenStore(ctx, u.String(), &broker.OpenOptions{ReadOnly: true})
	require.ErrorIs(t, err, broker.ErrNoStore, "a database that does not exist")
	_, err = broker.OpenStore(ctx, u.String(), &broker.OpenOptions{Create: true})
	require.ErrorIs(t, err, broker.ErrNoStore, "the store does not create databases")
}

// TestOpenConnectTimeout: a server that accepts TCP and never answers
// fails the open within ConnectTimeout (issue 9: geodlq list hung for over
// a minute), whatever the sslmode, and a connect_timeout in the URL cannot
// extend it.
func TestOpenConnectTimeout(t *testing.T) {
	ctx := context.Background()
	stalled := pgtest.NewStalled(t)
	const timeout = 400 * time.Millisecond
	for _, params := range []map[string]string{
		{"sslmode": "disable"}, {"sslmode": "prefer"}, {"connect_timeout": "60"},
	} {
		for _, oo := range []broker.OpenOptions{{ReadOnly: true}, {Create: true}, {}} {
			oo.ConnectTimeout = timeout
			start := time.Now()
			_, err := broker.OpenStore(ctx, storeURL(t, stalled, params), &oo)
			took := time.Since(start)
			require.Error(t, err)
			require.Less(t, took, timeout+time.Second, "%v %+v: failed after %v", params, oo, took)
			require.Contains(t, err.Error(), "connect timeout")
		}
	}
}

// TestLaterConnectTimeout: every connection the store's pool makes after
// the open has the same timeout: a server that stops answering fails a
// List within ConnectTimeout, not pgx's two minutes.
func TestLaterConnectTimeout(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	s, err := broker.OpenStore(ctx, storeURL(t, testenv.Postgres(t), map[string]string{"geodlq_schema": schema}), &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	proxy := pgtest.NewProxy(t)
	const timeout = 500 * time.Millisecond
	s, err = broker.OpenStore(ctx, storeURL(t, proxy.DSN(), map[string]string{"geodlq_schema": schema}),
		&broker.OpenOptions{ReadOnly: true, ConnectTimeout: timeout})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.List(ctx, broker.ListOptions{})
	require.NoError(t, err)

	proxy.Stall(true)
	var pool *pgxpool.Pool
	require.True(t, s.As(&pool))
	pool.Reset() // the next query needs a new connection
	start := time.Now()
	_, err = s.List(ctx, broker.ListOptions{})
	took := time.Since(start)
	require.Error(t, err)
	require.Less(t, took, timeout+time.Second, "failed after %v", took)
}
