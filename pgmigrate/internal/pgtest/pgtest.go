// Package pgtest gives geodlq's PostgreSQL integration tests a pool on
// the test database ([testenv.Postgres]) and a schema of their own, dropped
// when the test ends. It is for tests only.
//
// Each module whose tests need it holds a copy (broker/postgis,
// replay/pgclaims, pgmigrate, warehouse/enginetest), so that no module
// requires a test-support module; internal/importrule's TestHelperCopies
// keeps the copies identical. Its own tests are broker/postgis's.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/testenv"
)

// NewPool connects to the test database (testenv.Postgres: skipped, or
// failed under GEODLQ_REQUIRE_SERVICES, when the server is unreachable)
// with at most maxConns connections, and closes the pool when the test
// ends.
func NewPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.Postgres(tb))
	require.NoError(tb, err)
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool
}

// Schema returns a schema name unique to this test run
// ("geodlq_test_<12 hex digits>"), and drops the schema with everything in
// it when the test ends.
func Schema(tb testing.TB) string {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "geodlq_test_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testenv.Postgres(tb))
		if err != nil {
			tb.Errorf("dropping schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
			tb.Errorf("dropping schema %s: %v", name, err)
		}
	})
	return name
}
