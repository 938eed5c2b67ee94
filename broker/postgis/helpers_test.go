package postgis_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/broker/postgis/internal/pgtest"
)

// newStore returns a migrated store in a schema of its own, closed when
// the test ends.
func newStore(t *testing.T, opts *postgis.Options) *broker.Store {
	t.Helper()
	var o postgis.Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = pgtest.Schema(t)
	}
	o.Create = true
	s, err := postgis.New(context.Background(), pgtest.NewPool(t, 4), &o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// poolOf returns the store's pool.
func poolOf(t *testing.T, s *broker.Store) *pgxpool.Pool {
	t.Helper()
	var p *pgxpool.Pool
	require.True(t, s.As(&p), "a PostGIS store gives its pool")
	return p
}

// count counts the rows of the store's table that satisfy where.
func count(t *testing.T, s *broker.Store, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, poolOf(t, s).QueryRow(context.Background(), `SELECT count(*) FROM `+postgis.Table(s)+` WHERE `+where, args...).Scan(&n))
	return n
}

// write runs the driver's INSERT and reports what it did.
func write(t *testing.T, s *broker.Store, destination string, m *broker.Message) postgis.WriteResult {
	t.Helper()
	res, err := postgis.WriteForTest(context.Background(), s, destination, m)
	require.NoError(t, err)
	return res
}

// publishAll publishes msgs one by one.
func publishAll(t *testing.T, s *broker.Store, destination string, msgs []*broker.Message) {
	t.Helper()
	for i, m := range msgs {
		require.NoError(t, s.Publish(context.Background(), destination, m), "Publish #%d", i)
	}
}

// lister is the driver's own List, without the portable store's filter
// after it: what the SQL selects.
func lister(t *testing.T, s *broker.Store) broker.Lister {
	t.Helper()
	l, ok := s.Driver().(broker.Lister)
	require.True(t, ok)
	return l
}
