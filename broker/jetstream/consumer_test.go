package jetstream_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/jetstream"
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

// source makes a limits-retention source stream with one consumer.
func source(t *testing.T, js natsjs.JetStream, url string, cfg natsjs.ConsumerConfig) (subject string, cons natsjs.Consumer) {
	t.Helper()
	ctx := context.Background()
	name := uniqueName("SRC")
	subject = "geodlqtest." + name + ".parcels"
	_, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{subject}, Storage: natsjs.FileStorage})
	require.NoError(t, err)
	t.Cleanup(func() { deleteStream(t, url, name) })
	cfg.Durable = "pipeline"
	cfg.AckPolicy = natsjs.AckExplicitPolicy
	cons, err = js.CreateOrUpdateConsumer(ctx, name, cfg)
	require.NoError(t, err)
	return subject, cons
}

func processor(t *testing.T, pub broker.Publisher) *broker.Processor {
	t.Helper()
	p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: pub,
		Policy: classify.Policy{MaxAttempts: 2, BaseDelay: time.Millisecond}})
	require.NoError(t, err)
	return p
}

// run runs c with h until the test ends, on a context without a deadline
// (as a service's signal.NotifyContext is).
func run(t *testing.T, c *broker.Consumer, h broker.Handler) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, h) }()
	t.Cleanup(func() {
		stop()
		require.ErrorIs(t, <-done, context.Canceled)
		require.NoError(t, c.Close())
	})
}

// waitRecords polls the store until n records of d are leased.
func waitRecords(t *testing.T, s *broker.Store, d string, n int) []*broker.Record {
	t.Helper()
	var got []*broker.Record
	require.Eventually(t, func() bool {
		recs, err := s.Fetch(context.Background(), d, broker.Filter{}, 10)
		require.NoError(t, err)
		got = append(got, recs...)
		return len(got) >= n
	}, 60*time.Second, 50*time.Millisecond)
	require.Len(t, got, n)
	return got
}

// TestMaxDeliverAdvisory: a source consumer with max_deliver 2 whose
// dead-letter writes fail twice. The source message is Nak'ed twice (never
// acked while it is not dead-lettered), the server gives up, and the
// consumer dead-letters it from the advisory with attempts = 2 and the
// recorded class, stage and error.
func TestMaxDeliverAdvisory(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	_, js := connect(t, url)
	dlq, _ := newStore(t, nil)
	subject, cons := source(t, js, url, natsjs.ConsumerConfig{MaxDeliver: 2, AckWait: 5 * time.Second})

	pub := &flaky{n: 2, next: dlq}
	var mu sync.Mutex
	var seen []int
	var results []broker.Result
	c, err := jetstream.NewConsumer(ctx, js, cons, processor(t, pub), &jetstream.ConsumerOptions{FetchWait: 200 * time.Millisecond,
		ConsumerOptions: broker.ConsumerOptions{NackDelay: 10 * time.Millisecond, OnResult: func(_ *broker.Delivery, res broker.Result, _ error) {
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
		}}})
	require.NoError(t, err)
	run(t, c, func(_ context.Context, m *broker.Message) error {
		mu.Lock()
		seen = append(seen, m.DeliveryAttempt)
		mu.Unlock()
		return classify.WithStage(classify.SchemaViolation(errors.New("geometry member missing")), classify.StageParse)
	})

	payload := []byte(`{"event_id":"evt-md","geometry":null}`)
	_, err = js.Publish(ctx, subject, payload)
	require.NoError(t, err)

	d := subject + ".poison.dlt"
	recs := waitRecords(t, dlq, d, 1)
	env, err := envelope.Decode(recs[0].Message.Body)
	require.NoError(t, err)
	require.Equal(t, 2, env.Attempts, "attempts = max_deliver")
	require.Equal(t, classify.ClassSchemaViolation, env.FailureClass, "the class of the last recorded failure")
	require.Equal(t, classify.StageParse, env.FailedStage)
	require.Equal(t, "geometry member missing", env.ErrorMessage)
	require.Equal(t, "nats", env.Source.System)
	require.Equal(t, subject, env.Source.Topic)
	require.EqualValues(t, 1, *env.Source.Offset, "the stream sequence")
	require.Equal(t, 2, env.Source.DeliveryCount)
	restored, err := env.Restore(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, payload, restored)
	require.EqualValues(t, 3, pub.calls.Load(), "two failed writes, then the advisory's")
	mu.Lock()
	require.Equal(t, []int{1, 2}, seen, "the Processor starts its attempts at NumDelivered")
	require.Len(t, results, 2, "the user's OnResult sees every delivery")
	require.False(t, results[0].Ack)
	mu.Unlock()
	require.NoError(t, dlq.Ack(ctx, recs[0]))
}

// TestGivenUpWithoutRecordedFailure: the deliveries went to processes that
// crashed, so nothing was recorded: the consumer's watch (live from
// NewConsumer, before any Run) dead-letters the message as unknown to the
// retry destination, and DeleteGivenUp removes it from the source.
func TestGivenUpWithoutRecordedFailure(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	_, js := connect(t, url)
	dlq, _ := newStore(t, nil)
	subject, cons := source(t, js, url, natsjs.ConsumerConfig{MaxDeliver: 2, AckWait: 300 * time.Millisecond})
	c, err := jetstream.NewConsumer(ctx, js, cons, processor(t, dlq), &jetstream.ConsumerOptions{DeleteGivenUp: true})
	require.NoError(t, err)
	defer c.Close()

	payload := []byte(`{"event_id":"evt-crash","geometry":{"type":"Point","coordinates":[1,2]}}`)
	ack, err := js.Publish(ctx, subject, payload)
	require.NoError(t, err)
	// Two consumers take the message and crash (never ack).
	for i := range 2 {
		b, err := cons.Fetch(1, natsjs.FetchMaxWait(2*time.Second))
		require.NoError(t, err)
		n := 0
		for m := range b.Messages() {
			md, err := m.Metadata()
			require.NoError(t, err)
			require.EqualValues(t, i+1, md.NumDelivered)
			n++
		}
		require.Equal(t, 1, n)
		time.Sleep(400 * time.Millisecond)
	}
	// The next pull makes the server notice the limit.
	b, err := cons.Fetch(1, natsjs.FetchMaxWait(300*time.Millisecond))
	require.NoError(t, err)
	for range b.Messages() {
		t.Fatal("the server delivered past max_deliver")
	}

	recs := waitRecords(t, dlq, subject+".retry.dlt", 1)
	env, err := envelope.Decode(recs[0].Message.Body)
	require.NoError(t, err)
	require.Equal(t, 2, env.Attempts)
	require.Equal(t, classify.ClassUnknown, env.FailureClass)
	require.Equal(t, classify.RouteRetry, env.Route)
	require.Contains(t, env.ErrorMessage, "max_deliver")
	require.Equal(t, "evt-crash", env.EventID)
	require.NoError(t, dlq.Ack(ctx, recs[0]))

	st, err := js.Stream(ctx, cons.CachedInfo().Stream)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := st.GetMsg(ctx, ack.Sequence)
		return errors.Is(err, natsjs.ErrMsgNotFound)
	}, 60*time.Second, 20*time.Millisecond, "DeleteGivenUp removed it from the source")
}

// TestAckOnlyAfterDeadLetter: the source message is acknowledged when the
// dead-letter write was acknowledged, Nak'ed (and redelivered) when it
// failed; attempts start at the server's delivery count.
func TestAckOnlyAfterDeadLetter(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	_, js := connect(t, url)
	dlq, _ := newStore(t, nil)
	subject, cons := source(t, js, url, natsjs.ConsumerConfig{AckWait: 30 * time.Second})
	pub := &flaky{n: 1, next: dlq}
	type seenResult struct {
		res   broker.Result
		floor uint64
	}
	results := make(chan seenResult, 4)
	c, err := jetstream.NewConsumer(ctx, js, cons, processor(t, pub), &jetstream.ConsumerOptions{FetchWait: 200 * time.Millisecond,
		ConsumerOptions: broker.ConsumerOptions{NackDelay: 300 * time.Millisecond, OnResult: func(_ *broker.Delivery, res broker.Result, _ error) {
			info, err := cons.Info(ctx)
			require.NoError(t, err)
			results <- seenResult{res, info.AckFloor.Stream}
		}}})
	require.NoError(t, err)
	run(t, c, func(context.Context, *broker.Message) error {
		return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
	})
	_, err = js.Publish(ctx, subject, []byte(`{"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`))
	require.NoError(t, err)

	first := <-results
	require.False(t, first.res.Ack, "the dead-letter write failed")
	require.Zero(t, first.floor, "not acknowledged")
	second := <-results
	require.True(t, second.res.DeadLettered, "redelivered after NackDelay, dead-lettered")
	require.Equal(t, 2, second.res.Attempts, "attempts start at NumDelivered")
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.AckFloor.Stream == 1 && info.NumAckPending == 0
	}, 60*time.Second, 20*time.Millisecond, "acknowledged once the write was")
	recs := waitRecords(t, dlq, subject+".poison.dlt", 1)
	require.NoError(t, dlq.Ack(ctx, recs[0]))
}

// TestProgressKeepsTheMessage: a handler that runs longer than the ack
// wait keeps its message, reported in progress (the consumer's Extender),
// and it is processed once.
func TestProgressKeepsTheMessage(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	_, js := connect(t, url)
	subject, cons := source(t, js, url, natsjs.ConsumerConfig{AckWait: time.Second})
	dlq, _ := newStore(t, nil)
	c, err := jetstream.NewConsumer(ctx, js, cons, processor(t, dlq), &jetstream.ConsumerOptions{FetchWait: 200 * time.Millisecond,
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 2}})
	require.NoError(t, err)
	var calls, done atomic.Int32
	run(t, c, func(ctx context.Context, m *broker.Message) error {
		calls.Add(1)
		select {
		case <-time.After(2500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		done.Add(1)
		return nil
	})
	_, err = js.Publish(ctx, subject, []byte(`{"event_id":"evt-slow"}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return done.Load() == 1 }, 60*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.AckFloor.Stream == 1
	}, 60*time.Second, 20*time.Millisecond)
	time.Sleep(1500 * time.Millisecond)
	require.EqualValues(t, 1, calls.Load(), "not redelivered while in progress")
}

// TestShutdownGivesThePullBack: a consumer stopped while its pull waits
// gives back what the pull brings afterwards at once, instead of leaving
// it to its ack wait (30s here).
func TestShutdownGivesThePullBack(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	_, js := connect(t, url)
	subject, cons := source(t, js, url, natsjs.ConsumerConfig{AckWait: 30 * time.Second})
	dlq, _ := newStore(t, nil)
	proc := processor(t, dlq)
	c, err := jetstream.NewConsumer(ctx, js, cons, proc, &jetstream.ConsumerOptions{FetchWait: 3 * time.Second})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Run(rctx, func(context.Context, *broker.Message) error {
			t.Error("the stopped consumer processed a message")
			return nil
		})
	}()
	time.Sleep(500 * time.Millisecond) // the pull is waiting on the server
	stop()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return at once when its context ended during a pull")
	}
	// The server still holds the pull request: this message goes to it.
	start := time.Now()
	_, err = js.Publish(ctx, subject, []byte(`{"event_id":"evt-late"}`))
	require.NoError(t, err)
	require.NoError(t, c.Close(), "Close waits for the pull to be given back")

	c2, err := jetstream.NewConsumer(ctx, js, cons, proc, &jetstream.ConsumerOptions{FetchWait: 200 * time.Millisecond})
	require.NoError(t, err)
	got := make(chan int, 1)
	run(t, c2, func(_ context.Context, m *broker.Message) error {
		got <- m.DeliveryAttempt
		return nil
	})
	select {
	case n := <-got:
		require.Less(t, time.Since(start), 20*time.Second, "given back, not left to the 30s ack wait")
		require.Equal(t, 2, n, "the dead pull's delivery counts")
	case <-time.After(25 * time.Second):
		t.Fatal("the message was not given back")
	}
}

func TestNewConsumerArguments(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	_, js := connect(t, url)
	dlq, _ := newStore(t, nil)
	proc := processor(t, dlq)
	_, cons := source(t, js, url, natsjs.ConsumerConfig{})
	tests := []struct {
		name string
		js   natsjs.JetStream
		cons natsjs.Consumer
		proc *broker.Processor
		opts *jetstream.ConsumerOptions
	}{
		{"nil JetStream", nil, cons, proc, nil},
		{"nil consumer", js, nil, proc, nil},
		{"nil processor", js, cons, nil, nil},
		{"negative batch", js, cons, proc, &jetstream.ConsumerOptions{ConsumerOptions: broker.ConsumerOptions{MaxBatch: -1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jetstream.NewConsumer(ctx, tc.js, tc.cons, tc.proc, tc.opts)
			require.ErrorIs(t, err, broker.ErrInvalidArgument)
		})
	}
	t.Run("acks must be explicit", func(t *testing.T) {
		st, err := js.Stream(ctx, cons.CachedInfo().Stream)
		require.NoError(t, err)
		none, err := st.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{Durable: "noack", AckPolicy: natsjs.AckNonePolicy})
		require.NoError(t, err)
		_, err = jetstream.NewConsumer(ctx, js, none, proc, nil)
		require.ErrorIs(t, err, broker.ErrInvalidArgument)
		require.ErrorContains(t, err, "explicit acks")
	})
}
