package brokertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/memory"
)

// harness adapts one adapter to the suite. Copy it into your adapter's
// conformance_test.go and make Reopen open a second client on the same
// data.
type harness struct{ b *broker.Store }

func (h *harness) MakeStore(context.Context) (*broker.Store, error) { return h.b, nil }
func (h *harness) Reopen(context.Context) (*broker.Store, error)    { return h.b, nil }
func (h *harness) Close()                                           {}
func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{
		LeaseExpiry:     200 * time.Millisecond,
		MaxMessageBytes: 64 << 10,
		// Unsupported: map[string]string{brokertest.CapBBoxFilter: "why, in one sentence"},
	}
}

// An adapter proves itself by running the suite from a test.
func ExampleRunConformanceTests() {
	// In a _test.go file:
	_ = func(t *testing.T) {
		brokertest.RunConformanceTests(t, func(context.Context, *testing.T) (brokertest.Harness, error) {
			return &harness{b: memory.New(&memory.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 200 * time.Millisecond, MaxMessageBytes: 64 << 10}})}, nil
		})
	}
}
