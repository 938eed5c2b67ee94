package rabbitmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/rabbitmq"
	"github.com/geodlq/geodlq/internal/testenv"
)

// testQueueArgs make the queues a test declares delete themselves once
// unused for five minutes (x-expires): the suite names its destinations,
// and AMQP cannot list queues to delete them.
var testQueueArgs = amqp.Table{"x-expires": int32(5 * 60 * 1000)}

// harness gives each test its own exchange and queue prefix. Every handle
// is a new connection, as another process would open; a "crashed" handle
// is one that stops acknowledging, and its leases end after LeaseTTL.
// Close deletes the exchange; the queues expire.
type harness struct {
	t     *testing.T
	url   string
	opts  *rabbitmq.Options
	mu    sync.Mutex
	conns []*amqp.Connection
}

const leaseTTL = time.Second

func (h *harness) MakeStore(ctx context.Context) (*broker.Store, error) { return h.Reopen(ctx) }

func (h *harness) Reopen(ctx context.Context) (*broker.Store, error) {
	conn, err := amqp.Dial(h.url)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.conns = append(h.conns, conn)
	h.mu.Unlock()
	return rabbitmq.New(ctx, conn, h.opts)
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: leaseTTL, MaxMessageBytes: h.opts.MaxMessageBytes}
}

func (h *harness) Close() {
	cleanup(h.t, h.url, h.opts.Exchange)
	for _, c := range h.conns {
		_ = c.Close()
	}
}

func TestConformance(t *testing.T) {
	url := testenv.AMQP(t)
	brokertest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (brokertest.Harness, error) {
		name := uniqueName("geodlqtest")
		return &harness{t: t, url: url, opts: &rabbitmq.Options{
			Exchange: name, QueuePrefix: name + ".", QueueArgs: testQueueArgs, Create: true,
			StoreOptions: broker.StoreOptions{LeaseTTL: leaseTTL, MaxMessageBytes: 256 << 10},
		}}, nil
	})
}

// consumerHarness is a quorum source queue of its own (the broker counts
// deliveries); every consumer the suite makes has a channel of its own on
// one connection, as the processes of one deployment would.
type consumerHarness struct {
	t     *testing.T
	url   string
	conn  *amqp.Connection
	pub   *amqp.Channel
	queue string
	mu    sync.Mutex
	chans []*amqp.Channel
}

func (h *consumerHarness) Send(ctx context.Context, msgs []*broker.Message) error {
	for _, m := range msgs {
		p := amqp.Publishing{Body: m.Body, DeliveryMode: amqp.Persistent, Headers: amqp.Table{}}
		for k, v := range m.Headers {
			p.Headers[k] = v
		}
		if m.Key != nil {
			p.Headers[rabbitmq.HeaderKey] = m.Key
		}
		dc, err := h.pub.PublishWithDeferredConfirmWithContext(ctx, "", h.queue, true, false, p)
		if err != nil {
			return err
		}
		if _, err := dc.WaitContext(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (h *consumerHarness) MakeConsumer(_ context.Context, proc *broker.Processor) (*broker.Consumer, error) {
	ch, err := h.conn.Channel()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.chans = append(h.chans, ch)
	h.mu.Unlock()
	return rabbitmq.NewConsumer(ch, h.queue, proc, &rabbitmq.ConsumerOptions{
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}})
}

func (h *consumerHarness) ConsumerCapabilities() brokertest.ConsumerCapabilities {
	// A requeued delivery comes back after newer ones of its key: the
	// queue does not keep per-key order. Given back or on a closed
	// channel, a delivery is requeued at once.
	return brokertest.ConsumerCapabilities{DeliveryCount: true, Redelivery: time.Second}
}

func (h *consumerHarness) Close() {
	for _, ch := range h.chans {
		_ = ch.Close()
	}
	cleanup(h.t, h.url, "", h.queue)
	_ = h.conn.Close()
}

func TestConsumerConformance(t *testing.T) {
	url := testenv.AMQP(t)
	brokertest.RunConsumerTests(t, func(ctx context.Context, t *testing.T) (brokertest.ConsumerHarness, error) {
		conn, err := amqp.Dial(url)
		if err != nil {
			return nil, err
		}
		h := &consumerHarness{t: t, url: url, conn: conn, queue: uniqueName("geodlqtest") + ".source"}
		if h.pub, err = conn.Channel(); err != nil {
			return nil, err
		}
		if err := h.pub.Confirm(false); err != nil {
			return nil, err
		}
		_, err = h.pub.QueueDeclare(h.queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		return h, err
	})
}
