package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/memory"
)

type harness struct{ b *broker.Store }

func (h *harness) MakeStore(context.Context) (*broker.Store, error) { return h.b, nil }

// Reopen returns a new handle on the same in-process data: an in-process
// store has one instance per process, and a crashed consumer is one that
// stops acking.
func (h *harness) Reopen(context.Context) (*broker.Store, error) { return memory.Reopen(h.b), nil }

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: 200 * time.Millisecond, MaxMessageBytes: 64 << 10}
}

func (h *harness) Close() {}

func TestConformance(t *testing.T) {
	brokertest.RunConformanceTests(t, func(context.Context, *testing.T) (brokertest.Harness, error) {
		return &harness{b: memory.New(&memory.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 200 * time.Millisecond, MaxMessageBytes: 64 << 10}})}, nil
	})
}

func TestConsumerConformance(t *testing.T) {
	brokertest.RunConsumerTests(t, func(context.Context, *testing.T) (brokertest.ConsumerHarness, error) {
		s := memory.New(&memory.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 200 * time.Millisecond}})
		return brokertest.StoreConsumerHarness(s, "source", 200*time.Millisecond, func(s *broker.Store, d string, proc *broker.Processor) (*broker.Consumer, error) {
			return memory.NewConsumer(s, d, proc, &memory.ConsumerOptions{PollInterval: 10 * time.Millisecond,
				ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}})
		}), nil
	})
}
