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

// waitRecords polls the store until n records of d are leased.
func waitRecords(t *testing.T, s *jetstream.Store, d string, n int) []*broker.Record {
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

// TestMaxDeliverAdvisory: a source consumer with MaxDeliver 2 whose
// dead-letter writes fail twice. The source message is Nak'ed twice (never
// acked while it is not dead-lettered), the server gives up, and the
// advisory dead-letters it with attempts = 2 and the recorded class.
func TestMaxDeliverAdvisory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := testenv.NATS(t)
	_, js := connect(t, url)
	dlq, _ := newStore(t, nil)
	subject, cons := source(t, js, url, natsjs.ConsumerConfig{MaxDeliver: 2, AckWait: 2 * time.Second})

	pub := &flaky{n: 2, next: dlq}
	var mu sync.Mutex
	var seen []int
	h := func(_ context.Context, m *broker.Message) error {
		mu.Lock()
		seen = append(seen, m.DeliveryAttempt)
		mu.Unlock()
		return classify.WithStage(classify.SchemaViolation(errors.New("geometry member missing")), classify.StageParse)
	}
	c, err := jetstream.NewConsumer(ctx, js, cons, h, &jetstream.ConsumerOptions{
		Processor: broker.ProcessorOptions{Publisher: pub}, FetchWait: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	// Run gets a context without a deadline, as a service's
	// signal.NotifyContext is.
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done }()

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
	mu.Unlock()
	require.NoError(t, dlq.Ack(ctx, recs[0]))
}

// TestGivenUpWithoutRecordedFailure: the deliveries went to processes that
// crashed, so nothing was recorded: the advisory dead-letters the message
// as unknown to the retry destination, and DeleteGivenUp removes it from
// the source.
func TestGivenUpWithoutRecordedFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := testenv.NATS(t)
	_, js := connect(t, url)
	dlq, _ := newStore(t, nil)
	subject, cons := source(t, js, url, natsjs.ConsumerConfig{MaxDeliver: 2, AckWait: 300 * time.Millisecond})
	c, err := jetstream.NewConsumer(ctx, js, cons, func(context.Context, *broker.Message) error { return nil },
		&jetstream.ConsumerOptions{Processor: broker.ProcessorOptions{Publisher: dlq}, DeleteGivenUp: true})
	require.NoError(t, err)
	stop, err := c.WatchMaxDeliveries(ctx)
	require.NoError(t, err)
	defer stop()

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

// TestHandleAcksOnlyAfterDeadLetter: the source message is acknowledged
// when the dead-letter write was acknowledged, Nak'ed (and redelivered)
// when it failed; attempts start at the server's delivery count.
func TestHandleAcksOnlyAfterDeadLetter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := testenv.NATS(t)
	_, js := connect(t, url)
	dlq, _ := newStore(t, nil)
	subject, cons := source(t, js, url, natsjs.ConsumerConfig{AckWait: 5 * time.Second})
	pub := &flaky{n: 1, next: dlq}
	c, err := jetstream.NewConsumer(ctx, js, cons, func(context.Context, *broker.Message) error {
		return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
	}, &jetstream.ConsumerOptions{Processor: broker.ProcessorOptions{Publisher: pub}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, subject, []byte(`{"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`))
	require.NoError(t, err)

	next := func() natsjs.Msg {
		m, err := cons.Next(natsjs.FetchMaxWait(3 * time.Second))
		require.NoError(t, err)
		return m
	}
	out, err := c.Handle(ctx, next())
	require.ErrorIs(t, err, broker.ErrNotAcked, "the dead-letter write failed")
	require.False(t, out.Ack)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.AckFloor.Stream, "not acknowledged")

	out, err = c.Handle(ctx, next())
	require.NoError(t, err, "redelivered at once, dead-lettered")
	require.True(t, out.DeadLettered)
	require.Equal(t, 2, out.Attempts, "attempts start at NumDelivered")
	info, err = cons.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, info.AckFloor.Stream, "acknowledged once the write was")
	require.Zero(t, info.NumAckPending)
	recs := waitRecords(t, dlq, subject+".poison.dlt", 1)
	require.NoError(t, dlq.Ack(ctx, recs[0]))
}
