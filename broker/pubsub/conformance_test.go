package pubsub_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	geopubsub "github.com/geodlq/geodlq/broker/pubsub"
)

type harness struct {
	t    *testing.T
	srv  *server
	open []*broker.Store
}

var harnessOpts = geopubsub.Options{
	StoreOptions: broker.StoreOptions{LeaseTTL: 2 * time.Second}, CreateTopics: true,
	PublishSettings: &pubsub.PublishSettings{DelayThreshold: time.Millisecond, CountThreshold: 100, ByteThreshold: 1 << 20, Timeout: time.Minute},
}

func (h *harness) MakeStore(ctx context.Context) (*broker.Store, error) { return h.Reopen(ctx) }

// Reopen connects a new client to the same server, as another process
// would.
func (h *harness) Reopen(ctx context.Context) (*broker.Store, error) {
	s, err := geopubsub.New(ctx, newClient(h.t, h.srv), &harnessOpts)
	if err != nil {
		return nil, err
	}
	h.open = append(h.open, s)
	return s, nil
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: harnessOpts.LeaseTTL, MaxMessageBytes: 10_000_000 - 64<<10}
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

// consumerHarness is a subscription on pstest with a 10 s ack deadline
// (the client extends it while a message is processed) and a retry
// policy of 100 ms, so a nacked message comes back quickly.
type consumerHarness struct {
	c   *pubsub.Client
	pub *pubsub.Publisher
}

var consumerSeq atomic.Int64

func (h *consumerHarness) Send(ctx context.Context, msgs []*broker.Message) error {
	for _, m := range msgs {
		if _, err := h.pub.Publish(ctx, &pubsub.Message{Data: m.Body}).Get(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (h *consumerHarness) MakeConsumer(ctx context.Context, proc *broker.Processor) (*broker.Consumer, error) {
	return geopubsub.NewConsumer(ctx, h.c, "source-sub", proc, &geopubsub.ConsumerOptions{ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}})
}

// ConsumerCapabilities: Pub/Sub counts deliveries only on subscriptions
// with a dead-letter policy (the harness's has one), and the consumer
// does not promise order across redeliveries (see NewConsumer).
func (h *consumerHarness) ConsumerCapabilities() brokertest.ConsumerCapabilities {
	return brokertest.ConsumerCapabilities{DeliveryCount: true, Redelivery: 2 * time.Second}
}

func (h *consumerHarness) Close() { h.pub.Stop() }

func TestConsumerConformance(t *testing.T) {
	brokertest.RunConsumerTests(t, func(_ context.Context, t *testing.T) (brokertest.ConsumerHarness, error) {
		srv := newServer(t)
		c := newClient(t, srv)
		n := strconv.FormatInt(consumerSeq.Add(1), 10)
		topic(t, c, "native-dlt-"+n, &pubsubpb.Subscription{Name: "native-dlt-sub-" + n})
		src := topic(t, c, "source", &pubsubpb.Subscription{Name: "source-sub", AckDeadlineSeconds: 10,
			DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: "projects/" + project + "/topics/native-dlt-" + n, MaxDeliveryAttempts: 100}})
		pub := c.Publisher(src)
		pub.PublishSettings = *fastPublish
		return &consumerHarness{c: c, pub: pub}, nil
	})
}
