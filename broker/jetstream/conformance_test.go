package jetstream_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/jetstream"
	"github.com/geodlq/geodlq/internal/testenv"
)

// harness gives each test its own stream and subject prefix; every handle
// is a new connection, as another process would open.
type harness struct {
	t     *testing.T
	url   string
	opts  *jetstream.Options
	conns []*nats.Conn
}

func (h *harness) MakeStore(ctx context.Context) (*broker.Store, error) { return h.Reopen(ctx) }

func (h *harness) Reopen(ctx context.Context) (*broker.Store, error) {
	nc, err := nats.Connect(h.url)
	if err != nil {
		return nil, err
	}
	h.conns = append(h.conns, nc)
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, err
	}
	return jetstream.New(ctx, js, h.opts)
}

func (h *harness) Capabilities() brokertest.Capabilities {
	// The suite publishes bodies of MaxMessageBytes: the default, the
	// server's max_payload (1 MiB) less the header budget.
	return brokertest.Capabilities{LeaseExpiry: 900 * time.Millisecond, MaxMessageBytes: 1<<20 - jetstream.DefaultHeaderBudget}
}

func (h *harness) Close() {
	deleteStream(h.t, h.url, h.opts.Stream)
	for _, nc := range h.conns {
		nc.Close()
	}
}

func TestConformance(t *testing.T) {
	url := testenv.NATS(t)
	brokertest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (brokertest.Harness, error) {
		name := uniqueName("CONF")
		return &harness{t: t, url: url, opts: &jetstream.Options{
			Stream: name, SubjectPrefix: "geodlqtest." + name, Create: true,
			StoreOptions: broker.StoreOptions{LeaseTTL: time.Second},
		}}, nil
	})
}

// consumerAckWait is the source consumer's ack_wait in the consumer suite:
// how long a message never settled (its consumer crashed) takes to come
// back.
const consumerAckWait = 2 * time.Second

// consumerHarness is a source stream of its own with one durable pull
// consumer, "pipeline": every consumer the suite makes reads it, as the
// processes of one deployment would.
type consumerHarness struct {
	t       *testing.T
	url     string
	nc      *nats.Conn
	js      natsjs.JetStream
	stream  string
	subject string
}

func (h *consumerHarness) Send(ctx context.Context, msgs []*broker.Message) error {
	for _, m := range msgs {
		msg := nats.NewMsg(h.subject)
		msg.Data = m.Body
		for k, v := range m.Headers {
			msg.Header.Set(k, v)
		}
		if m.Key != nil {
			msg.Header.Set(jetstream.HeaderKey, base64.StdEncoding.EncodeToString(m.Key))
		}
		if _, err := h.js.PublishMsg(ctx, msg); err != nil {
			return err
		}
	}
	return nil
}

func (h *consumerHarness) MakeConsumer(ctx context.Context, proc *broker.Processor) (*broker.Consumer, error) {
	cons, err := h.js.CreateOrUpdateConsumer(ctx, h.stream, natsjs.ConsumerConfig{
		Durable: "pipeline", AckPolicy: natsjs.AckExplicitPolicy, AckWait: consumerAckWait,
	})
	if err != nil {
		return nil, err
	}
	return jetstream.NewConsumer(ctx, h.js, cons, proc, &jetstream.ConsumerOptions{FetchWait: 200 * time.Millisecond,
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 4, NackDelay: 100 * time.Millisecond}})
}

func (h *consumerHarness) ConsumerCapabilities() brokertest.ConsumerCapabilities {
	// A Nak'ed message is delivered again after newer ones of its key:
	// the source does not keep per-key order.
	return brokertest.ConsumerCapabilities{DeliveryCount: true, Redelivery: consumerAckWait}
}

func (h *consumerHarness) Close() { deleteStream(h.t, h.url, h.stream) }

func TestConsumerConformance(t *testing.T) {
	url := testenv.NATS(t)
	brokertest.RunConsumerTests(t, func(ctx context.Context, t *testing.T) (brokertest.ConsumerHarness, error) {
		nc, js := connect(t, url)
		name := uniqueName("SRC")
		h := &consumerHarness{t: t, url: url, nc: nc, js: js, stream: name, subject: "geodlqtest." + name + ".events"}
		_, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{h.subject}, Storage: natsjs.FileStorage})
		return h, err
	})
}
