package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
)

// SourcePublisher returns a [broker.Publisher] that puts messages on
// queues by name — a source queue that [NewConsumer] reads — through
// RabbitMQ's default exchange, on the confirm channels of store s (made by
// [New] or opened by URL). It is the replayer's target for re-injecting
// dead-lettered events into the queues they came from
// (replay.Options.Target), and a producer's way to publish what
// [MessageOf] reads back whole.
//
// Publish(ctx, queue, m) publishes m's body exactly, its headers as string
// AMQP headers and its key as the byte-array header [HeaderKey],
// persistent and mandatory, with a fresh message_id, and returns once the
// broker confirmed it, as the store's own Publish does: a queue that does
// not exist fails with [ErrUnroutable] (SourcePublisher declares nothing),
// a nacked message with [ErrNacked], a confirm that does not come before
// ctx ends (or the store's WriteTimeout, when ctx has no deadline) with an
// error wrapping [broker.ErrOutcomeUnknown], and a body over the store's
// MaxMessageBytes with a *classify.TooLargeError before anything is sent.
// A queue name outside 1 to 255 bytes or a nil message is
// [broker.ErrInvalidArgument]; a read-only store refuses with
// [broker.ErrReadOnly], a closed one with [broker.ErrClosed], and a store
// of another adapter with errors.ErrUnsupported. It is safe for
// concurrent use and shares the store's PublishChannels.
func SourcePublisher(s *broker.Store) broker.Publisher {
	return sourcePublisher{s: s, d: driverOf(s)}
}

type sourcePublisher struct {
	s *broker.Store
	d *driver
}

// Publish publishes m to queue through the default exchange.
func (p sourcePublisher) Publish(ctx context.Context, queue string, m *broker.Message) error {
	switch {
	case p.d == nil:
		return fmt.Errorf("rabbitmq: SourcePublisher on a store that is not a RabbitMQ store: %w", errors.ErrUnsupported)
	case p.s.ReadOnly():
		return fmt.Errorf("rabbitmq: publishing to %q: %w", queue, broker.ErrReadOnly)
	case p.d.closed.Load():
		return fmt.Errorf("rabbitmq: publishing to %q: %w", queue, broker.ErrClosed)
	case queue == "" || len(queue) > maxName:
		return fmt.Errorf("rabbitmq: queue name %q is not 1 to %d bytes: %w", queue, maxName, broker.ErrInvalidArgument)
	case m == nil:
		return fmt.Errorf("rabbitmq: publishing to %q: nil message: %w", queue, broker.ErrInvalidArgument)
	case len(m.Body) > p.d.limit:
		return fmt.Errorf("rabbitmq: %w", &classify.TooLargeError{What: "message", Destination: queue, Size: len(m.Body), Limit: p.d.limit})
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.d.publish(ctx, "", queue, m)
}
