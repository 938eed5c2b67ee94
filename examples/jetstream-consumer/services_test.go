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

	"github.com/redis/go-redis/v9"
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

// testNATS returns the URL of a NATS server with JetStream
// ($GEODLQ_TEST_NATS).
func testNATS(t testing.TB) string {
	t.Helper()
	u := testEnvOr("GEODLQ_TEST_NATS", "nats://127.0.0.1:4222")
	reach(t, "NATS", hostOf(t, u))
	return u
}

// testRedis returns the host:port of a Redis server ($GEODLQ_TEST_REDIS).
func testRedis(t testing.TB) string {
	t.Helper()
	addr := testEnvOr("GEODLQ_TEST_REDIS", "127.0.0.1:6379")
	reach(t, "Redis", addr)
	return addr
}

// testRedisClient connects to testRedis; the client is closed when the
// test ends.
func testRedisClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testRedis(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testRedisPrefix returns a key prefix no other run uses, and deletes every
// key that starts with it, or with "{" and it, when the test ends.
func testRedisPrefix(t testing.TB, kind string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "geodlqtest:" + kind + ":" + time.Now().UTC().Format("20060102T150405") + ":" + hex.EncodeToString(b[:])
	addr := testRedis(t)
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		for _, pat := range []string{p + "*", `\{` + p + "*"} {
			iter := c.Scan(ctx, 0, pat, 1000).Iterator()
			var keys []string
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
			}
			require.NoError(t, iter.Err())
			for len(keys) > 0 {
				n := min(len(keys), 500)
				require.NoError(t, c.Del(ctx, keys[:n]...).Err())
				keys = keys[n:]
			}
		}
	})
	return p
}
