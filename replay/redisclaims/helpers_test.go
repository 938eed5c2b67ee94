package redisclaims_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/testenv"
)

// newClient connects to the test Redis; the client is closed when t ends.
func newClient(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// uniquePrefix returns a key prefix no other run uses, and deletes every
// key under it when t ends.
func uniquePrefix(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "geodlqtest:claims:" + time.Now().UTC().Format("20060102T150405") + ":" + hex.EncodeToString(b[:])
	addr := testenv.Redis(t)
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, p+"*", 1000).Iterator()
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
	})
	return p
}
