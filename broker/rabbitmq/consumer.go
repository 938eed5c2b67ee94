package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/geodlq/geodlq/broker"
)

// ConsumerOptions configures a [Consumer].
type ConsumerOptions struct {
	// Processor configures the [broker.Processor] that runs the handler.
	// Its Publisher is required; a [*Store] publishes with confirms.
	Processor broker.ProcessorOptions
	// Prefetch is the channel's basic.qos prefetch count. Default 1.
	Prefetch int
	// ConsumerTag names the consumer. Default "": the client picks one.
	ConsumerTag string
	// RejectOnFailure makes a message that could be neither processed nor
	// dead-lettered be rejected without requeue, so the source queue's own
	// dead-letter exchange takes it (with an x-death entry), instead of
	// being requeued. Default false: requeue, so the source redelivers it
	// (and a quorum queue's x-delivery-limit eventually dead-letters it).
	RejectOnFailure bool
	// Logger receives messages that were not acknowledged. Nil discards.
	Logger *slog.Logger
}

// Consumer consumes a source queue with manual acknowledgements and runs
// each delivery through a [broker.Processor]: a delivery is acknowledged
// only once the handler succeeded or the dead-letter write was confirmed
// by the broker; if the dead-letter write failed it is negatively
// acknowledged with requeue and comes back. It is safe for concurrent use.
type Consumer struct {
	ch     *amqp.Channel
	queue  string
	h      broker.Handler
	proc   *broker.Processor
	tag    string
	prefet int
	reject bool
	log    *slog.Logger
}

// NewConsumer returns a consumer of queue on ch, which the caller owns
// and must not use for other consumers. h is the handler the Processor
// runs.
func NewConsumer(ch *amqp.Channel, queue string, h broker.Handler, opts *ConsumerOptions) (*Consumer, error) {
	if ch == nil || queue == "" || h == nil {
		return nil, errors.New("rabbitmq: NewConsumer needs a channel, a queue and a handler")
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	proc, err := broker.NewProcessor(o.Processor)
	if err != nil {
		return nil, err
	}
	if o.Prefetch <= 0 {
		o.Prefetch = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Consumer{ch: ch, queue: queue, h: h, proc: proc, tag: o.ConsumerTag, prefet: o.Prefetch, reject: o.RejectOnFailure, log: o.Logger}, nil
}

// Handle processes one delivery of the consumer's queue and settles it:
// basic.ack when the Processor says the source may be acknowledged (the
// handler succeeded, or the envelope's publish was confirmed), otherwise
// basic.nack with requeue (or without, with RejectOnFailure). The
// delivery's attempt comes from [DeliveryAttempt] and its provenance from
// [MessageFromDelivery].
func (c *Consumer) Handle(ctx context.Context, d amqp.Delivery) (broker.Result, error) {
	m := MessageFromDelivery(d, c.queue)
	out, perr := c.proc.Process(ctx, m, c.h)
	if perr == nil {
		if err := d.Ack(false); err != nil {
			return out, fmt.Errorf("rabbitmq: acknowledging a delivery of %q (processed or dead-lettered; a redelivery is absorbed by its idempotency key): %w", c.queue, err)
		}
		return out, nil
	}
	if err := d.Nack(false, !c.reject); err != nil {
		c.log.WarnContext(ctx, "geodlq: nack failed; the broker requeues the delivery when the channel closes", slog.Any("error", err))
	}
	return out, perr
}

// Run sets the prefetch, consumes the queue and handles deliveries one at
// a time until ctx ends (it then cancels the consumer and requeues the
// deliveries not yet handled) or the channel closes. It
// returns ctx.Err() or the reason the deliveries stopped.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.ch.Qos(c.prefet, 0, false); err != nil {
		return fmt.Errorf("rabbitmq: setting prefetch: %w", err)
	}
	tag := c.tag
	if tag == "" {
		tag = "geodlq-" + newID()
	}
	// Consume without a context and cancel explicitly on shutdown:
	// ConsumeWithContext cancels from a goroutine of its own, which can race
	// a caller's Channel.Close and leave both waiting for a reply.
	deliveries, err := c.ch.Consume(c.queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitmq: consuming %q: %w", c.queue, err)
	}
	for {
		select {
		case <-ctx.Done():
			c.stop(tag, deliveries)
			return ctx.Err()
		case d, ok := <-deliveries:
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return fmt.Errorf("rabbitmq: deliveries of %q stopped (channel or connection closed)", c.queue)
			}
			if _, err := c.Handle(ctx, d); err != nil {
				c.log.WarnContext(ctx, "geodlq: delivery not acknowledged", slog.String("queue", c.queue), slog.Any("error", err))
			}
		}
	}
}

// stop cancels the consumer and hands back, requeued, every delivery the
// broker pushed before the cancel took effect, so none waits for the
// channel to close.
func (c *Consumer) stop(tag string, deliveries <-chan amqp.Delivery) {
	if err := c.ch.Cancel(tag, false); err != nil {
		return // the channel is gone; the broker requeues its deliveries
	}
	for d := range deliveries {
		_ = d.Nack(false, true)
	}
}
