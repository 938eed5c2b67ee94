package redisstream_test

import (
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker/redisstream/internal/redistest"
)

// newClient connects to the test Redis; the client is closed when t ends.
func newClient(t testing.TB) *redis.Client { t.Helper(); return redistest.Client(t) }

// uniquePrefix returns a key prefix no other run uses, and deletes every
// key under it when t ends.
func uniquePrefix(t testing.TB) string { t.Helper(); return redistest.Prefix(t, "stream") }

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
