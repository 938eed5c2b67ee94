// Package testenv locates the real servers geodlq's integration tests run
// against (PostgreSQL with PostGIS, Redis, NATS JetStream, RabbitMQ).
//
// Addresses come from environment variables with loopback defaults. When a
// server is unreachable the test is skipped with a loud message — unless
// GEODLQ_REQUIRE_SERVICES is set (as `make test` and CI do, after starting
// every server), in which case it fails: integration tests never skip
// silently in CI.
package testenv

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// Defaults, overridable by the environment variable of the same meaning.
const (
	DefaultPostgres = "postgres://postgres@127.0.0.1:5432/geodlq_test?sslmode=disable" // GEODLQ_TEST_POSTGRES
	DefaultRedis    = "127.0.0.1:6379"                                                 // GEODLQ_TEST_REDIS
	DefaultNATS     = "nats://127.0.0.1:4222"                                          // GEODLQ_TEST_NATS
	DefaultAMQP     = "amqp://guest:guest@127.0.0.1:5672/"                             // GEODLQ_TEST_AMQP
)

// Required reports whether unreachable servers fail tests instead of
// skipping them.
func Required() bool { return os.Getenv("GEODLQ_REQUIRE_SERVICES") != "" }

func get(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// reach dials hostport and fails or skips tb when it cannot.
func reach(tb testing.TB, name, hostport string) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", hostport, 3*time.Second)
	if err == nil {
		_ = c.Close()
		return
	}
	if Required() {
		tb.Fatalf("testenv: %s at %s is unreachable (%v); run scripts/services.sh", name, hostport, err)
	}
	tb.Skipf("testenv: SKIPPING: %s at %s is unreachable (%v); run scripts/services.sh or set GEODLQ_REQUIRE_SERVICES=1 to fail instead", name, hostport, err)
}

func hostOf(tb testing.TB, raw string) string {
	tb.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("testenv: bad URL %q: %v", raw, err)
	}
	return u.Host
}

// Postgres returns the DSN of a PostgreSQL database with PostGIS available.
func Postgres(tb testing.TB) string {
	tb.Helper()
	dsn := get("GEODLQ_TEST_POSTGRES", DefaultPostgres)
	reach(tb, "PostgreSQL", hostOf(tb, dsn))
	return dsn
}

// Redis returns the host:port of a Redis server.
func Redis(tb testing.TB) string {
	tb.Helper()
	addr := get("GEODLQ_TEST_REDIS", DefaultRedis)
	reach(tb, "Redis", addr)
	return addr
}

// NATS returns the URL of a NATS server with JetStream enabled.
func NATS(tb testing.TB) string {
	tb.Helper()
	u := get("GEODLQ_TEST_NATS", DefaultNATS)
	reach(tb, "NATS", hostOf(tb, u))
	return u
}

// AMQP returns the URL of a RabbitMQ server.
func AMQP(tb testing.TB) string {
	tb.Helper()
	u := get("GEODLQ_TEST_AMQP", DefaultAMQP)
	reach(tb, "RabbitMQ", hostOf(tb, u))
	return u
}
