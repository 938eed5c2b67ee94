package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/memory"
)

type harness struct{ b *memory.Broker }

func (h *harness) MakeStore(context.Context) (brokertest.Store, error) { return h.b, nil }

// Reopen returns the same broker: an in-process broker has one instance
// per process, and a crashed consumer is one that stops acking.
func (h *harness) Reopen(context.Context) (brokertest.Store, error) { return h.b, nil }

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: 200 * time.Millisecond, MaxMessageBytes: 64 << 10}
}

func (h *harness) Close() { _ = h.b.Close() }

func TestConformance(t *testing.T) {
	brokertest.RunConformanceTests(t, func(context.Context, *testing.T) (brokertest.Harness, error) {
		return &harness{b: memory.New(&memory.Options{LeaseTTL: 200 * time.Millisecond, MaxMessageBytes: 64 << 10})}, nil
	})
}
