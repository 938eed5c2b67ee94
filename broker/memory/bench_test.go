package memory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/internal/benchenv"
)

// The benchmarks use the conformance harness's settings.
func newBenchBroker() *broker.Store {
	return memory.New(&memory.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 200 * time.Millisecond, MaxMessageBytes: 64 << 10}})
}

// BenchmarkWrite publishes 2 KiB dlq.v1 envelopes, one at a time.
func BenchmarkWrite(b *testing.B) {
	set := benchenv.New(b)
	mb := newBenchBroker()
	b.Cleanup(func() { _ = mb.Close() })
	dest := benchenv.Name("bench")
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		return mb.Publish(ctx, dest, m)
	})
}

// BenchmarkReplay fetches and acknowledges envelopes, 100 at a time.
func BenchmarkReplay(b *testing.B) {
	set := benchenv.New(b)
	mb := newBenchBroker()
	b.Cleanup(func() { _ = mb.Close() })
	set.Replay(b, mb, mb, benchenv.Name("bench"))
}

// BenchmarkBareClientWrite is the ceiling: what any in-process queue must
// do with a message it is handed and must not retain — copy it (body,
// key, headers) and append it under a mutex.
func BenchmarkBareClientWrite(b *testing.B) {
	set := benchenv.New(b)
	var q struct {
		mu   sync.Mutex
		msgs []*broker.Message
	}
	set.Loop(b, func(_ context.Context, _ int, m *broker.Message) error {
		c := m.Clone()
		q.mu.Lock()
		q.msgs = append(q.msgs, c)
		q.mu.Unlock()
		return nil
	})
}
