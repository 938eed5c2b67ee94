package servicebus_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/servicebus"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/offload"
)

const bowtie = `{"event_id":"evt-bowtie","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}}`

func poison(context.Context, *broker.Message) error {
	return classify.WithStage(classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")), classify.StageTopologyValidation)
}

func send(t *testing.T, ns *fakeNamespace, queue, body string) {
	t.Helper()
	s, _ := ns.connector().Sender(queue)
	require.NoError(t, s.SendMessage(context.Background(), &azservicebus.Message{Body: []byte(body), ApplicationProperties: map[string]any{"idempotency-key": "idem:v1:" + queue}}, nil))
}

// gatedReceiver lets one ReceiveMessages through per poll, so that a test
// sees exactly one delivery per poll (an abandoned message is available
// again at once, and Run would receive it again).
type gatedReceiver struct {
	servicebus.Receiver
	gate chan struct{}
}

func (g *gatedReceiver) ReceiveMessages(ctx context.Context, n int, o *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Receiver.ReceiveMessages(ctx, n, o)
}

// polled is a consumer that tests drive one receive at a time.
type polled struct {
	c    *broker.Consumer
	gate chan struct{}
	mu   sync.Mutex
	errs []error
}

func newPolled(t *testing.T, ns *fakeNamespace, queue string, p *broker.Processor, o *servicebus.ConsumerOptions) *polled {
	t.Helper()
	recv, _ := ns.connector().Receiver(queue, false)
	pc := &polled{gate: make(chan struct{}, 1)}
	var opts servicebus.ConsumerOptions
	if o != nil {
		opts = *o
	}
	opts.OnResult = func(_ *broker.Delivery, _ broker.Result, err error) {
		pc.mu.Lock()
		pc.errs = append(pc.errs, err)
		pc.mu.Unlock()
	}
	c, err := servicebus.NewConsumer(context.Background(), &gatedReceiver{Receiver: recv, gate: pc.gate}, queue, p, &opts)
	require.NoError(t, err)
	pc.c = c
	return pc
}

// poll lets one receive through, runs the consumer until it processed
// the message, and returns the Processor's error.
func (p *polled) poll(t *testing.T, h broker.Handler) error {
	t.Helper()
	p.mu.Lock()
	before := len(p.errs)
	p.mu.Unlock()
	p.gate <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.c.Run(ctx, h) }()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.errs) > before
	}, 30*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errs[len(p.errs)-1]
}

func consumer(t *testing.T, ns *fakeNamespace, queue string, pub broker.Publisher, o *servicebus.ConsumerOptions) *polled {
	t.Helper()
	p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: pub,
		Destination: func(*broker.Message, classify.Route) string { return "vector-dlq" },
		Sleep:       func(context.Context, time.Duration) error { return nil }})
	require.NoError(t, err)
	return newPolled(t, ns, queue, p, o)
}

func newStore(t *testing.T, ns *fakeNamespace) *broker.Store {
	t.Helper()
	s, err := servicebus.NewWithConnector(ns.connector(), &servicebus.Options{ReceiveWait: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func drain(t *testing.T, s *broker.Store, dest string) []*broker.Record {
	t.Helper()
	var all []*broker.Record
	for {
		recs, err := s.Fetch(context.Background(), dest, broker.Filter{}, 100)
		require.NoError(t, err)
		if len(recs) == 0 {
			return all
		}
		all = append(all, recs...)
	}
}

// TestDeadLetterIntoSubQueue: the consumer dead-letters a bowtie with
// DeadLetterMessage — class and stage as DeadLetterReason, the error as
// DeadLetterErrorDescription, the envelope in application properties, the
// body untouched — and the store replays it from $DeadLetterQueue.
func TestDeadLetterIntoSubQueue(t *testing.T) {
	ns := newNamespace(fakeConfig{maxDeliveryCount: 4})
	send(t, ns, "vector-jobs", bowtie)
	dl, err := servicebus.NewDeadLetterer(nil)
	require.NoError(t, err)
	c := consumer(t, ns, "vector-jobs", dl, &servicebus.ConsumerOptions{DeadLetterer: dl})
	require.NoError(t, c.poll(t, poison))
	active, dead := ns.counts("vector-jobs")
	require.Equal(t, [2]int{0, 1}, [2]int{active, dead})

	raw, _ := ns.connector().Receiver("vector-jobs", true)
	msgs, err := raw.ReceiveMessages(context.Background(), 1, nil)
	require.NoError(t, err)
	require.Equal(t, "invalid_geometry/topology_validation", *msgs[0].DeadLetterReason)
	require.Equal(t, "Self-intersection[0.5 0.5]", *msgs[0].DeadLetterErrorDescription)
	require.Equal(t, bowtie, string(msgs[0].Body), "the body stays the original payload")
	require.Equal(t, "poison", msgs[0].ApplicationProperties[broker.HeaderRoute])
	require.NoError(t, raw.AbandonMessage(context.Background(), msgs[0], nil))

	s := newStore(t, ns)
	recs := drain(t, s, servicebus.DeadLetterQueue("vector-jobs"))
	require.Len(t, recs, 1)
	env := recs[0].Envelope
	require.NotNil(t, env, "the envelope comes from the geodlq-envelope property")
	require.Equal(t, classify.ClassInvalidGeometry, env.FailureClass)
	require.Equal(t, "servicebus", env.Source.System)
	require.Equal(t, "vector-jobs", env.Source.Topic)
	require.Equal(t, 1, env.Source.DeliveryCount)
	restored, err := env.Restore(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, bowtie, string(restored))
	require.NoError(t, s.Ack(context.Background(), recs[0]))
	_, dead = ns.counts("vector-jobs")
	require.Zero(t, dead)
	require.Error(t, s.Publish(context.Background(), servicebus.DeadLetterQueue("vector-jobs"), &broker.Message{Body: []byte("x")}), "nothing is sent into a sub-queue")
	require.Error(t, dl.Publish(context.Background(), "x", &broker.Message{Body: []byte("x")}), "the DeadLetterer dead-letters only envelopes")
	require.ErrorContains(t, dl.Publish(context.Background(), "x", recs[0].Message), "not in flight", "nor a message no consumer has in flight")
}

// TestAbandonWhenDeadLetterFails: when the dead-letter write fails, the
// message is abandoned, never completed; attempts follow DeliveryCount, and
// after MaxDeliveryCount Service Bus dead-letters it itself.
func TestAbandonWhenDeadLetterFails(t *testing.T) {
	ns := newNamespace(fakeConfig{maxDeliveryCount: 3})
	send(t, ns, "jobs", bowtie)
	var calls atomic.Int32
	failing := publisherFunc(func(context.Context, string, *broker.Message) error {
		calls.Add(1)
		return errors.New("servicebus: send: (connlost): amqp: connection closed")
	})
	c := consumer(t, ns, "jobs", failing, nil)
	var attempts []int
	for range 3 {
		err := c.poll(t, func(ctx context.Context, m *broker.Message) error {
			attempts = append(attempts, m.DeliveryAttempt)
			return poison(ctx, m)
		})
		require.ErrorIs(t, err, broker.ErrNotAcked)
	}
	require.Equal(t, []int{1, 2, 3}, attempts, "DeliveryAttempt is DeliveryCount")
	require.Equal(t, int32(3), calls.Load())
	active, dead := ns.counts("jobs")
	require.Equal(t, [2]int{0, 1}, [2]int{active, dead}, "Service Bus dead-lettered it after MaxDeliveryCount: nothing lost")
	recs := drain(t, newStore(t, ns), servicebus.DeadLetterQueue("jobs"))
	require.Len(t, recs, 1)
	require.Nil(t, recs[0].Envelope, "dead-lettered by Service Bus, not geodlq: no envelope")
	require.Equal(t, bowtie, string(recs[0].Message.Body))
}

type publisherFunc func(context.Context, string, *broker.Message) error

func (f publisherFunc) Publish(ctx context.Context, d string, m *broker.Message) error {
	return f(ctx, d, m)
}

// TestCompleteAfterStoreWrite: with the store as publisher the envelope
// goes to a separate queue, and only then is the source completed.
func TestCompleteAfterStoreWrite(t *testing.T) {
	ns := newNamespace(fakeConfig{})
	send(t, ns, "jobs", bowtie)
	s := newStore(t, ns)
	var order []string
	pub := publisherFunc(func(ctx context.Context, d string, m *broker.Message) error {
		err := s.Publish(ctx, d, m)
		if err == nil {
			active, _ := ns.counts("jobs")
			order = append(order, "sent", map[bool]string{true: "source still there", false: "source gone"}[active == 1])
		}
		return err
	})
	c := consumer(t, ns, "jobs", pub, nil)
	require.NoError(t, c.poll(t, poison))
	require.Equal(t, []string{"sent", "source still there"}, order)
	active, dead := ns.counts("jobs")
	require.Equal(t, [2]int{0, 0}, [2]int{active, dead})
	recs := drain(t, s, "vector-dlq")
	require.Len(t, recs, 1)
	require.Equal(t, "invalid_geometry", recs[0].Message.Header(broker.HeaderClass))
	require.NoError(t, s.Ack(context.Background(), recs[0]))
}

// TestLockRenewal: a spatial operation longer than the lock keeps it.
func TestLockRenewal(t *testing.T) {
	ns := newNamespace(fakeConfig{lock: 200 * time.Millisecond})
	send(t, ns, "jobs", bowtie)
	c := consumer(t, ns, "jobs", publisherFunc(func(context.Context, string, *broker.Message) error { return nil }),
		&servicebus.ConsumerOptions{ExtendEvery: 50 * time.Millisecond})
	other, _ := ns.connector().Receiver("jobs", false)
	stolen := 0
	err := c.poll(t, func(ctx context.Context, m *broker.Message) error {
		for end := time.Now().Add(700 * time.Millisecond); time.Now().Before(end); {
			rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			msgs, _ := other.ReceiveMessages(rctx, 1, nil)
			cancel()
			stolen += len(msgs)
		}
		return nil
	})
	require.NoError(t, err)
	require.Zero(t, stolen)
	active, _ := ns.counts("jobs")
	require.Zero(t, active)
}

// TestDeadLettererSizeLimit: the envelope shares the dead-lettered message
// with the original body; what cannot fit is refused, never truncated, and
// the message is abandoned for redelivery.
func TestDeadLettererSizeLimit(t *testing.T) {
	dl, err := servicebus.NewDeadLetterer(nil)
	require.NoError(t, err)
	require.Equal(t, (256<<10-8<<10)/2, dl.MaxMessageBytes("x"))
	off, err := offload.New(offload.NewMemStore(), nil)
	require.NoError(t, err)
	withOffload, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		pad     int
		builder *envelope.Builder
		wantErr error
	}{
		{"no offloader: the envelope cannot be built small enough", 200 << 10, nil, broker.ErrNotAcked},
		{"body and envelope exceed 256 KiB", 255 << 10, withOffload, classify.ErrTooLarge},
		{"payload offloaded, envelope fits beside the body", 200 << 10, withOffload, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(fakeConfig{maxDeliveryCount: 5})
			body := `{"geometry":null,"pad":"` + strings.Repeat("x", tc.pad) + `"}`
			send(t, ns, "big", body)
			p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: dl, Builder: tc.builder})
			require.NoError(t, err)
			err = newPolled(t, ns, "big", p, &servicebus.ConsumerOptions{DeadLetterer: dl}).poll(t, poison)
			active, dead := ns.counts("big")
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.ErrorIs(t, err, broker.ErrNotAcked)
				require.Equal(t, [2]int{1, 0}, [2]int{active, dead}, "abandoned for redelivery")
				return
			}
			require.NoError(t, err)
			require.Equal(t, [2]int{0, 1}, [2]int{active, dead})
			recs := drain(t, newStore(t, ns), servicebus.DeadLetterQueue("big"))
			require.Len(t, recs, 1)
			restored, err := recs[0].Envelope.Restore(context.Background(), off)
			require.NoError(t, err)
			require.Equal(t, body, string(restored))
		})
	}
}

// TestLargeMultiPolygon: the 40 MB multipolygon through the Processor, the
// envelope builder and an offloader fits 256 KiB.
func TestLargeMultiPolygon(t *testing.T) {
	ns := newNamespace(fakeConfig{})
	s := newStore(t, ns)
	off, err := offload.New(offload.NewMemStore(), nil)
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: s, Builder: b,
		Destination: func(*broker.Message, classify.Route) string { return "large-dlq" }})
	require.NoError(t, err)
	payload := corpus.LargeEvent(40 << 20)
	out, err := p.Process(context.Background(), &broker.Message{Body: payload}, func(context.Context, *broker.Message) error {
		return &classify.Error{Class: classify.ClassResourceExhausted, Stage: classify.StageParse, Err: errors.New("too many vertices")}
	})
	require.NoError(t, err)
	require.True(t, out.DeadLettered)
	recs := drain(t, s, "large-dlq")
	require.Len(t, recs, 1)
	require.LessOrEqual(t, len(recs[0].Message.Body), s.MaxMessageBytes(""))
	restored, err := recs[0].Envelope.Restore(context.Background(), off)
	require.NoError(t, err)
	require.Equal(t, sha256.Sum256(payload), sha256.Sum256(restored))

	premium, err := servicebus.NewWithConnector(ns.connector(), &servicebus.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: 1 << 20}})
	require.NoError(t, err)
	require.Equal(t, 1<<20-8<<10, premium.MaxMessageBytes(""), "configurable for Premium")
}

func TestQueueSettings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     servicebus.QueueConfig
		wantN   int32
		wantL   time.Duration
		warn    string
		invalid bool
	}{
		{"defaults", servicebus.QueueConfig{}, 4, time.Minute, "", false},
		{"seed", servicebus.QueueConfig{MaxDeliveryCount: 4, LongestOperation: 12 * time.Second}, 4, 72 * time.Second, "", false},
		{"1 warns", servicebus.QueueConfig{MaxDeliveryCount: 1}, 1, time.Minute, "below", false},
		{"10 warns", servicebus.QueueConfig{MaxDeliveryCount: 10}, 10, time.Minute, "above", false},
		{"short operation", servicebus.QueueConfig{LongestOperation: 100 * time.Millisecond}, 4, 5 * time.Second, "", false},
		{"long operation", servicebus.QueueConfig{LongestOperation: time.Minute}, 4, 5 * time.Minute, "lock renewal", false},
		{"zero refused", servicebus.QueueConfig{MaxDeliveryCount: -1}, 0, 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			tc.cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			s, err := tc.cfg.Settings()
			if tc.invalid {
				var e *servicebus.MaxDeliveryCountError
				require.ErrorAs(t, err, &e)
				require.ErrorIs(t, err, servicebus.ErrInvalidSettings)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantN, s.MaxDeliveryCount)
			require.Equal(t, tc.wantL, s.LockDuration)
			if tc.warn == "" {
				require.Empty(t, s.Warnings)
			} else {
				require.Contains(t, strings.Join(s.Warnings, "\n"), tc.warn)
				require.Contains(t, logs.String(), "level=WARN")
			}
			p := s.Properties()
			require.Equal(t, tc.wantN, *p.MaxDeliveryCount)
			require.True(t, *p.DeadLetteringOnMessageExpiration)
		})
	}
	for d, want := range map[time.Duration]string{0: "PT0S", 5 * time.Second: "PT5S", time.Minute: "PT1M", 72 * time.Second: "PT1M12S", 5 * time.Minute: "PT5M", 90 * time.Minute: "PT1H30M"} {
		require.Equal(t, want, servicebus.ISO8601(d))
	}
}

func TestLockLostIsLeaseLost(t *testing.T) {
	ns := newNamespace(fakeConfig{lock: 100 * time.Millisecond})
	s := newStore(t, ns)
	require.NoError(t, s.Publish(context.Background(), "q", &broker.Message{Body: []byte("x"), Key: []byte{1, 2}}))
	recs := drain(t, s, "q")
	require.Len(t, recs, 1)
	require.Equal(t, []byte{1, 2}, recs[0].Message.Key)
	time.Sleep(150 * time.Millisecond)
	err := s.Ack(context.Background(), recs[0])
	require.ErrorIs(t, err, broker.ErrLeaseLost, "Service Bus reports the lost lock")
	require.True(t, servicebus.IsLockLost(err))
	require.ErrorIs(t, s.Ack(context.Background(), recs[0]), broker.ErrLeaseLost, "a record is settled once")
	again := drain(t, s, "q")
	require.Len(t, again, 1)
	require.Equal(t, 2, again[0].Deliveries)
	require.NoError(t, s.Ack(context.Background(), again[0]))
}
