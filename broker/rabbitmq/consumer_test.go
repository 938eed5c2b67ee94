package rabbitmq_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/rabbitmq"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/testenv"
)

// flaky fails its first n publishes, then delegates.
type flaky struct {
	n     int32
	calls atomic.Int32
	next  broker.Publisher
}

func (f *flaky) Publish(ctx context.Context, d string, m *broker.Message) error {
	if f.calls.Add(1) <= f.n {
		return errors.New("dead-letter store unavailable")
	}
	return f.next.Publish(ctx, d, m)
}

func processor(t *testing.T, pub broker.Publisher) *broker.Processor {
	t.Helper()
	p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: pub,
		Policy: classify.Policy{MaxAttempts: 2, BaseDelay: time.Millisecond}})
	require.NoError(t, err)
	return p
}

// sourceQueue declares a durable classic queue deleted when the test ends.
func sourceQueue(t *testing.T, url string, conn *amqp.Connection) (string, *amqp.Channel) {
	t.Helper()
	q := uniqueName("geodlqtest") + ".parcels"
	t.Cleanup(func() { cleanup(t, url, "", q) })
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(q, true, false, false, false, nil)
	require.NoError(t, err)
	return q, ch
}

func ready(t *testing.T, ch *amqp.Channel, q string) int {
	t.Helper()
	info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	require.NoError(t, err)
	return info.Messages
}

// TestConsumerConfirmBeforeAck: the source delivery is acknowledged only
// after the dead-letter publish was confirmed; when the write fails the
// delivery is requeued and comes back.
func TestConsumerConfirmBeforeAck(t *testing.T) {
	url := testenv.AMQP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := dial(t, url)
	srcQ, ch := sourceQueue(t, url, conn)
	dest := srcQ + ".poison.dlt"
	dlq := newStore(t, conn, rabbitmq.Options{}, dest)
	payload := []byte(`{"event_id":"evt-bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`)
	require.NoError(t, ch.PublishWithContext(ctx, "", srcQ, false, false, amqp.Publishing{Body: payload, MessageId: "src-1", DeliveryMode: amqp.Persistent}))

	pub := &flaky{n: 1, next: dlq}
	var mu sync.Mutex
	var attempts []int
	var results []broker.Result
	cch, err := conn.Channel()
	require.NoError(t, err)
	c, err := rabbitmq.NewConsumer(cch, srcQ, processor(t, pub), &rabbitmq.ConsumerOptions{
		ConsumerOptions: broker.ConsumerOptions{OnResult: func(_ *broker.Delivery, res broker.Result, _ error) {
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
		}}})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Run(runCtx, func(_ context.Context, m *broker.Message) error {
			mu.Lock()
			attempts = append(attempts, m.DeliveryAttempt)
			mu.Unlock()
			return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
		})
	}()

	var recs []*broker.Record
	require.Eventually(t, func() bool {
		recs = append(recs, fetchAll(t, dlq, dest)...)
		return len(recs) == 1
	}, 60*time.Second, 20*time.Millisecond)
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, c.Close())
	require.Zero(t, ready(t, ch, srcQ), "acknowledged once the dead-letter write was confirmed: nothing requeued")
	require.NoError(t, cch.Close())
	require.Zero(t, ready(t, ch, srcQ), "nor left unacknowledged on the channel")

	require.EqualValues(t, 2, pub.calls.Load(), "the failed write, then the confirmed one")
	mu.Lock()
	require.Equal(t, []int{1, 2}, attempts, "requeued, the message came back (redelivered)")
	require.Len(t, results, 2, "the user's OnResult sees every delivery")
	mu.Unlock()

	env, err := envelope.Decode(recs[0].Message.Body)
	require.NoError(t, err)
	require.Equal(t, classify.ClassInvalidGeometry, env.FailureClass)
	require.Equal(t, 2, env.Attempts)
	require.Equal(t, "rabbitmq", env.Source.System)
	require.Equal(t, srcQ, env.Source.Topic)
	require.Equal(t, "src-1", env.Source.MessageID)
	restored, err := env.Restore(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, payload, restored)
	require.NoError(t, dlq.Ack(ctx, recs[0]))
}

// TestConsumerRejectsToBrokerDLX: with RejectOnFailure, a message whose
// dead-letter write fails goes to the source queue's own dead-letter
// exchange, where x-death records it; a delivery the consumer gives back
// because it is shutting down is requeued instead.
func TestConsumerRejectsToBrokerDLX(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	conn := dial(t, url)
	name := uniqueName("geodlqtest")
	src, dlx, park := name+".src", name+".dlx", name+".parking"
	t.Cleanup(func() { cleanup(t, url, dlx, src, park) })
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = rabbitmq.DeclareSourceQueue(ctx, ch, src, &rabbitmq.SourceQueueOptions{DeadLetterExchange: dlx, ParkingQueue: park})
	require.NoError(t, err)
	require.NoError(t, ch.PublishWithContext(ctx, "", src, false, false, amqp.Publishing{Body: []byte("payload"), MessageId: "m-1", DeliveryMode: amqp.Persistent}))

	cch, err := conn.Channel()
	require.NoError(t, err)
	defer cch.Close()
	c, err := rabbitmq.NewConsumer(cch, src, processor(t, &flaky{n: 1 << 30}), &rabbitmq.ConsumerOptions{RejectOnFailure: true})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Run(runCtx, func(context.Context, *broker.Message) error {
			return classify.SchemaViolation(errors.New("not GeoJSON"))
		})
	}()
	var parked amqp.Delivery
	require.Eventually(t, func() bool {
		var ok bool
		parked, ok, err = ch.Get(park, true)
		require.NoError(t, err)
		return ok
	}, 60*time.Second, 20*time.Millisecond)
	deaths, err := rabbitmq.ParseXDeath(parked.Headers)
	require.NoError(t, err)
	require.Equal(t, src, deaths[0].Queue)
	require.Equal(t, rabbitmq.ReasonRejected, deaths[0].Reason)

	// A handler interrupted by the shutdown: requeued, not parked.
	started := make(chan struct{})
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	runCtx, stop = context.WithCancel(ctx)
	go func() {
		done <- c.Run(runCtx, func(ctx context.Context, _ *broker.Message) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	require.NoError(t, ch.PublishWithContext(ctx, "", src, false, false, amqp.Publishing{Body: []byte("second"), DeliveryMode: amqp.Persistent}))
	<-started
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool { return ready(t, ch, src) == 1 }, 10*time.Second, 20*time.Millisecond, "requeued to the source")
	require.Zero(t, ready(t, ch, park), "not rejected to the dead-letter exchange")
}

// TestShutdownRequeuesPushed: with a prefetch of 20 and a slow handler,
// the broker has pushed deliveries the consumer has not processed when
// Run's context ends; they are requeued at once, while the channel stays
// open, and a second consumer processes everything exactly once.
func TestShutdownRequeuesPushed(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	conn := dial(t, url)
	q, ch := sourceQueue(t, url, conn)
	const n = 30
	for i := range n {
		require.NoError(t, ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte(strconv.Itoa(i)), DeliveryMode: amqp.Persistent}))
	}
	dlq := newStore(t, conn, rabbitmq.Options{})
	proc := processor(t, dlq)
	var mu sync.Mutex
	seen := map[string]int{}
	handle := func(ctx context.Context, m *broker.Message) error {
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		seen[string(m.Body)]++
		mu.Unlock()
		return nil
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	cch, err := conn.Channel()
	require.NoError(t, err)
	defer cch.Close()
	c, err := rabbitmq.NewConsumer(cch, q, proc, &rabbitmq.ConsumerOptions{Prefetch: 20})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx, handle) }()
	require.Eventually(t, func() bool { return count() >= 3 }, 60*time.Second, 5*time.Millisecond)
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, c.Close())
	// The requeues are sent before Close returns; the broker counts them
	// back into the queue as it processes them, so the count may lag a
	// moment behind (seen: 23 of 27 at once under a loaded run).
	want := n - count()
	require.Eventually(t, func() bool { return ready(t, ch, q) == want }, 10*time.Second, 20*time.Millisecond,
		"everything not processed is back in the queue, the channel still open: want %d ready", want)

	cch2, err := conn.Channel()
	require.NoError(t, err)
	defer cch2.Close()
	c2, err := rabbitmq.NewConsumer(cch2, q, proc, &rabbitmq.ConsumerOptions{ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}})
	require.NoError(t, err)
	runCtx, stop = context.WithCancel(ctx)
	go func() { done <- c2.Run(runCtx, handle) }()
	require.Eventually(t, func() bool { return count() == n }, 60*time.Second, 10*time.Millisecond)
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, c2.Close())
	mu.Lock()
	defer mu.Unlock()
	for body, k := range seen {
		require.Equal(t, 1, k, "message %s processed once", body)
	}
}

// TestShutdownNeverDeadlocks is the hazard of commit 65ff09a: a consumer
// stopped while the broker keeps pushing, then closed, then its channel
// closed, many times over. Every step must return.
func TestShutdownNeverDeadlocks(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	conn := dial(t, url)
	q, ch := sourceQueue(t, url, conn)
	proc := processor(t, newStore(t, conn, rabbitmq.Options{}))
	stopFeed := make(chan struct{})
	var feed sync.WaitGroup
	feed.Go(func() {
		pch, err := conn.Channel()
		if err != nil {
			t.Error(err)
			return
		}
		defer pch.Close()
		for i := 0; ; i++ {
			select {
			case <-stopFeed:
				return
			default:
			}
			if err := pch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte(strconv.Itoa(i))}); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	defer func() { close(stopFeed); feed.Wait() }()
	for i := range 20 {
		cch, err := conn.Channel()
		require.NoError(t, err)
		c, err := rabbitmq.NewConsumer(cch, q, proc, &rabbitmq.ConsumerOptions{Prefetch: 50,
			ConsumerOptions: broker.ConsumerOptions{Concurrency: 2, MaxBatch: 10}})
		require.NoError(t, err)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- c.Run(runCtx, func(context.Context, *broker.Message) error { return nil })
		}()
		time.Sleep(time.Duration(i%5) * 10 * time.Millisecond)
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			stop()
			<-done
			_ = c.Close()
			_ = cch.Close()
		}()
		select {
		case <-finished:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: stopping, closing the consumer and its channel did not return", i)
		}
	}
	require.False(t, ch.IsClosed())
}

func TestNewConsumerArguments(t *testing.T) {
	url := testenv.AMQP(t)
	conn := dial(t, url)
	ch, err := conn.Channel()
	require.NoError(t, err)
	proc := processor(t, newStore(t, conn, rabbitmq.Options{}))
	tests := []struct {
		name  string
		ch    *amqp.Channel
		queue string
		proc  *broker.Processor
		opts  *rabbitmq.ConsumerOptions
	}{
		{"nil channel", nil, "q", proc, nil},
		{"no queue", ch, "", proc, nil},
		{"nil processor", ch, "q", nil, nil},
		{"negative prefetch", ch, "q", proc, &rabbitmq.ConsumerOptions{Prefetch: -1}},
		{"negative batch", ch, "q", proc, &rabbitmq.ConsumerOptions{ConsumerOptions: broker.ConsumerOptions{MaxBatch: -1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rabbitmq.NewConsumer(tc.ch, tc.queue, tc.proc, tc.opts)
			require.ErrorIs(t, err, broker.ErrInvalidArgument)
		})
	}
	t.Run("a missing queue stops Run", func(t *testing.T) {
		c, err := rabbitmq.NewConsumer(ch, uniqueName("geodlqtest.missing"), proc, nil)
		require.NoError(t, err)
		err = c.Run(context.Background(), func(context.Context, *broker.Message) error { return nil })
		require.ErrorIs(t, err, broker.ErrClosed, "the channel is closed by the broker's NOT_FOUND")
		require.ErrorContains(t, err, "NOT_FOUND")
	})
}
