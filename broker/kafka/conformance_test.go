package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/kafka"
	"github.com/geodlq/geodlq/broker/kafka/kafkatest"
)

// harness runs a kfake cluster (package kafkatest) per test. Every handle is its own
// kgo client and store, as another process would be; a crashed handle is
// simply abandoned, and leaves the replay group when its leases outlive
// LeaseTTL.
type harness struct {
	c      *kafkatest.Cluster
	stores []*broker.Store
	cls    []*kgo.Client
}

var harnessOpts = kafka.Options{
	StoreOptions: broker.StoreOptions{MaxMessageBytes: 64 << 10, LeaseTTL: 3 * time.Second},
	Topics:       &kafka.TopicOptions{Partitions: 4},
	JoinWait:     time.Second,
	ConsumerOpts: []kgo.Opt{kgo.SessionTimeout(3 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)},
}

func (h *harness) MakeStore(ctx context.Context) (*broker.Store, error) { return h.Reopen(ctx) }

func (h *harness) Reopen(context.Context) (*broker.Store, error) {
	cl, err := kgo.NewClient(append(kafka.ProducerOpts(&harnessOpts), kgo.SeedBrokers(h.c.Addrs()...))...)
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
	return brokertest.Capabilities{LeaseExpiry: harnessOpts.LeaseTTL, MaxMessageBytes: harnessOpts.MaxMessageBytes,
		Unsupported: map[string]string{brokertest.CapRenewHeld: "a rebalance hands a partition, with the leases in it, to another member: " +
			"a renewal is refused while the partition is being revoked (exclusivity is checked all the same)"}}
}

func (h *harness) Close() {
	for _, s := range h.stores {
		_ = s.Close()
	}
	for _, cl := range h.cls {
		cl.Close()
	}
	_ = h.c.Close()
}

func newFake(ctx context.Context) (*kafkatest.Cluster, error) {
	return kafkatest.NewCluster(ctx, &kafkatest.Options{GroupMinSessionTimeout: 100 * time.Millisecond})
}

func TestConformance(t *testing.T) {
	brokertest.RunConformanceTests(t, func(ctx context.Context, _ *testing.T) (brokertest.Harness, error) {
		c, err := newFake(ctx)
		if err != nil {
			return nil, err
		}
		return &harness{c: c}, nil
	})
}

// consumerHarness is a source topic with one partition per key the suite
// uses (so that keys never share a partition), read by a consumer group;
// each consumer has its own client, and making a consumer closes the
// clients of the earlier ones (their Run ended: they crashed or shut
// down), so that they leave the group.
type consumerHarness struct {
	c     *kafkatest.Cluster
	topic string
	group string
	prod  *kgo.Client

	mu  sync.Mutex
	cls []*kgo.Client
}

// sourcePartitions is the source topic's partition count: the suite's keys
// "key-0".."key-4" hash (murmur2, kgo's default partitioner) to distinct
// partitions of it (TestConsumerConformance checks).
const sourcePartitions = 12

func (h *consumerHarness) Send(ctx context.Context, msgs []*broker.Message) error {
	rs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		r := &kgo.Record{Topic: h.topic, Key: m.Key, Value: m.Body}
		for k, v := range m.Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		rs[i] = r
	}
	return h.prod.ProduceSync(ctx, rs...).FirstErr()
}

func (h *consumerHarness) MakeConsumer(_ context.Context, proc *broker.Processor) (*broker.Consumer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cl := range h.cls {
		cl.Close()
	}
	cl, err := kgo.NewClient(append(kafka.ConsumerOpts(h.group, h.topic),
		kgo.SeedBrokers(h.c.Addrs()...), kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	h.cls = append(h.cls, cl)
	return kafka.NewConsumer(cl, proc, &kafka.ConsumerOptions{ConsumerOptions: broker.ConsumerOptions{NackDelay: 50 * time.Millisecond}})
}

func (h *consumerHarness) ConsumerCapabilities() brokertest.ConsumerCapabilities {
	return brokertest.ConsumerCapabilities{Ordered: true, Redelivery: time.Second}
}

func (h *consumerHarness) Close() {
	h.mu.Lock()
	for _, cl := range h.cls {
		cl.Close()
	}
	h.mu.Unlock()
	h.prod.Close()
	_ = h.c.Close()
}

func TestConsumerConformance(t *testing.T) {
	seen := map[int]string{}
	for k := range 5 {
		key := fmt.Sprintf("key-%d", k)
		p := kgo.StickyKeyPartitioner(nil).ForTopic("source").Partition(&kgo.Record{Key: []byte(key)}, sourcePartitions)
		require.NotContains(t, seen, p, "%s shares partition %d with %s", key, p, seen[p])
		seen[p] = key
	}
	n := 0
	brokertest.RunConsumerTests(t, func(ctx context.Context, t *testing.T) (brokertest.ConsumerHarness, error) {
		c, err := newFake(ctx)
		if err != nil {
			return nil, err
		}
		n++
		h := &consumerHarness{c: c, topic: fmt.Sprintf("source.%d", n), group: fmt.Sprintf("app.%d", n)}
		if h.prod, err = kgo.NewClient(kgo.SeedBrokers(c.Addrs()...)); err != nil {
			_ = c.Close()
			return nil, err
		}
		resp, err := kadm.NewClient(h.prod).CreateTopic(ctx, sourcePartitions, 1, nil, h.topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			h.Close()
			return nil, err
		}
		return h, nil
	})
}
