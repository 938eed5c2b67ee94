package redisstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/testenv"
)

func redisAddr(t *testing.T) string { t.Helper(); return testenv.Redis(t) }

// newClient connects to the test Redis; the client is closed when t ends.
func newClient(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// uniquePrefix returns a key prefix no other run uses, and deletes every
// key under it when t ends.
func uniquePrefix(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "geodlqtest:stream:" + time.Now().UTC().Format("20060102T150405") + ":" + hex.EncodeToString(b[:])
	addr := redisAddr(t)
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, p+":*", 1000).Iterator()
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

// errGroup runs functions concurrently and returns the first error.
type errGroup struct {
	wg   sync.WaitGroup
	once sync.Once
	err  error
}

func (g *errGroup) Go(fn func() error) {
	g.wg.Go(func() {
		if err := fn(); err != nil {
			g.once.Do(func() { g.err = err })
		}
	})
}

func (g *errGroup) Wait() error {
	g.wg.Wait()
	return g.err
}
