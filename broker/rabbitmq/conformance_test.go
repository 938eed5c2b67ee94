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

// harness gives each test its own exchange and queue prefix. Every handle
// is a new connection, as another process would open; a "crashed" handle
// is one that stops acknowledging, and its leases end after LeaseTTL.
// Close deletes every queue the test used, and the exchange.
type harness struct {
	t     *testing.T
	url   string
	opts  *rabbitmq.Options
	mu    sync.Mutex
	conns []*amqp.Connection
	dests map[string]bool
}

var leaseTTL = time.Second

func (h *harness) MakeStore(ctx context.Context) (brokertest.Store, error) { return h.Reopen(ctx) }

func (h *harness) Reopen(ctx context.Context) (brokertest.Store, error) {
	conn, err := amqp.Dial(h.url)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.conns = append(h.conns, conn)
	h.mu.Unlock()
	s, err := rabbitmq.New(ctx, conn, h.opts)
	if err != nil {
		return nil, err
	}
	return &tracked{Store: s, h: h}, nil
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: leaseTTL, MaxMessageBytes: h.opts.MaxMessageBytes}
}

func (h *harness) Close() {
	var queues []string
	for d := range h.dests {
		queues = append(queues, h.opts.QueuePrefix+d)
	}
	cleanup(h.t, h.url, h.opts.Exchange, queues...)
	for _, c := range h.conns {
		_ = c.Close()
	}
}

// tracked records the destinations a test uses, for cleanup.
type tracked struct {
	*rabbitmq.Store
	h *harness
}

func (s *tracked) note(d string) {
	s.h.mu.Lock()
	s.h.dests[d] = true
	s.h.mu.Unlock()
}

func (s *tracked) Publish(ctx context.Context, d string, m *broker.Message) error {
	s.note(d)
	return s.Store.Publish(ctx, d, m)
}

func (s *tracked) Fetch(ctx context.Context, d string, f broker.Filter, n int) ([]*broker.Record, error) {
	s.note(d)
	return s.Store.Fetch(ctx, d, f, n)
}

func TestConformance(t *testing.T) {
	url := testenv.AMQP(t)
	brokertest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (brokertest.Harness, error) {
		name := uniqueName("geodlqtest")
		return &harness{t: t, url: url, dests: map[string]bool{}, opts: &rabbitmq.Options{
			Exchange: name, QueuePrefix: name + ".", LeaseTTL: leaseTTL, MaxMessageBytes: 256 << 10,
		}}, nil
	})
}
