package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/internal/testenv"
)

type harness struct {
	t       *testing.T
	prefix  string
	stores  []*redisstream.Store
	clients []*redis.Client
}

var opts = redisstream.Options{LeaseTTL: time.Second, MaxMessageBytes: 256 << 10}

func (h *harness) MakeStore(ctx context.Context) (brokertest.Store, error) { return h.Reopen(ctx) }

// Reopen connects a new client and joins the group under a new consumer
// name, as another process would.
func (h *harness) Reopen(context.Context) (brokertest.Store, error) {
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(h.t)})
	o := opts
	o.Prefix = h.prefix
	s, err := redisstream.New(c, &o)
	if err != nil {
		return nil, err
	}
	h.clients = append(h.clients, c)
	h.stores = append(h.stores, s)
	return s, nil
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: opts.LeaseTTL, MaxMessageBytes: opts.MaxMessageBytes}
}

func (h *harness) Close() {
	for _, s := range h.stores {
		_ = s.Close()
	}
	for _, c := range h.clients {
		_ = c.Close()
	}
}

func TestConformance(t *testing.T) {
	brokertest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (brokertest.Harness, error) {
		return &harness{t: t, prefix: uniquePrefix(t)}, nil
	})
}
