package postgis_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/internal/pgtest"
)

// harness gives each conformance test its own schema; every handle is a
// store on a pool of its own, as another process would have.
type harness struct {
	t     *testing.T
	opts  *postgis.Options
	pools []*pgxpool.Pool
}

func (h *harness) MakeStore(ctx context.Context) (brokertest.Store, error) { return h.Reopen(ctx) }

func (h *harness) Reopen(ctx context.Context) (brokertest.Store, error) {
	pool := pgtest.NewPool(h.t, 4)
	h.pools = append(h.pools, pool)
	return postgis.New(ctx, pool, h.opts)
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: h.opts.LeaseTTL, MaxMessageBytes: h.opts.MaxMessageBytes}
}

func (h *harness) Close() {
	for _, p := range h.pools {
		p.Close()
	}
}

func TestConformance(t *testing.T) {
	brokertest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (brokertest.Harness, error) {
		opts := &postgis.Options{Schema: pgtest.Schema(t), LeaseTTL: 2 * time.Second, MaxMessageBytes: 256 << 10}
		s, err := postgis.New(ctx, pgtest.NewPool(t, 2), opts)
		if err != nil {
			return nil, err
		}
		if err := s.Migrate(ctx); err != nil {
			return nil, err
		}
		return &harness{t: t, opts: opts}, nil
	})
}
