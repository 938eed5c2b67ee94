package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/kafka"
)

// harness runs an in-process kfake cluster per test. Every handle is its own
// kgo client and Store, as another process would be; a crashed handle is
// simply abandoned, and leaves the replay group when its leases outlive
// LeaseTTL.
type harness struct {
	c      *kfake.Cluster
	stores []*kafka.Store
	cls    []*kgo.Client
}

var harnessOpts = kafka.Options{
	MaxMessageBytes: 64 << 10,
	Topics:          &kafka.TopicOptions{Partitions: 4},
	LeaseTTL:        3 * time.Second,
	JoinWait:        time.Second,
	ConsumerOpts:    []kgo.Opt{kgo.SessionTimeout(3 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)},
}

func (h *harness) MakeStore(ctx context.Context) (brokertest.Store, error) { return h.Reopen(ctx) }

func (h *harness) Reopen(context.Context) (brokertest.Store, error) {
	cl, err := kgo.NewClient(append(kafka.ProducerOpts(&harnessOpts), kgo.SeedBrokers(h.c.ListenAddrs()...))...)
	if err != nil {
		return nil, err
	}
	h.cls = append(h.cls, cl)
	o := harnessOpts
	s, err := kafka.New(cl, &o)
	if err != nil {
		return nil, err
	}
	h.stores = append(h.stores, s)
	return s, nil
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: harnessOpts.LeaseTTL, MaxMessageBytes: harnessOpts.MaxMessageBytes}
}

func (h *harness) Close() {
	for _, s := range h.stores {
		_ = s.Close()
	}
	for _, cl := range h.cls {
		cl.Close()
	}
	h.c.Close()
}

func TestConformance(t *testing.T) {
	brokertest.RunConformanceTests(t, func(context.Context, *testing.T) (brokertest.Harness, error) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			return nil, err
		}
		return &harness{c: c}, nil
	})
}
