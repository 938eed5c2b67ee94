package pubsub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"cloud.google.com/go/pubsub/v2"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
)

// ConsumerOptions configures a [Consumer]. The zero value (and nil) uses
// the defaults.
type ConsumerOptions struct {
	// ReceiveSettings are the subscriber's flow control and lease
	// extension settings. Nil means pubsub.DefaultReceiveSettings: the
	// client extends the ack deadline of a message while its callback runs
	// (up to MaxExtension, 60 min), which keeps a long spatial operation
	// from being redelivered elsewhere.
	ReceiveSettings *pubsub.ReceiveSettings
	// Logger receives one record per message not acknowledged. Nil
	// discards.
	Logger *slog.Logger
}

// Consumer receives from a source subscription (streaming pull) and runs
// each message through a [broker.Processor]. It acknowledges a message
// only when the outcome says so — the handler succeeded, or the envelope
// was published to the dead-letter store and Pub/Sub confirmed it — and
// nacks it otherwise, so Pub/Sub redelivers it (and, with a dead-letter
// policy, forwards it to the dead-letter topic after maxDeliveryAttempts).
// Attempts start at the message's delivery attempt, which Pub/Sub reports
// only on subscriptions with a dead-letter policy.
type Consumer struct {
	sub  *pubsub.Subscriber
	name string
	proc *broker.Processor
	log  *slog.Logger
}

// NewConsumer returns a consumer of subscription (an id or
// "projects/<p>/subscriptions/<id>") that processes with proc. nil opts
// means the defaults.
func NewConsumer(ctx context.Context, client *pubsub.Client, subscription string, proc *broker.Processor, opts *ConsumerOptions) (*Consumer, error) {
	_ = ctx
	if client == nil || proc == nil || subscription == "" {
		return nil, errors.New("pubsub: NewConsumer needs a client, a subscription and a processor")
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	sub := client.Subscriber(subscription)
	if o.ReceiveSettings != nil {
		sub.ReceiveSettings = *o.ReceiveSettings
	}
	name := subscription
	if !strings.HasPrefix(name, "projects/") {
		name = "projects/" + client.Project() + "/subscriptions/" + subscription
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Consumer{sub: sub, name: name, proc: proc, log: log}, nil
}

// Run receives messages until ctx ends or receiving fails for good
// (Subscriber.Receive), and processes each with h.
func (c *Consumer) Run(ctx context.Context, h broker.Handler) error {
	return c.sub.Receive(ctx, func(ctx context.Context, m *pubsub.Message) {
		_, _ = c.Handle(ctx, m, h)
	})
}

// Handle processes one received message and acknowledges or nacks it. The
// error is nil exactly when the message was acknowledged and Pub/Sub
// confirmed the acknowledgement (which it reports only with exactly-once
// delivery; otherwise an ack is best effort).
func (c *Consumer) Handle(ctx context.Context, m *pubsub.Message, h broker.Handler) (broker.Result, error) {
	out, err := c.proc.Process(ctx, ToMessage(c.name, m), h)
	if err != nil {
		m.Nack()
		c.log.WarnContext(ctx, "geodlq: pubsub: message nacked; Pub/Sub redelivers it",
			slog.String("subscription", c.name), slog.String("message_id", m.ID), slog.Any("error", err))
		return out, err
	}
	if _, err := m.AckWithResult().Get(ctx); err != nil {
		c.log.ErrorContext(ctx, "geodlq: pubsub: acknowledgement failed; the message will be redelivered",
			slog.String("subscription", c.name), slog.String("message_id", m.ID), slog.Bool("dead_lettered", out.DeadLettered), slog.Any("error", err))
		return out, fmt.Errorf("pubsub: ack %s: %w", m.ID, err)
	}
	return out, nil
}

// ToMessage converts a received message into a broker.Message: the data
// exactly, headers from attributes (see [Store.Publish]), the key
// ([AttrKey], else the ordering key), DeliveryAttempt from the delivery
// attempt (0 when Pub/Sub does not report one), and provenance (system
// "pubsub", the subscription, message id, publish time — or, for a message
// a dead-letter policy forwarded, what its CloudPubSubDeadLetterSource*
// attributes say; see [SourceOf]).
func ToMessage(subscription string, m *pubsub.Message) *broker.Message {
	key, headers := decodeAttributes(m.Attributes)
	if key == nil && m.OrderingKey != "" {
		key = []byte(m.OrderingKey)
	}
	bm := &broker.Message{Key: key, Body: m.Data, Headers: headers}
	if m.DeliveryAttempt != nil {
		bm.DeliveryAttempt = *m.DeliveryAttempt
	}
	pt := m.PublishTime.UTC()
	src := &envelope.Source{System: "pubsub", Topic: subscription, MessageID: m.ID, Key: key, DeliveryCount: bm.DeliveryAttempt}
	if !pt.IsZero() {
		src.Timestamp = &pt
	}
	bm.Source = SourceOf(m.Attributes, src)
	return bm
}
