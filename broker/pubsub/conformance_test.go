package pubsub_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/geodlq/geodlq/broker/brokertest"
	geopubsub "github.com/geodlq/geodlq/broker/pubsub"
)

type harness struct {
	t    *testing.T
	srv  *server
	open []*geopubsub.Store
}

var harnessOpts = geopubsub.Options{
	Lease: 2 * time.Second, CreateTopics: true,
	PublishSettings: &pubsub.PublishSettings{DelayThreshold: time.Millisecond, CountThreshold: 100, ByteThreshold: 1 << 20, Timeout: time.Minute},
}

func (h *harness) MakeStore(ctx context.Context) (brokertest.Store, error) { return h.Reopen(ctx) }

// Reopen connects a new client to the same server, as another process
// would.
func (h *harness) Reopen(ctx context.Context) (brokertest.Store, error) {
	s, err := geopubsub.New(ctx, newClient(h.t, h.srv), &harnessOpts)
	if err != nil {
		return nil, err
	}
	h.open = append(h.open, s)
	return s, nil
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: harnessOpts.Lease, MaxMessageBytes: geopubsub.DefaultMaxMessageBytes - geopubsub.DefaultAttributeBudget}
}

func (h *harness) Close() {
	for _, s := range h.open {
		_ = s.Close()
	}
}

func TestConformance(t *testing.T) {
	brokertest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (brokertest.Harness, error) {
		return &harness{t: t, srv: newServer(t)}, nil
	})
}
