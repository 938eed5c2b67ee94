package servicebus_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/servicebus"
)

// The harness runs the suite against the in-memory fake of the SDK's
// Sender/Receiver boundary (fake_test.go): no Service Bus server can run
// here, and the emulator needs Docker.
type harness struct {
	ns   *fakeNamespace
	open []*broker.Store
}

var harnessOpts = &servicebus.Options{ReceiveWait: 50 * time.Millisecond}

func (h *harness) MakeStore(ctx context.Context) (*broker.Store, error) { return h.Reopen(ctx) }

// Reopen opens new links to the same namespace, as another process would.
func (h *harness) Reopen(context.Context) (*broker.Store, error) {
	s, err := servicebus.NewWithConnector(h.ns.connector(), harnessOpts)
	if err != nil {
		return nil, err
	}
	h.open = append(h.open, s)
	return s, nil
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: h.ns.cfg.lock, MaxMessageBytes: 256<<10 - 8<<10}
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

// consumerHarness is a queue of the fake namespace; its consumer reads it
// through a receiver of its own, as another process would. A lock of 1s
// is what an unsettled message waits before it comes back.
type consumerHarness struct {
	ns *fakeNamespace
}

func (h *consumerHarness) Send(ctx context.Context, msgs []*broker.Message) error {
	snd, err := h.ns.connector().Sender("source")
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: m.Body}, nil); err != nil {
			return err
		}
	}
	return nil
}

func (h *consumerHarness) MakeConsumer(ctx context.Context, proc *broker.Processor) (*broker.Consumer, error) {
	recv, err := h.ns.connector().Receiver("source", false)
	if err != nil {
		return nil, err
	}
	return servicebus.NewConsumer(ctx, recv, "source", proc, &servicebus.ConsumerOptions{
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}, ExtendEvery: 250 * time.Millisecond})
}

// ConsumerCapabilities: without sessions Service Bus does not order a
// queue's messages by key.
func (h *consumerHarness) ConsumerCapabilities() brokertest.ConsumerCapabilities {
	return brokertest.ConsumerCapabilities{DeliveryCount: true, Redelivery: h.ns.cfg.lock}
}

func (h *consumerHarness) Close() {}

func TestConsumerConformance(t *testing.T) {
	brokertest.RunConsumerTests(t, func(context.Context, *testing.T) (brokertest.ConsumerHarness, error) {
		return &consumerHarness{ns: newNamespace(fakeConfig{lock: time.Second, maxDeliveryCount: 100})}, nil
	})
}
