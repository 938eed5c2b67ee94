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

func TestConsumerConformance(t *testing.T) {
	t.Parallel()
	brokertest.RunConsumerTests(t, func(ctx context.Context, t *testing.T) (brokertest.ConsumerHarness, error) {
		s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "source.db"), opts)
		if err != nil {
			return nil, err
		}
		return brokertest.StoreConsumerHarness(s, "source", opts.LeaseTTL, func(s *broker.Store, d string, proc *broker.Processor) (*broker.Consumer, error) {
			return sqlite.NewConsumer(s, d, proc, &sqlite.ConsumerOptions{PollInterval: 10 * time.Millisecond,
				ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}})
		}), nil
	})
}
