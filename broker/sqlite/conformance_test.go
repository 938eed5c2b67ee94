package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/sqlite"
)

// opts are the harness's settings: the default durability (WAL,
// synchronous=FULL), a short lease and a small size limit.
var opts = &sqlite.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Second, MaxMessageBytes: 256 << 10}}

type harness struct {
	path string
	open []*broker.Store
}

func (h *harness) MakeStore(ctx context.Context) (*broker.Store, error) { return h.Reopen(ctx) }

// Reopen opens the same file again, as another process would.
func (h *harness) Reopen(ctx context.Context) (*broker.Store, error) {
	s, err := sqlite.Open(ctx, h.path, opts)
	if err != nil {
		return nil, err
	}
	h.open = append(h.open, s)
	return s, nil
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: opts.LeaseTTL, MaxMessageBytes: opts.MaxMessageBytes}
}

func (h *harness) Close() {
	for _, s := range h.open {
		_ = s.Close()
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	brokertest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (brokertest.Harness, error) {
		return &harness{path: filepath.Join(t.TempDir(), "dlq.db")}, nil
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
	return sqlite.NewConsumer(h.s, h.dest, proc, &sqlite.ConsumerOptions{PollInterval: 10 * time.Millisecond,
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}})
}

func (h *consumerHarness) ConsumerCapabilities() brokertest.ConsumerCapabilities {
	// A store source does not hold back a key's later records while an
	// earlier one waits for redelivery, so it does not promise order.
	return brokertest.ConsumerCapabilities{DeliveryCount: true, Redelivery: opts.LeaseTTL}
}

func (h *consumerHarness) Close() { _ = h.s.Close() }

func TestConsumerConformance(t *testing.T) {
	t.Parallel()
	brokertest.RunConsumerTests(t, func(ctx context.Context, t *testing.T) (brokertest.ConsumerHarness, error) {
		s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "source.db"), opts)
		if err != nil {
			return nil, err
		}
		return &consumerHarness{s: s, dest: "source"}, nil
	})
}
