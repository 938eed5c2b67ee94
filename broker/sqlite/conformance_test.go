package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/sqlite"
)

type harness struct {
	t    *testing.T
	path string
	open []*sqlite.Store
}

var opts = &sqlite.Options{LeaseTTL: time.Second, MaxMessageBytes: 256 << 10}

func (h *harness) MakeStore(ctx context.Context) (brokertest.Store, error) { return h.Reopen(ctx) }

// Reopen opens the same file again, as another process would.
func (h *harness) Reopen(ctx context.Context) (brokertest.Store, error) {
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
	brokertest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (brokertest.Harness, error) {
		return &harness{t: t, path: filepath.Join(t.TempDir(), "dlq.db")}, nil
	})
}
