package servicebus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
)

// inFlight is a message a consumer is handling, which a [DeadLetterer]
// may dead-letter natively.
type inFlight struct {
	recv    Receiver
	msg     *azservicebus.ReceivedMessage
	queue   string
	mu      sync.Mutex
	settled bool // dead-lettered by the DeadLetterer, or settled by the consumer
}

// inFlightKey identifies a message in flight: its entity and sequence
// number, which the envelope's provenance carries (Topic, Offset).
type inFlightKey struct {
	queue string
	seq   int64
}

// DeadLettererOptions configures [NewDeadLetterer]. The zero value and nil
// are valid.
type DeadLettererOptions struct {
	// MaxMessageBytes is the source entity's message size limit. Default
	// 262,144 (the Standard tier's 256 KiB).
	MaxMessageBytes int
	// HeaderBudget is kept for system and application properties.
	// Default 8,192 bytes.
	HeaderBudget int
}

// DeadLetterer is a broker.Publisher that dead-letters the message a
// consumer is handling into its queue's $DeadLetterQueue sub-queue
// (DeadLetterMessage), as Service Bus intends, instead of sending a new
// message:
//
//   - DeadLetterReason: the failure class and stage, "invalid_geometry/topology_validation";
//   - DeadLetterErrorDescription: the error message (cut to 4,096 bytes; the
//     envelope has it whole);
//   - application properties: the dead-letter headers, and the encoded
//     envelope in [HeaderEnvelope]. The body stays the original payload.
//
// Give it to the Processor as its Publisher and to [NewConsumer] as
// ConsumerOptions.DeadLetterer: the consumer tells it which messages are
// in flight, and it finds the one an envelope is about by the envelope's
// provenance (queue and sequence number); the destination the Processor
// names is ignored. Publish refuses an envelope of a message no consumer
// of it has in flight.
//
// The envelope shares the message with the original body, so the limit
// it reports is half of MaxMessageBytes − HeaderBudget; Publish refuses
// with a *classify.TooLargeError when body, envelope and properties
// together exceed MaxMessageBytes — the message is then abandoned, and
// Service Bus dead-letters it itself after MaxDeliveryCount (without the
// envelope).
type DeadLetterer struct {
	max, budget int

	mu       sync.Mutex
	inFlight map[inFlightKey]*inFlight
}

// NewDeadLetterer returns a DeadLetterer.
func NewDeadLetterer(opts *DeadLettererOptions) (*DeadLetterer, error) {
	var o DeadLettererOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = defaultMaxMessageBytes
	}
	if o.HeaderBudget == 0 {
		o.HeaderBudget = defaultHeaderBudget
	}
	if o.HeaderBudget < 0 || o.HeaderBudget >= o.MaxMessageBytes {
		return nil, fmt.Errorf("servicebus: HeaderBudget %d must be below MaxMessageBytes %d: %w", o.HeaderBudget, o.MaxMessageBytes, broker.ErrInvalidArgument)
	}
	return &DeadLetterer{max: o.MaxMessageBytes, budget: o.HeaderBudget, inFlight: map[inFlightKey]*inFlight{}}, nil
}

func (d *DeadLetterer) track(k inFlightKey, f *inFlight) {
	d.mu.Lock()
	d.inFlight[k] = f
	d.mu.Unlock()
}

func (d *DeadLetterer) forget(k inFlightKey, f *inFlight) {
	d.mu.Lock()
	if d.inFlight[k] == f {
		delete(d.inFlight, k)
	}
	d.mu.Unlock()
}

// MaxMessageBytes implements broker.Limiter.
func (d *DeadLetterer) MaxMessageBytes(string) int { return (d.max - d.budget) / 2 }

// maxDescription bounds DeadLetterErrorDescription.
const maxDescription = 4096

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Publish dead-letters the in-flight message m's envelope is about, with
// m (the encoded envelope) in its properties.
func (d *DeadLetterer) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if m == nil {
		return fmt.Errorf("servicebus: nil message: %w", broker.ErrInvalidArgument)
	}
	env, err := broker.EnvelopeOf(m)
	if err != nil {
		return fmt.Errorf("servicebus: DeadLetterer publishes dlq.v1 envelopes only: %w", err)
	}
	var f *inFlight
	if src := env.Source; src != nil && src.System == "servicebus" && src.Offset != nil {
		d.mu.Lock()
		f = d.inFlight[inFlightKey{src.Topic, *src.Offset}]
		d.mu.Unlock()
	}
	if f == nil {
		return errors.New("servicebus: DeadLetterer: the envelope's message is not in flight in a consumer (pass the DeadLetterer in ConsumerOptions.DeadLetterer)")
	}
	props, psize := properties(m)
	props[HeaderEnvelope] = string(m.Body)
	total := len(f.msg.Body) + len(m.Body) + len(HeaderEnvelope) + psize
	for k, v := range f.msg.ApplicationProperties {
		if _, replaced := props[k]; !replaced {
			total += len(k) + len(fmt.Sprint(v))
		}
	}
	if total > d.max {
		return &classify.TooLargeError{What: "dead-lettered message with its envelope", Destination: DeadLetterQueue(f.queue), Size: total, Limit: d.max}
	}
	reason := m.Header(broker.HeaderClass) + "/" + m.Header(broker.HeaderStage)
	desc := truncate(env.ErrorMessage, maxDescription)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.settled {
		return errors.New("servicebus: message already settled")
	}
	if err := f.recv.DeadLetterMessage(ctx, f.msg, &azservicebus.DeadLetterOptions{Reason: &reason, ErrorDescription: &desc, PropertiesToModify: props}); err != nil {
		return fmt.Errorf("servicebus: dead-letter message %s of %s: %w", f.msg.MessageID, f.queue, err)
	}
	f.settled = true
	return nil
}

var (
	_ broker.Publisher = (*DeadLetterer)(nil)
	_ broker.Limiter   = (*DeadLetterer)(nil)
)

// ConsumerOptions configures [NewConsumer]. The zero value and nil are
// valid.
type ConsumerOptions struct {
	// ConsumerOptions: MaxBatch is how many messages one ReceiveMessages
	// asks for; default 10. Concurrency default 1. NackDelay does not
	// apply: an abandoned message is available again at once.
	broker.ConsumerOptions
	// ExtendEvery is how often the lock of a message being processed is
	// renewed (RenewMessageLock), so a long spatial operation keeps it.
	// Default 20s (a third of Service Bus's default 60s LockDuration);
	// negative disables renewal. Keep it below a third of the queue's
	// LockDuration.
	ExtendEvery time.Duration
	// DeadLetterer, when the Processor publishes to one, is told which
	// messages are in flight, so that it can dead-letter them natively.
	// Default nil.
	DeadLetterer *DeadLetterer
}

// NewConsumer returns a consumer reading recv (a PeekLock receiver for
// queue; *azservicebus.Receiver) that runs every message through proc:
// the handler with in-place retries, then the dead-letter write. Run it
// with Run(ctx, handler). Closing the consumer leaves recv open.
//
// A message is settled only when the outcome allows it: completed
// (CompleteMessage) when the handler succeeded or the envelope was sent to
// a separate dead-letter store, or already dead-lettered into the queue's
// $DeadLetterQueue when the Processor's publisher is a [DeadLetterer].
// Otherwise it is abandoned (AbandonMessage): Service Bus redelivers it,
// and after the queue's MaxDeliveryCount moves it to the dead-letter
// sub-queue itself. Attempts start at DeliveryCount; the lock is renewed
// every ExtendEvery while the handler runs.
func NewConsumer(ctx context.Context, recv Receiver, queue string, proc *broker.Processor, opts *ConsumerOptions) (*broker.Consumer, error) {
	_ = ctx
	if recv == nil || proc == nil || queue == "" {
		return nil, fmt.Errorf("servicebus: NewConsumer needs a receiver, a queue name and a processor: %w", broker.ErrInvalidArgument)
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	switch {
	case o.ExtendEvery == 0:
		o.ExtendEvery = 20 * time.Second
	case o.ExtendEvery < 0:
		o.ExtendEvery = 0
	}
	src := &source{recv: recv, queue: queue, every: o.ExtendEvery, dl: o.DeadLetterer, closed: make(chan struct{})}
	return broker.NewConsumer(src, proc, &o.ConsumerOptions)
}

// source is the [broker.Source] of a queue's receiver.
type source struct {
	recv  Receiver
	queue string
	every time.Duration
	dl    *DeadLetterer

	closeOnce sync.Once
	closed    chan struct{}
}

var (
	_ broker.Source   = (*source)(nil)
	_ broker.Extender = (*source)(nil)
)

func (s *source) Receive(ctx context.Context, max int) ([]*broker.Delivery, error) {
	select {
	case <-s.closed:
		return nil, fmt.Errorf("servicebus: consumer of %s: %w", s.queue, broker.ErrClosed)
	default:
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-rctx.Done():
		}
	}()
	msgs, err := s.recv.ReceiveMessages(rctx, max, nil)
	if err != nil {
		select {
		case <-s.closed:
			return nil, fmt.Errorf("servicebus: consumer of %s: %w", s.queue, broker.ErrClosed)
		default:
		}
		return nil, fmt.Errorf("servicebus: receive from %s: %w", s.queue, err)
	}
	ds := make([]*broker.Delivery, 0, len(msgs))
	for _, msg := range msgs {
		f := &inFlight{recv: s.recv, msg: msg, queue: s.queue}
		if s.dl != nil && msg.SequenceNumber != nil {
			s.dl.track(inFlightKey{s.queue, *msg.SequenceNumber}, f)
		}
		ds = append(ds, &broker.Delivery{Message: messageOf(s.queue, msg), Handle: f})
	}
	return ds, nil
}

func (s *source) take(d *broker.Delivery) (f *inFlight, settled bool, err error) {
	f, ok := d.Handle.(*inFlight)
	if !ok || f == nil {
		return nil, false, fmt.Errorf("servicebus: a delivery of another source: %w", broker.ErrInvalidArgument)
	}
	if s.dl != nil && f.msg.SequenceNumber != nil {
		s.dl.forget(inFlightKey{s.queue, *f.msg.SequenceNumber}, f)
	}
	f.mu.Lock()
	settled, f.settled = f.settled, true
	f.mu.Unlock()
	return f, settled, nil
}

// Ack completes the message, unless a DeadLetterer dead-lettered it. A
// lost lock gives an error wrapping broker.ErrLeaseLost.
func (s *source) Ack(ctx context.Context, d *broker.Delivery) error {
	f, settled, err := s.take(d)
	if err != nil || settled {
		return err
	}
	if err := s.recv.CompleteMessage(ctx, f.msg, nil); err != nil {
		if isLockLost(err) {
			return fmt.Errorf("servicebus: complete %s: %w: %w", f.msg.MessageID, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("servicebus: complete %s: %w", f.msg.MessageID, err)
	}
	return nil
}

// Nack abandons the message: Service Bus delivers it again at once (the
// delay does not apply), or dead-letters it after MaxDeliveryCount.
func (s *source) Nack(ctx context.Context, d *broker.Delivery, _ time.Duration) error {
	f, settled, err := s.take(d)
	if err != nil || settled {
		return err
	}
	if err := s.recv.AbandonMessage(ctx, f.msg, nil); err != nil && !isLockLost(err) {
		return fmt.Errorf("servicebus: abandon %s: %w", f.msg.MessageID, err)
	}
	return nil
}

// ExtendEvery implements [broker.Extender].
func (s *source) ExtendEvery() time.Duration { return s.every }

// Extend renews the message's lock.
func (s *source) Extend(ctx context.Context, d *broker.Delivery) error {
	f, ok := d.Handle.(*inFlight)
	if !ok || f == nil {
		return fmt.Errorf("servicebus: a delivery of another source: %w", broker.ErrInvalidArgument)
	}
	if err := s.recv.RenewMessageLock(ctx, f.msg, nil); err != nil {
		if isLockLost(err) {
			return fmt.Errorf("servicebus: renew the lock of %s: %w: %w", f.msg.MessageID, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("servicebus: renew the lock of %s: %w", f.msg.MessageID, err)
	}
	return nil
}

// Close stops Receive; the receiver stays open.
func (s *source) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}
