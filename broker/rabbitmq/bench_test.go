package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/rabbitmq"
	"github.com/geodlq/geodlq/internal/benchenv"
	"github.com/geodlq/geodlq/internal/testenv"
)

const benchDest = "spatial.parcels.poison.dlt"

// openBench returns a store on a new connection with an exchange and
// queue prefix of its own (deleted at the end) and the conformance
// harness's options, with the destination's queue declared, and the
// connection.
func openBench(b *testing.B) (*broker.Store, *amqp.Connection) {
	b.Helper()
	url := testenv.AMQP(b)
	conn, err := amqp.Dial(url)
	require.NoError(b, err)
	b.Cleanup(func() { _ = conn.Close() })
	name := uniqueName("geodlqbench")
	s, err := rabbitmq.New(context.Background(), conn, &rabbitmq.Options{
		Exchange: name, QueuePrefix: name + ".", Create: true,
		StoreOptions: broker.StoreOptions{LeaseTTL: leaseTTL, MaxMessageBytes: 256 << 10},
	})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close(); cleanup(b, url, name, rabbitmq.Queue(s, benchDest)) })
	require.NoError(b, rabbitmq.Declare(context.Background(), s, benchDest))
	return s, conn
}

// BenchmarkWrite publishes 2 KiB dlq.v1 envelopes, one at a time:
// persistent, mandatory, to a durable queue, each confirmed by the broker
// when Publish returns.
func BenchmarkWrite(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		return s.Publish(ctx, benchDest, m)
	})
}

// BenchmarkReplay fetches (basic.get) and acknowledges envelopes, 100 at a
// time.
func BenchmarkReplay(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Replay(b, s, s, benchDest)
}

// BenchmarkBareClientWrite is the ceiling: amqp091-go publishing the same
// body and headers (the envelope's and the key), persistent and mandatory,
// on a channel in confirm mode, to the same exchange and durable queue,
// waiting for each confirm as the store does.
func BenchmarkBareClientWrite(b *testing.B) {
	set := benchenv.New(b)
	s, conn := openBench(b)
	ch, err := conn.Channel()
	require.NoError(b, err)
	require.NoError(b, ch.Confirm(false))
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		h := make(amqp.Table, len(m.Headers)+1)
		for k, v := range m.Headers {
			h[k] = v
		}
		h[rabbitmq.HeaderKey] = m.Key
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, rabbitmq.Exchange(s), benchDest, true, false,
			amqp.Publishing{Headers: h, DeliveryMode: amqp.Persistent, Body: m.Body})
		if err != nil {
			return err
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("not confirmed: %v", err)
		}
		select {
		case r := <-returns:
			return fmt.Errorf("returned: %s", r.ReplyText)
		default:
			return nil
		}
	})
}
