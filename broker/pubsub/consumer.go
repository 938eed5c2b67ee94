package pubsub

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
)

// ConsumerOptions configures [NewConsumer]. The zero value and nil are
// valid.
type ConsumerOptions struct {
	// ConsumerOptions: MaxBatch is the most received messages one batch
	// takes; default 10. Concurrency default 1. NackDelay does not apply:
	// a nack makes Pub/Sub redeliver under the subscription's retry
	// policy (at once without one).
	broker.ConsumerOptions
	// ReceiveSettings are the subscriber's flow control and lease
	// extension settings. Nil means pubsub.DefaultReceiveSettings: the
	// client extends the ack deadline of a message until it is
	// acknowledged or nacked (up to MaxExtension, 60 min), which keeps a
	// long spatial operation from being redelivered elsewhere.
	ReceiveSettings *pubsub.ReceiveSettings
}

// NewConsumer returns a consumer of subscription (an id or
// "projects/<p>/subscriptions/<id>") of client's project that runs every
// message through proc: the handler with in-place retries, then the
// dead-letter write. Run it with Run(ctx, handler), and Close it when done:
// Close stops the streaming pull. Closing the consumer leaves client open.
//
// Messages come from a streaming pull (Subscriber.Receive), whose client
// extends their ack deadlines until they are settled. A message is
// acknowledged only when the outcome says so — the handler succeeded, or
// the envelope was published to the dead-letter store and Pub/Sub
// confirmed it — and nacked otherwise, so Pub/Sub redelivers it (and,
// with a dead-letter policy, forwards it to the dead-letter topic after
// maxDeliveryAttempts). Attempts start at the message's delivery
// attempt, which Pub/Sub reports only on subscriptions with a dead-letter
// policy. Messages with an ordering key are processed in order within a
// batch, but a nacked message's later messages may already be in hand, so
// the consumer does not promise order across redeliveries.
func NewConsumer(ctx context.Context, client *pubsub.Client, subscription string, proc *broker.Processor, opts *ConsumerOptions) (*broker.Consumer, error) {
	_ = ctx
	if client == nil || proc == nil || subscription == "" {
		return nil, fmt.Errorf("pubsub: NewConsumer needs a client, a subscription and a processor: %w", broker.ErrInvalidArgument)
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
	src := &source{sub: sub, name: name, msgs: make(chan *pubsub.Message), closed: make(chan struct{})}
	return broker.NewConsumer(src, proc, &o.ConsumerOptions)
}

// source bridges the streaming pull's callbacks into batches: a callback
// hands its message over and returns; the client keeps extending the
// message's lease until it is acknowledged or nacked.
type source struct {
	sub  *pubsub.Subscriber
	name string
	msgs chan *pubsub.Message

	mu      sync.Mutex
	cancel  context.CancelFunc // stops the streaming pull in progress
	stopped chan struct{}      // closed when it returned
	err     error              // what it returned

	closeOnce sync.Once
	closed    chan struct{}
}

var _ broker.Source = (*source)(nil)

// start starts the streaming pull unless it runs. It runs until stop or
// Close, not under a Run's context, so that the acknowledgements of a
// batch settled as Run ends are still sent.
func (s *source) start() (stopped chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped != nil {
		select {
		case <-s.stopped:
			if s.err == nil {
				s.cancel, s.stopped = nil, nil // ended normally: start again
			}
		default:
		}
		if s.stopped != nil {
			return s.stopped
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.cancel, s.stopped, s.err = cancel, done, nil
	go func() {
		err := s.sub.Receive(ctx, func(cctx context.Context, m *pubsub.Message) {
			select {
			case s.msgs <- m:
			case <-cctx.Done():
				m.Nack()
			}
		})
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		cancel()
		close(done)
	}()
	return done
}

// stop ends the streaming pull and waits for it (pending
// acknowledgements are sent; messages not handed over are nacked).
func (s *source) stop() {
	s.mu.Lock()
	cancel, stopped := s.cancel, s.stopped
	s.mu.Unlock()
	if stopped == nil {
		return
	}
	cancel()
	<-stopped
	s.mu.Lock()
	if s.stopped == stopped {
		s.cancel, s.stopped, s.err = nil, nil, nil
	}
	s.mu.Unlock()
}

func (s *source) Receive(ctx context.Context, max int) ([]*broker.Delivery, error) {
	select {
	case <-s.closed:
		return nil, fmt.Errorf("pubsub: consumer of %s: %w", s.name, broker.ErrClosed)
	default:
	}
	stopped := s.start()
	var first *pubsub.Message
	select {
	case first = <-s.msgs:
	case <-ctx.Done():
		// Run ends, with no batch in hand: stop pulling, so that no
		// message waits in a callback while nobody processes it.
		s.stop()
		return nil, ctx.Err()
	case <-s.closed:
		return nil, fmt.Errorf("pubsub: consumer of %s: %w", s.name, broker.ErrClosed)
	case <-stopped:
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		if err == nil {
			return nil, nil
		}
		s.stop()
		return nil, fmt.Errorf("pubsub: receive from %s: %w", s.name, err)
	}
	ds := []*broker.Delivery{s.delivery(first)}
	for len(ds) < max {
		select {
		case m := <-s.msgs:
			ds = append(ds, s.delivery(m))
			continue
		default:
		}
		break
	}
	return ds, nil
}

func (s *source) delivery(m *pubsub.Message) *broker.Delivery {
	return &broker.Delivery{Message: MessageOf(s.name, m), OrderingKey: m.OrderingKey, Handle: m}
}

func messageOf(d *broker.Delivery) (*pubsub.Message, error) {
	m, ok := d.Handle.(*pubsub.Message)
	if !ok || m == nil {
		return nil, fmt.Errorf("pubsub: a delivery of another source: %w", broker.ErrInvalidArgument)
	}
	return m, nil
}

// Ack acknowledges the message. With exactly-once delivery the error is
// Pub/Sub's answer; otherwise an acknowledgement is best effort.
func (s *source) Ack(ctx context.Context, d *broker.Delivery) error {
	m, err := messageOf(d)
	if err != nil {
		return err
	}
	if _, err := m.AckWithResult().Get(ctx); err != nil {
		return fmt.Errorf("pubsub: ack %s: %w", m.ID, err)
	}
	return nil
}

// Nack nacks the message: Pub/Sub redelivers it under the subscription's
// retry policy. The delay does not apply.
func (s *source) Nack(_ context.Context, d *broker.Delivery, _ time.Duration) error {
	m, err := messageOf(d)
	if err != nil {
		return err
	}
	m.Nack()
	return nil
}

// Close stops the streaming pull; the client stays open.
func (s *source) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	s.stop()
	return nil
}

// MessageOf converts a message received from subscription into a
// broker.Message: the data exactly, headers from attributes (see the
// package doc), the key ([HeaderKey], else the ordering key),
// DeliveryAttempt from the delivery attempt (0 when Pub/Sub does not
// report one), and provenance (system "pubsub", the subscription, message
// id, publish time — or, for a message a dead-letter policy forwarded,
// what its CloudPubSubDeadLetterSource* attributes say).
func MessageOf(subscription string, m *pubsub.Message) *broker.Message {
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
	bm.Source = sourceOf(m.Attributes, src)
	return bm
}
