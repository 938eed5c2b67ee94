package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/memory"
)

// plainLister is the memory store's driver as a minimal Lister: it lists
// in the written order only, with bodies, and filters by nothing but
// record ids and envelope fields (not text nor source), so that the
// portable Store sorts, counts, summarises and filters the rest.
type plainLister struct {
	broker.Driver
	l broker.Lister
}

func (p *plainLister) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	if opts.Sort != broker.SortWritten || opts.Summaries || opts.Total {
		panic("the portable Store asked a plain Lister for what it does not declare")
	}
	opts.Filter.Text, opts.Filter.Sources, opts.Filter.SourcePrefix = "", nil, ""
	opts.MaxBytes = 0
	return p.l.List(ctx, opts)
}

func (p *plainLister) Destinations(ctx context.Context) ([]string, error) {
	return p.l.Destinations(ctx)
}

type plainHarness struct {
	d    *plainLister
	opts broker.StoreOptions
	s    *broker.Store
}

func (h *plainHarness) MakeStore(context.Context) (*broker.Store, error) { return h.s, nil }

func (h *plainHarness) Reopen(context.Context) (*broker.Store, error) {
	return broker.NewStore("plain", h.d, &h.opts), nil
}

func (h *plainHarness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: 200 * time.Millisecond, MaxMessageBytes: 64 << 10}
}

func (h *plainHarness) Close() {}

// TestConformanceFallback runs the suite on a store whose driver lists
// the plain way: what it does not do, the portable Store must.
func TestConformanceFallback(t *testing.T) {
	brokertest.RunConformanceTests(t, func(context.Context, *testing.T) (brokertest.Harness, error) {
		opts := broker.StoreOptions{LeaseTTL: 200 * time.Millisecond, MaxMessageBytes: 64 << 10}
		inner := memory.New(&memory.Options{StoreOptions: opts})
		d := inner.Driver()
		pl := &plainLister{Driver: d, l: d.(broker.Lister)}
		return &plainHarness{d: pl, opts: opts, s: broker.NewStore("plain", pl, &opts)}, nil
	})
}

func (p *plainLister) MaxMessageBytes(d string) int {
	return p.Driver.(broker.Limiter).MaxMessageBytes(d)
}
