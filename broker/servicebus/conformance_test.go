package servicebus_test

import (
	"context"
	"testing"
	"time"

	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/servicebus"
)

// The harness runs the suite against the in-memory fake of the SDK's
// Sender/Receiver boundary (fake_test.go): no Service Bus server can run
// here, and the emulator needs Docker.
type harness struct {
	ns   *fakeNamespace
	open []*servicebus.Store
}

var harnessOpts = &servicebus.Options{ReceiveWait: 50 * time.Millisecond}

func (h *harness) MakeStore(ctx context.Context) (brokertest.Store, error) { return h.Reopen(ctx) }

// Reopen opens new links to the same namespace, as another process would.
func (h *harness) Reopen(ctx context.Context) (brokertest.Store, error) {
	s, err := servicebus.New(ctx, h.ns.connector(), harnessOpts)
	if err != nil {
		return nil, err
	}
	h.open = append(h.open, s)
	return s, nil
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: h.ns.cfg.lock, MaxMessageBytes: servicebus.DefaultMaxMessageBytes - servicebus.DefaultAttributeBudget}
}

func (h *harness) Close() {
	for _, s := range h.open {
		_ = s.Close()
	}
}

func TestConformance(t *testing.T) {
	brokertest.RunConformanceTests(t, func(context.Context, *testing.T) (brokertest.Harness, error) {
		// Every Fetch that passes over a message is a delivery, so the
		// store's queues get a high MaxDeliveryCount (see the package doc):
		// the filter test scans its records a dozen times.
		return &harness{ns: newNamespace(fakeConfig{lock: time.Second, maxDeliveryCount: 1000})}, nil
	})
}
