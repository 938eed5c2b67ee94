// Package mysqltest gives broker/mysql's integration tests a database of
// their own on the test server (GEODLQ_TEST_MYSQL, default
// root@tcp(127.0.0.1:3306)/test), dropped when the test ends. An
// unreachable server skips the test loudly, or fails it under
// GEODLQ_REQUIRE_SERVICES. It is for tests only.
package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/testenv"
)

// DefaultDSN is the test server's DSN unless GEODLQ_TEST_MYSQL is set.
const DefaultDSN = "root@tcp(127.0.0.1:3306)/test"

// Server returns the parsed DSN of the test server, after checking that it
// is reachable.
func Server(tb testing.TB) *mysql.Config {
	tb.Helper()
	dsn := os.Getenv("GEODLQ_TEST_MYSQL")
	if dsn == "" {
		dsn = DefaultDSN
	}
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(tb, err, "GEODLQ_TEST_MYSQL")
	c, err := net.DialTimeout(cfg.Net, cfg.Addr, 3*time.Second)
	if err != nil {
		if testenv.Required() {
			tb.Fatalf("mysqltest: MySQL/MariaDB at %s is unreachable (%v); run scripts/services.sh", cfg.Addr, err)
		}
		tb.Skipf("mysqltest: SKIPPING: MySQL/MariaDB at %s is unreachable (%v); run scripts/services.sh or set GEODLQ_REQUIRE_SERVICES=1 to fail instead", cfg.Addr, err)
	}
	_ = c.Close()
	return cfg
}

// Database creates a database unique to this test ("geodlq_test_<12 hex
// digits>"), drops it when the test ends, and returns the DSN config of a
// connection to it.
func Database(tb testing.TB) *mysql.Config {
	tb.Helper()
	cfg := Server(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "geodlq_test_" + hex.EncodeToString(b[:])
	admin := Open(tb, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`")
	require.NoError(tb, err)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			tb.Errorf("dropping database %s: %v", name, err)
			return
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			tb.Errorf("dropping database %s: %v", name, err)
		}
	})
	out := cfg.Clone()
	out.DBName = name
	return out
}

// Open opens a pool on cfg and closes it when the test ends.
func Open(tb testing.TB, cfg *mysql.Config) *sql.DB {
	tb.Helper()
	c, err := mysql.NewConnector(cfg)
	require.NoError(tb, err)
	db := sql.OpenDB(c)
	db.SetMaxIdleConns(8)
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// NewDB is Open on a fresh [Database].
func NewDB(tb testing.TB) *sql.DB {
	tb.Helper()
	return Open(tb, Database(tb))
}
