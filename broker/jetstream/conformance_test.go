package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

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

func (h *harness) MakeStore(ctx context.Context) (brokertest.Store, error) { return h.Reopen(ctx) }

func (h *harness) Reopen(ctx context.Context) (brokertest.Store, error) {
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
	// server's max_payload (1 MiB) less the header reserve.
	return brokertest.Capabilities{LeaseExpiry: 900 * time.Millisecond, MaxMessageBytes: 1<<20 - jetstream.DefaultHeaderBytes}
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
			Stream: name, SubjectPrefix: "geodlqtest." + name, AckWait: time.Second,
		}}, nil
	})
}
