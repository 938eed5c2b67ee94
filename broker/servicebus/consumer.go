package servicebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// inFlight is the message a Consumer is handling, carried in the context
// so a [DeadLetterer] can dead-letter it.
type inFlight struct {
	recv    Receiver
	msg     *azservicebus.ReceivedMessage
	queue   string
	mu      sync.Mutex
	settled bool
}

type inFlightKey struct{}

// DeadLettererOptions configures a [DeadLetterer].
type DeadLettererOptions struct {
	// MaxMessageBytes is the source entity's message size limit. Default
	// [DefaultMaxMessageBytes] (Standard tier, 256 KiB).
	MaxMessageBytes int
	// AttributeBudget is kept for system and application properties.
	// Default [DefaultAttributeBudget].
	AttributeBudget int
}

// DeadLetterer is a broker.Publisher that dead-letters the message a
// [Consumer] is handling into its queue's $DeadLetterQueue sub-queue
// (DeadLetterMessage), as Service Bus intends, instead of sending a new
// message:
//
//   - DeadLetterReason: the failure class and stage, "invalid_geometry/topology_validation";
//   - DeadLetterErrorDescription: the error message (cut to 4,096 bytes; the
//     envelope has it whole);
//   - application properties: the dead-letter headers, and the encoded
//     envelope in [PropEnvelope]. The body stays the original payload.
//
// It works only inside [Consumer.Handle] (the message travels in the
// context); the destination the processor names is ignored. The envelope
// shares the message with the original body, so the limit it reports is
// half of MaxMessageBytes − AttributeBudget; Publish refuses with a
// *classify.TooLargeError when body, envelope and properties together exceed
// MaxMessageBytes — the message is then abandoned, and Service Bus
// dead-letters it itself after MaxDeliveryCount (without the envelope).
type DeadLetterer struct {
	max, budget int
}

// NewDeadLetterer returns a DeadLetterer. nil opts means the defaults.
func NewDeadLetterer(opts *DeadLettererOptions) (*DeadLetterer, error) {
	var o DeadLettererOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.AttributeBudget == 0 {
		o.AttributeBudget = DefaultAttributeBudget
	}
	if o.AttributeBudget < 0 || o.AttributeBudget >= o.MaxMessageBytes {
		return nil, fmt.Errorf("servicebus: AttributeBudget %d must be below MaxMessageBytes %d", o.AttributeBudget, o.MaxMessageBytes)
	}
	return &DeadLetterer{max: o.MaxMessageBytes, budget: o.AttributeBudget}, nil
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

// Publish dead-letters the in-flight message with m (an encoded envelope)
// in its properties.
func (d *DeadLetterer) Publish(ctx context.Context, destination string, m *broker.Message) error {
	f, _ := ctx.Value(inFlightKey{}).(*inFlight)
	if f == nil {
		return errors.New("servicebus: DeadLetterer publishes only for a message a Consumer is handling")
	}
	if m == nil {
		return errors.New("servicebus: nil message")
	}
	props, psize := properties(m)
	props[PropEnvelope] = string(m.Body)
	total := len(f.msg.Body) + len(m.Body) + len(PropEnvelope) + psize
	for k, v := range f.msg.ApplicationProperties {
		if _, replaced := props[k]; !replaced {
			total += len(k) + len(fmt.Sprint(v))
		}
	}
	if total > d.max {
		return &classify.TooLargeError{Destination: DeadLetterQueue(f.queue), Size: total, Limit: d.max}
	}
	reason := m.Header(broker.HeaderClass) + "/" + m.Header(broker.HeaderStage)
	var desc string
	if env, err := envelope.Decode(m.Body); err == nil {
		desc = truncate(env.ErrorMessage, maxDescription)
	}
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

// ConsumerOptions configures a [Consumer]. The zero value (and nil) uses
// the defaults.
type ConsumerOptions struct {
	// MaxMessages is how many messages one ReceiveMessages asks for.
	// Default 10.
	MaxMessages int
	// LockRenewal is how often the lock of a message being processed is
	// renewed (RenewMessageLock), so a long spatial operation keeps it.
	// Default 20 s (a third of Service Bus's default 60 s LockDuration);
	// negative disables renewal. Keep it below a third of the queue's
	// LockDuration.
	LockRenewal time.Duration
	// Concurrency is how many messages are processed at once. Default 1.
	Concurrency int
	// Logger receives one record per message not settled as processed.
	// Nil discards.
	Logger *slog.Logger
}

// Consumer receives from a source queue and runs each message through a
// [broker.Processor]. When the outcome allows it, the message is settled:
// completed (CompleteMessage) when the handler succeeded or the envelope
// was sent to a separate dead-letter store, or already dead-lettered into
// the queue's $DeadLetterQueue when the processor's publisher is a
// [DeadLetterer]. Otherwise it is abandoned (AbandonMessage): Service Bus
// redelivers it, and after the queue's MaxDeliveryCount moves it to the
// dead-letter sub-queue itself. Attempts start at DeliveryCount; the lock
// is renewed while the handler runs.
type Consumer struct {
	recv  Receiver
	queue string
	proc  *broker.Processor
	opts  ConsumerOptions
	log   *slog.Logger
}

// NewConsumer returns a consumer reading recv (a PeekLock receiver for
// queue). nil opts means the defaults.
func NewConsumer(ctx context.Context, recv Receiver, queue string, proc *broker.Processor, opts *ConsumerOptions) (*Consumer, error) {
	_ = ctx
	if recv == nil || proc == nil || queue == "" {
		return nil, errors.New("servicebus: NewConsumer needs a receiver, a queue name and a processor")
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxMessages == 0 {
		o.MaxMessages = 10
	}
	if o.LockRenewal == 0 {
		o.LockRenewal = 20 * time.Second
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.MaxMessages < 0 || o.Concurrency < 0 {
		return nil, errors.New("servicebus: MaxMessages and Concurrency must be positive")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Consumer{recv: recv, queue: queue, proc: proc, opts: o, log: log}, nil
}

// Run receives and processes messages until ctx ends, then returns
// ctx.Err(). Receive errors are logged and retried after a second.
func (c *Consumer) Run(ctx context.Context, h broker.Handler) error {
	for ctx.Err() == nil {
		if _, err := c.Poll(ctx, h); err != nil && ctx.Err() == nil {
			var re *ReceiveError
			if errors.As(err, &re) {
				c.log.ErrorContext(ctx, "geodlq: servicebus: receive failed", slog.String("queue", c.queue), slog.Any("error", err))
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}
	return ctx.Err()
}

// ReceiveError is returned by [Consumer.Poll] when ReceiveMessages failed.
type ReceiveError struct{ Err error }

func (e *ReceiveError) Error() string { return "servicebus: receive: " + e.Err.Error() }

// Unwrap returns the SDK's error.
func (e *ReceiveError) Unwrap() error { return e.Err }

// Poll makes one ReceiveMessages call (which blocks until a message
// arrives or ctx ends) and processes what it returns. The error is a
// *[ReceiveError], or the joined errors of messages not settled as
// processed.
func (c *Consumer) Poll(ctx context.Context, h broker.Handler) (int, error) {
	msgs, err := c.recv.ReceiveMessages(ctx, c.opts.MaxMessages, nil)
	if err != nil {
		return 0, &ReceiveError{Err: err}
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, c.opts.Concurrency)
	)
	for _, m := range msgs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := c.Handle(ctx, m, h); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return len(msgs), errors.Join(errs...)
}

// Handle processes one received message and settles it. The error is nil
// exactly when the message was completed or dead-lettered with its
// envelope.
func (c *Consumer) Handle(ctx context.Context, msg *azservicebus.ReceivedMessage, h broker.Handler) (broker.Result, error) {
	f := &inFlight{recv: c.recv, msg: msg, queue: c.queue}
	pctx := context.WithValue(ctx, inFlightKey{}, f)
	stop := c.renew(ctx, msg)
	out, err := c.proc.Process(pctx, ToMessage(c.queue, msg), h)
	stop()
	f.mu.Lock()
	settled := f.settled
	f.settled = true
	f.mu.Unlock()
	sctx := context.WithoutCancel(ctx)
	if err != nil {
		if aerr := c.recv.AbandonMessage(sctx, msg, nil); aerr != nil {
			err = errors.Join(err, fmt.Errorf("servicebus: abandon: %w", aerr))
		}
		c.log.WarnContext(ctx, "geodlq: servicebus: message abandoned; Service Bus redelivers it",
			slog.String("queue", c.queue), slog.String("message_id", msg.MessageID), slog.Any("error", err))
		return out, err
	}
	if settled {
		return out, nil
	}
	if err := c.recv.CompleteMessage(sctx, msg, nil); err != nil {
		if IsLockLost(err) {
			err = fmt.Errorf("%w: %w", broker.ErrLeaseLost, err)
		}
		c.log.ErrorContext(ctx, "geodlq: servicebus: CompleteMessage failed; the message will be redelivered",
			slog.String("queue", c.queue), slog.String("message_id", msg.MessageID), slog.Bool("dead_lettered", out.DeadLettered), slog.Any("error", err))
		return out, fmt.Errorf("servicebus: complete %s: %w", msg.MessageID, err)
	}
	return out, nil
}

func (c *Consumer) renew(ctx context.Context, msg *azservicebus.ReceivedMessage) (stop func()) {
	if c.opts.LockRenewal <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(c.opts.LockRenewal)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := c.recv.RenewMessageLock(ctx, msg, nil); err != nil && ctx.Err() == nil {
				c.log.WarnContext(ctx, "geodlq: servicebus: lock renewal failed", slog.String("queue", c.queue), slog.Any("error", err))
				if IsLockLost(err) {
					return
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
