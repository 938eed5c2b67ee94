package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/geodlq/geodlq/broker"
)

// ConsumerOptions configures [NewConsumer]. The zero value and nil are
// valid.
type ConsumerOptions struct {
	// ConsumerOptions: Concurrency default 1; MaxBatch, the most
	// deliveries handed over at once, defaults to Concurrency. NackDelay
	// does not apply: AMQP requeues at once (basic.nack), and the
	// Processor's in-place retries pace the redeliveries.
	broker.ConsumerOptions
	// Prefetch is the channel's basic.qos prefetch count: how many
	// unacknowledged deliveries the broker pushes ahead. Default MaxBatch.
	Prefetch int
	// ConsumerTag names the AMQP consumer. Default "geodlq-" and a random
	// id.
	ConsumerTag string
	// RejectOnFailure makes a delivery whose dead-letter write failed be
	// rejected without requeue, so that the source queue's own
	// dead-letter exchange takes it (with an x-death entry), instead of
	// being requeued. A delivery given back because the consumer is
	// shutting down is requeued either way. Default false: requeue, so
	// that the source redelivers it (and a quorum queue's
	// x-delivery-limit eventually dead-letters it).
	RejectOnFailure bool
}

// NewConsumer returns a consumer of queue on ch that runs every delivery
// through proc: the handler with in-place retries, then the dead-letter
// write. A delivery is acknowledged (basic.ack) only once the handler
// succeeded or the dead-letter write was confirmed by the broker — with
// this package's store, a publisher confirm — and is otherwise requeued
// (basic.nack), or with RejectOnFailure rejected to the queue's
// dead-letter exchange. Message.DeliveryAttempt and Source come from the
// delivery's x-death, x-delivery-count and redelivered flag (see
// [MessageOf]).
//
// The channel is the consumer's alone, and stays the caller's: Run sets
// its prefetch and consumes the queue (basic.consume, manual acks) and,
// when its context ends, cancels the AMQP consumer and requeues the
// deliveries the broker pushed that it did not process, so none waits for
// the channel to close. Close the consumer after Run returned, and the
// channel after that: a channel's synchronous methods must not run
// concurrently, so the consumer cancels on the goroutine of Run or Close,
// never on one of its own.
func NewConsumer(ch *amqp.Channel, queue string, proc *broker.Processor, opts *ConsumerOptions) (*broker.Consumer, error) {
	if ch == nil || proc == nil {
		return nil, fmt.Errorf("rabbitmq: NewConsumer needs a channel and a processor: %w", broker.ErrInvalidArgument)
	}
	if queue == "" || len(queue) > maxName {
		return nil, fmt.Errorf("rabbitmq: NewConsumer: queue name %q is not 1 to %d bytes: %w", queue, maxName, broker.ErrInvalidArgument)
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	if o.Concurrency < 0 || o.MaxBatch < 0 || o.Prefetch < 0 {
		return nil, fmt.Errorf("rabbitmq: NewConsumer: negative Concurrency, MaxBatch or Prefetch: %w", broker.ErrInvalidArgument)
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = max(1, o.Concurrency)
	}
	if o.Prefetch == 0 {
		o.Prefetch = o.MaxBatch
	}
	if o.ConsumerTag == "" {
		o.ConsumerTag = "geodlq-" + newID()
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &source{ch: ch, queue: queue, tag: o.ConsumerTag, prefetch: o.Prefetch, reject: o.RejectOnFailure,
		log: log, closing: make(chan struct{})}
	user := o.OnResult
	o.OnResult = func(d *broker.Delivery, res broker.Result, err error) {
		var dle *broker.DeadLetterError
		if h, ok := d.Handle.(*delivery); ok && errors.As(err, &dle) {
			h.writeFailed = true
		}
		if user != nil {
			user(d, res, err)
		}
	}
	return broker.NewConsumer(s, proc, &o.ConsumerOptions)
}

// source is the [broker.Source] of a queue: it bridges the channel's
// deliveries into batches.
type source struct {
	ch       *amqp.Channel
	queue    string
	tag      string
	prefetch int
	reject   bool
	log      *slog.Logger

	// recv serializes Receive and Close, and with them every synchronous
	// method on the channel (basic.qos, basic.consume, basic.cancel).
	recv       sync.Mutex
	consuming  bool
	deliveries <-chan amqp.Delivery

	closeOnce sync.Once
	closing   chan struct{}
}

var _ broker.Source = (*source)(nil)

// delivery is what a Delivery's Handle holds.
type delivery struct {
	d amqp.Delivery
	// writeFailed is set (by the goroutine that processed the delivery,
	// before it settles it) when the dead-letter write failed.
	writeFailed bool
}

// Receive waits for a delivery and returns it with those already pushed
// behind it, up to max. It starts consuming on its first call. When ctx
// ends it cancels the AMQP consumer and requeues what the broker pushed
// meanwhile, and returns ctx's error; the next Receive consumes again.
func (s *source) Receive(ctx context.Context, max int) ([]*broker.Delivery, error) {
	s.recv.Lock()
	defer s.recv.Unlock()
	select {
	case <-s.closing:
		return nil, fmt.Errorf("rabbitmq: consumer of %q: %w", s.queue, broker.ErrClosed)
	default:
	}
	if err := ctx.Err(); err != nil {
		s.stop()
		return nil, err
	}
	if !s.consuming {
		if err := s.ch.Qos(s.prefetch, 0, false); err != nil {
			return nil, s.channelError("setting the prefetch", err)
		}
		// Consume without a context and cancel on this goroutine:
		// ConsumeWithContext cancels from a goroutine of its own, which
		// can race the caller's Channel.Close and leave both waiting for
		// a reply (commit 65ff09a).
		ds, err := s.ch.Consume(s.queue, s.tag, false, false, false, false, nil)
		if err != nil {
			return nil, s.channelError("consuming", err)
		}
		s.deliveries, s.consuming = ds, true
	}
	var out []*broker.Delivery
	add := func(d amqp.Delivery) {
		out = append(out, &broker.Delivery{Message: MessageOf(d, s.queue), Handle: &delivery{d: d}})
	}
	select {
	case <-s.closing:
		return nil, fmt.Errorf("rabbitmq: consumer of %q: %w", s.queue, broker.ErrClosed)
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	case d, ok := <-s.deliveries:
		if !ok {
			s.consuming = false
			return nil, fmt.Errorf("rabbitmq: deliveries of %q stopped (the channel or connection closed, or the broker cancelled the consumer): %w", s.queue, broker.ErrClosed)
		}
		add(d)
	}
	for len(out) < max {
		select {
		case d, ok := <-s.deliveries:
			if !ok {
				s.consuming = false
				return out, nil // the next Receive reports it
			}
			add(d)
		default:
			return out, nil
		}
	}
	return out, nil
}

// channelError wraps a failed basic.qos or basic.consume. An AMQP error
// there is a channel (or connection) exception, which closes the channel
// for good: it wraps [broker.ErrClosed], which stops Run.
func (s *source) channelError(what string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) || s.ch.IsClosed() {
		return fmt.Errorf("rabbitmq: %s %q: %w: %w", what, s.queue, err, broker.ErrClosed)
	}
	return fmt.Errorf("rabbitmq: %s %q: %w", what, s.queue, err)
}

// stop cancels the AMQP consumer and requeues every delivery the broker
// pushed before the cancel took effect, so none waits for the channel to
// close. s.recv is held.
func (s *source) stop() {
	if !s.consuming {
		return
	}
	s.consuming = false
	if err := s.ch.Cancel(s.tag, false); err != nil {
		return // the channel is gone; the broker requeues its deliveries
	}
	// After basic.cancel-ok the client closes the deliveries channel once
	// it handed over what it buffered.
	requeued := 0
	for d := range s.deliveries {
		if err := d.Nack(false, true); err != nil {
			s.log.Warn("geodlq: requeueing an unprocessed delivery failed; the broker requeues it when the channel closes", slog.String("queue", s.queue), slog.Any("error", err))
			continue
		}
		requeued++
	}
	if requeued > 0 {
		// basic.nack has no answer: a synchronous method after them
		// returns once the broker processed them, so the deliveries are
		// back in the queue when stop returns.
		if err := s.ch.Qos(s.prefetch, 0, false); err != nil {
			s.log.Warn("geodlq: waiting for requeued deliveries failed", slog.String("queue", s.queue), slog.Any("error", err))
		}
	}
}

// Ack acknowledges d (basic.ack).
func (s *source) Ack(_ context.Context, d *broker.Delivery) error {
	h := d.Handle.(*delivery)
	if err := h.d.Ack(false); err != nil {
		return fmt.Errorf("rabbitmq: acknowledging a delivery of %q (processed or dead-lettered; a redelivery is absorbed by its idempotency key): %w", s.queue, err)
	}
	return nil
}

// Nack requeues d at once (AMQP cannot delay a requeue), or, with
// RejectOnFailure and a failed dead-letter write, rejects it to the
// queue's dead-letter exchange.
func (s *source) Nack(_ context.Context, d *broker.Delivery, _ time.Duration) error {
	h := d.Handle.(*delivery)
	requeue := !(s.reject && h.writeFailed)
	if err := h.d.Nack(false, requeue); err != nil {
		return fmt.Errorf("rabbitmq: nack of a delivery of %q (the broker requeues it when the channel closes): %w", s.queue, err)
	}
	return nil
}

// Close makes a Receive in progress return, then cancels the AMQP
// consumer and requeues the deliveries the broker pushed that were not
// processed. It does not close the channel.
func (s *source) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.recv.Lock()
	defer s.recv.Unlock()
	s.stop()
	return nil
}
