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

type consumerHarness struct {
	s    *broker.Store
	dest string
}

func (h *consumerHarness) Send(ctx context.Context, msgs []*broker.Message) error {
	for _, m := range msgs {
		if err := h.s.Publish(ctx, h.dest, m); err != nil {
			return err
		}
	}
	return nil
}

func (h *consumerHarness) MakeConsumer(_ context.Context, proc *broker.Processor) (*broker.Consumer, error) {
	return memory.NewConsumer(h.s, h.dest, proc, &memory.ConsumerOptions{PollInterval: 10 * time.Millisecond,
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}})
}

func (h *consumerHarness) ConsumerCapabilities() brokertest.ConsumerCapabilities {
	// A store source does not hold back a key's later records while an
	// earlier one waits for redelivery, so it does not promise order.
	return brokertest.ConsumerCapabilities{DeliveryCount: true, Redelivery: 200 * time.Millisecond}
}

func (h *consumerHarness) Close() {}

func TestConsumerConformance(t *testing.T) {
	brokertest.RunConsumerTests(t, func(context.Context, *testing.T) (brokertest.ConsumerHarness, error) {
		return &consumerHarness{s: memory.New(&memory.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 200 * time.Millisecond}}), dest: "source"}, nil
	})
}
