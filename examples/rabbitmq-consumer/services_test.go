package main

// Where this example's tests find their servers, and what they make there
// for one test. Addresses come from environment variables with loopback
// defaults; an unreachable server skips the test with a loud message, or
// fails it when GEODLQ_REQUIRE_SERVICES is set (as geodlq's make test and
// CI do). It is in this directory so that a copy of it is whole.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// requireServices reports whether unreachable servers fail tests instead
// of skipping them.
func requireServices() bool { return os.Getenv("GEODLQ_REQUIRE_SERVICES") != "" }

// testEnvOr returns the environment variable name, or def when it is unset.
func testEnvOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// reach dials hostport and skips or fails t when it cannot.
func reach(t testing.TB, name, hostport string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", hostport, 3*time.Second)
	if err == nil {
		_ = c.Close()
		return
	}
	if requireServices() {
		t.Fatalf("%s at %s is unreachable (%v)", name, hostport, err)
	}
	t.Skipf("SKIPPING: %s at %s is unreachable (%v); set GEODLQ_REQUIRE_SERVICES=1 to fail instead", name, hostport, err)
}

// hostOf returns the host:port of a URL.
func hostOf(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("bad URL %q: %v", raw, err)
	}
	return u.Host
}

// testAMQP returns the URL of a RabbitMQ server ($GEODLQ_TEST_AMQP).
func testAMQP(t testing.TB) string {
	t.Helper()
	u := testEnvOr("GEODLQ_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")
	reach(t, "RabbitMQ", hostOf(t, u))
	return u
}

// testPostgres returns the DSN of a PostgreSQL database with PostGIS
// ($GEODLQ_TEST_POSTGRES).
func testPostgres(t testing.TB) string {
	t.Helper()
	dsn := testEnvOr("GEODLQ_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/geodlq_test?sslmode=disable")
	reach(t, "PostgreSQL", hostOf(t, dsn))
	return dsn
}

// testPool connects to testPostgres with at most maxConns connections,
// closed when the test ends.
func testPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testPostgres(t))
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// testSchema returns a schema name no other run uses, and drops the schema
// with everything in it when the test ends.
func testSchema(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "geodlq_test_" + hex.EncodeToString(b[:])
	dsn := testPostgres(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
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
