package sqs_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
)

type harness struct {
	t    *testing.T
	open []*broker.Store
}

// The suite's fixtures give some envelopes the provenance of an SQS FIFO
// queue ("vector-jobs.fifo") and write them to the suite's own standard
// queues, a pairing the store refuses by default (FIFOMismatchError, see
// TestFIFOSourceNeedsFIFODeadLetterQueue). The harness allows it: the
// suite tests storage, not the pairing.
var harnessOpts = &geosqs.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 2 * time.Second}, CreateQueues: true, AllowFIFOToStandard: true}

func (h *harness) MakeStore(ctx context.Context) (*broker.Store, error) { return h.Reopen(ctx) }

// Reopen makes a new SDK client and store, as another process would.
func (h *harness) Reopen(ctx context.Context) (*broker.Store, error) {
	s, err := geosqs.New(ctx, newClient(h.t), harnessOpts)
	if err != nil {
		return nil, err
	}
	h.open = append(h.open, s)
	return s, nil
}

func (h *harness) Capabilities() brokertest.Capabilities {
	return brokertest.Capabilities{LeaseExpiry: harnessOpts.LeaseTTL, MaxMessageBytes: 256<<10 - 4<<10}
}

func (h *harness) Close() {
	for _, s := range h.open {
		_ = s.Close()
	}
}

func TestConformance(t *testing.T) {
	endpoint(t)
	brokertest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (brokertest.Harness, error) {
		return &harness{t: t}, nil
	})
}

// consumerHarness is a FIFO source queue: its message groups (the keys)
// are delivered in order, so the consumer declares Ordered.
type consumerHarness struct {
	client *awssqs.Client
	url    string
}

const consumerLease = 2 * time.Second

func (h *consumerHarness) Send(ctx context.Context, msgs []*broker.Message) error {
	for _, m := range msgs {
		sum := sha256.Sum256(m.Body)
		if _, err := h.client.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(h.url), MessageBody: aws.String(string(m.Body)),
			MessageGroupId: aws.String(string(m.Key)), MessageDeduplicationId: aws.String(hex.EncodeToString(sum[:]))}); err != nil {
			return err
		}
	}
	return nil
}

func (h *consumerHarness) MakeConsumer(ctx context.Context, proc *broker.Processor) (*broker.Consumer, error) {
	return geosqs.NewConsumer(ctx, h.client, h.url, proc, &geosqs.ConsumerOptions{
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 4, NackDelay: time.Second},
		// local-aws-sqs holds a long poll until it has MaxNumberOfMessages:
		// short waits keep the suite moving.
		WaitTime: time.Second, LeaseTTL: consumerLease,
	})
}

func (h *consumerHarness) ConsumerCapabilities() brokertest.ConsumerCapabilities {
	return brokertest.ConsumerCapabilities{Ordered: true, DeliveryCount: true, Redelivery: consumerLease}
}

func (h *consumerHarness) Close() {}

func TestConsumerConformance(t *testing.T) {
	endpoint(t)
	brokertest.RunConsumerTests(t, func(_ context.Context, t *testing.T) (brokertest.ConsumerHarness, error) {
		client := newClient(t)
		url, _ := createQueue(t, client, queueName(t, "-src.fifo"), nil)
		return &consumerHarness{client: client, url: url}, nil
	})
}
