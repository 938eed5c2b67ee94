// Package redistest gives geodlq's Redis integration tests a client on the
// test server ([testenv.Redis]) and a key prefix of their own, whose keys
// are deleted when the test ends. It is for tests only.
//
// Each module whose tests need it holds a copy (broker/redisstream,
// replay/redisclaims), so that no module requires a test-support module;
// internal/importrule's TestHelperCopies keeps the copies identical. Its
// own tests are broker/redisstream's.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/testenv"
)

// Client connects to the test Redis (testenv.Redis: skipped, or failed
// under GEODLQ_REQUIRE_SERVICES, when the server is unreachable); the
// client is closed when the test ends.
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(tb)})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Prefix returns a key prefix no other run uses,
// "geodlqtest:<kind>:<UTC time>:<12 hex digits>", and deletes every key
// that starts with it, or with "{" and it (the keys a store keeps in a
// stream's hash slot, such as "{<prefix>:<destination>}:dedup:…"), when
// the test ends.
func Prefix(tb testing.TB, kind string) string {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "geodlqtest:" + kind + ":" + time.Now().UTC().Format("20060102T150405") + ":" + hex.EncodeToString(b[:])
	addr := testenv.Redis(tb)
	tb.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		keys := Keys(tb, c, p)
		for len(keys) > 0 {
			n := min(len(keys), 500)
			require.NoError(tb, c.Del(ctx, keys[:n]...).Err())
			keys = keys[n:]
		}
	})
	return p
}

// Keys returns every key that starts with prefix, or with "{" and prefix,
// sorted.
func Keys(tb testing.TB, c redis.UniversalClient, prefix string) []string {
	tb.Helper()
	ctx := context.Background()
	var keys []string
	for _, pat := range []string{prefix + "*", `\{` + prefix + "*"} {
		iter := c.Scan(ctx, 0, pat, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		require.NoError(tb, iter.Err())
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// URL returns the redis:// URL of the test Redis, database 0, with the
// given query ("" for none).
func URL(tb testing.TB, query string) string {
	tb.Helper()
	u := "redis://" + testenv.Redis(tb) + "/0"
	if query != "" {
		u += "?" + query
	}
	return u
}
