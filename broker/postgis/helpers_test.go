package postgis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/internal/testenv"
)

// newPool connects to the test database (testenv.Postgres: skipped, or
// failed under GEODLQ_REQUIRE_SERVICES, when the server is unreachable)
// and closes the pool when the test ends.
func newPool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.Postgres(t))
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// testSchema returns a schema name unique to this test run, and drops the
// schema with everything in it when the test ends.
func testSchema(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "geodlq_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testenv.Postgres(t))
		if err != nil {
			t.Errorf("dropping schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("dropping schema %s: %v", name, err)
		}
	})
	return name
}

// newStore returns a migrated store in a schema of its own.
func newStore(t *testing.T, opts *postgis.Options) *postgis.Store {
	t.Helper()
	var o postgis.Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = testSchema(t)
	}
	o.Migrate = true
	s, err := postgis.New(context.Background(), newPool(t, 4), &o)
	require.NoError(t, err)
	return s
}
