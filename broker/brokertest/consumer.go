package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
)

// ConsumerHarness gives the consumer suite access to one adapter's source:
// a queue, subscription or topic it can send to and consume from. A
// harness is made for a single test, so its source starts empty.
type ConsumerHarness interface {
	// Send puts msgs on the source, as a producer would: body, key (the
	// ordering key, where the broker has one) and headers.
	Send(ctx context.Context, msgs []*broker.Message) error
	// MakeConsumer returns a consumer of the source that processes with
	// proc, made by the adapter's NewConsumer. The suite makes several:
	// a consumer whose Run ended is one that crashed or shut down.
	MakeConsumer(ctx context.Context, proc *broker.Processor) (*broker.Consumer, error)
	// ConsumerCapabilities declares what the source does.
	ConsumerCapabilities() ConsumerCapabilities
	// Close releases everything the harness made.
	Close()
}

// ConsumerCapabilities declares what an adapter's source does.
type ConsumerCapabilities struct {
	// Ordered: deliveries with the same message key come in send order
	// (an SQS FIFO group, a Kafka partition, a Pub/Sub ordering key).
	Ordered bool
	// DeliveryCount: Message.DeliveryAttempt counts the broker's
	// deliveries of a message.
	DeliveryCount bool
	// Redelivery is the longest a message given back (or never settled)
	// takes to be delivered again: the suite waits up to a few times it.
	Redelivery time.Duration
	// Unsupported maps a capability name to the reason the adapter lacks
	// it (none are defined for consumers yet; reserved).
	Unsupported map[string]string
}

// ConsumerHarnessMaker makes a fresh consumer harness for one test.
type ConsumerHarnessMaker func(ctx context.Context, t *testing.T) (ConsumerHarness, error)

// RunConsumerTests runs the consumer suite against the adapter's consumer:
// the same promises for every broker's NewConsumer.
//
//   - Processed messages are acknowledged at the source and never
//     delivered again.
//   - A failed event is dead-lettered and then acknowledged: the
//     dead-letter store holds it, the source no longer does.
//   - When the dead-letter write fails the message is not acknowledged:
//     the broker delivers it again, and it is dead-lettered then. Nothing
//     is lost.
//   - Deliveries of one key are processed in order (adapters declaring
//     Ordered), even when one of them had to be delivered again.
//   - Shutdown in the middle of a batch loses nothing: a new consumer
//     processes what the first did not finish.
//   - Redelivered messages carry a growing DeliveryAttempt (adapters
//     declaring DeliveryCount).
func RunConsumerTests(t *testing.T, newHarness ConsumerHarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h ConsumerHarness)
	}{
		{"ProcessedAreAcked", testConsumerProcessed},
		{"DeadLetteredThenAcked", testConsumerDeadLettered},
		{"FailedWriteIsRedelivered", testConsumerFailedWrite},
		{"OrderPerKey", testConsumerOrder},
		{"ShutdownLosesNothing", testConsumerShutdown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			h, err := newHarness(ctx, t)
			require.NoError(t, err, "making harness")
			defer h.Close()
			tc.fn(t, h)
		})
	}
}

// sourceMessages returns n source messages, "evt-<prefix>-<i>", keyed over
// keys keys.
func sourceMessages(prefix string, n, keys int) []*broker.Message {
	out := make([]*broker.Message, n)
	for i := range out {
		out[i] = &broker.Message{
			Key:  []byte("key-" + strconv.Itoa(i%keys)),
			Body: fmt.Appendf(nil, `{"event_id":"evt-%s-%d","seq":%d,"geometry":{"type":"Point","coordinates":[%d,1]}}`, prefix, i, i, i%180),
		}
	}
	return out
}

// eventID extracts "evt-…" from a source message body.
func eventID(body []byte) string {
	s := string(body)
	i := strings.Index(s, `"event_id":"`)
	if i < 0 {
		return ""
	}
	s = s[i+len(`"event_id":"`):]
	j := strings.IndexByte(s, '"')
	if j < 0 {
		return ""
	}
	return s[:j]
}

// seen counts handler calls per event id and remembers their order per
// key.
type seen struct {
	mu      sync.Mutex
	calls   map[string]int
	order   map[string][]string
	attempt map[string]int
}

func newSeen() *seen {
	return &seen{calls: map[string]int{}, order: map[string][]string{}, attempt: map[string]int{}}
}

func (s *seen) add(m *broker.Message) string {
	id := eventID(m.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[id]++
	s.order[string(m.Key)] = append(s.order[string(m.Key)], id)
	s.attempt[id] = max(s.attempt[id], m.DeliveryAttempt)
	return id
}

func (s *seen) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// runUntil runs c until cond holds or the deadline passes, then stops it
// and waits for Run to return.
func runUntil(t *testing.T, c *broker.Consumer, h broker.Handler, within time.Duration, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, h) }()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && !cond() {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of its context ending")
	}
	require.True(t, cond(), "condition not met within %v", within)
}

// quiet runs a fresh consumer for a while and returns what it saw: after
// everything was acknowledged, nothing.
func quiet(t *testing.T, h ConsumerHarness, proc *broker.Processor) *seen {
	t.Helper()
	c, err := h.MakeConsumer(context.Background(), proc)
	require.NoError(t, err)
	s := newSeen()
	wait := max(2*h.ConsumerCapabilities().Redelivery, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err = c.Run(ctx, func(_ context.Context, m *broker.Message) error { s.add(m); return nil })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_ = c.Close()
	return s
}

func newProc(t *testing.T, pub broker.Publisher, dest string) *broker.Processor {
	t.Helper()
	p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: pub,
		Destination: func(*broker.Message, classify.Route) string { return dest },
		Policy:      classify.Policy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
	require.NoError(t, err)
	return p
}

func testConsumerProcessed(t *testing.T, h ConsumerHarness) {
	const n = 40
	require.NoError(t, h.Send(context.Background(), sourceMessages("ok", n, 4)))
	dlq := memory.New(nil)
	proc := newProc(t, dlq, "dlq")
	c, err := h.MakeConsumer(context.Background(), proc)
	require.NoError(t, err)
	s := newSeen()
	runUntil(t, c, func(_ context.Context, m *broker.Message) error { s.add(m); return nil },
		2*time.Minute, func() bool { return s.distinct() == n })
	require.NoError(t, c.Close())
	for id, calls := range s.calls {
		require.Equal(t, 1, calls, "%s processed once", id)
	}
	require.Zero(t, memory.Len(dlq, "dlq"), "nothing dead-lettered")
	require.Empty(t, quiet(t, h, proc).calls, "acknowledged messages are not delivered again")
}

func testConsumerDeadLettered(t *testing.T, h ConsumerHarness) {
	const n = 20
	require.NoError(t, h.Send(context.Background(), sourceMessages("poison", n, 3)))
	dlq := memory.New(nil)
	proc := newProc(t, dlq, "dlq")
	c, err := h.MakeConsumer(context.Background(), proc)
	require.NoError(t, err)
	s := newSeen()
	runUntil(t, c, func(_ context.Context, m *broker.Message) error {
		s.add(m)
		return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
	}, 2*time.Minute, func() bool { return memory.Len(dlq, "dlq") >= n })
	require.NoError(t, c.Close())
	require.Equal(t, n, memory.Len(dlq, "dlq"), "every failed event is dead-lettered once")
	ids := map[string]bool{}
	for _, m := range memory.Messages(dlq, "dlq") {
		env, err := broker.EnvelopeOf(m)
		require.NoError(t, err)
		ids[env.EventID] = true
		require.Equal(t, classify.ClassInvalidGeometry, env.FailureClass)
		require.NotEmpty(t, env.IdempotencyKey)
	}
	require.Len(t, ids, n)
	require.Empty(t, quiet(t, h, proc).calls, "dead-lettered messages are acknowledged at the source")
}

// flakyPublisher fails the first write of every event.
type flakyPublisher struct {
	*broker.Store
	mu     sync.Mutex
	failed map[string]bool
	fails  atomic.Int64
}

func (f *flakyPublisher) Publish(ctx context.Context, dest string, m *broker.Message) error {
	env, err := broker.EnvelopeOf(m)
	if err != nil {
		return err
	}
	f.mu.Lock()
	first := !f.failed[env.EventID]
	f.failed[env.EventID] = true
	f.mu.Unlock()
	if first {
		f.fails.Add(1)
		return errors.New("brokertest: dead-letter store unavailable")
	}
	return f.Store.Publish(ctx, dest, m)
}

func testConsumerFailedWrite(t *testing.T, h ConsumerHarness) {
	const n = 10
	require.NoError(t, h.Send(context.Background(), sourceMessages("flaky", n, 2)))
	dlq := &flakyPublisher{Store: memory.New(nil), failed: map[string]bool{}}
	proc := newProc(t, dlq, "dlq")
	c, err := h.MakeConsumer(context.Background(), proc)
	require.NoError(t, err)
	s := newSeen()
	caps := h.ConsumerCapabilities()
	runUntil(t, c, func(_ context.Context, m *broker.Message) error {
		s.add(m)
		return classify.SchemaViolation(errors.New("missing geometry"))
	}, 2*time.Minute+10*caps.Redelivery, func() bool { return memory.Len(dlq.Store, "dlq") >= n })
	require.NoError(t, c.Close())
	require.Equal(t, int64(n), dlq.fails.Load(), "every event's first dead-letter write failed")
	require.Equal(t, n, memory.Len(dlq.Store, "dlq"), "and every event was delivered again and dead-lettered")
	for id, calls := range s.calls {
		require.GreaterOrEqual(t, calls, 2, "%s was delivered again after its write failed", id)
		if caps.DeliveryCount {
			require.GreaterOrEqual(t, s.attempt[id], 2, "%s: DeliveryAttempt counts the broker's deliveries", id)
		}
	}
	require.Empty(t, quiet(t, h, proc).calls, "and then acknowledged")
}

func testConsumerOrder(t *testing.T, h ConsumerHarness) {
	caps := h.ConsumerCapabilities()
	if !caps.Ordered {
		t.Skip("the adapter's source does not order deliveries by key (ConsumerCapabilities.Ordered is false)")
	}
	const n, keys = 30, 3
	require.NoError(t, h.Send(context.Background(), sourceMessages("order", n, keys)))
	// The 7th event's dead-letter write fails once: it and the events of
	// its key after it must come again, in order.
	dlq := &flakyPublisher{Store: memory.New(nil), failed: map[string]bool{}}
	for i := range n {
		if i != 7 {
			dlq.failed["evt-order-"+strconv.Itoa(i)] = true
		}
	}
	proc := newProc(t, dlq, "dlq")
	c, err := h.MakeConsumer(context.Background(), proc)
	require.NoError(t, err)
	s := newSeen()
	var done atomic.Int64
	runUntil(t, c, func(_ context.Context, m *broker.Message) error {
		id := s.add(m)
		if id == "evt-order-7" {
			return classify.InvalidGeometry(errors.New("bowtie"))
		}
		done.Add(1)
		return nil
	}, 2*time.Minute+10*caps.Redelivery, func() bool { return memory.Len(dlq.Store, "dlq") == 1 && s.distinct() == n })
	require.NoError(t, c.Close())
	for k := range keys {
		key := "key-" + strconv.Itoa(k)
		var want []string
		for i := k; i < n; i += keys {
			want = append(want, "evt-order-"+strconv.Itoa(i))
		}
		// First deliveries come in send order; only the failed event and
		// the events of its key after it may come again.
		got := s.order[key]
		var firsts []string
		for idx, id := range got {
			if !slices.Contains(firsts, id) {
				firsts = append(firsts, id)
				continue
			}
			seq, _ := strconv.Atoi(strings.TrimPrefix(id, "evt-order-"))
			require.True(t, key == "key-1" && seq >= 7 && slices.Index(got[:idx], "evt-order-7") >= 0,
				"key %s: %s came again, but only evt-order-7 and the events after it may (%v)", key, id, got)
		}
		require.Equal(t, want, firsts, "key %s processed in send order", key)
	}
}

func testConsumerShutdown(t *testing.T, h ConsumerHarness) {
	const n = 30
	require.NoError(t, h.Send(context.Background(), sourceMessages("stop", n, 5)))
	dlq := memory.New(nil)
	proc := newProc(t, dlq, "dlq")
	s := newSeen()
	c, err := h.MakeConsumer(context.Background(), proc)
	require.NoError(t, err)
	var completed sync.Map
	slow := func(ctx context.Context, m *broker.Message) error {
		id := s.add(m)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Millisecond):
		}
		completed.Store(id, true)
		return nil
	}
	// Stop the first consumer after a third of the events.
	runUntil(t, c, slow, 2*time.Minute, func() bool { return s.distinct() >= n/3 })
	require.NoError(t, c.Close())
	c2, err := h.MakeConsumer(context.Background(), proc)
	require.NoError(t, err)
	caps := h.ConsumerCapabilities()
	runUntil(t, c2, slow, 2*time.Minute+10*caps.Redelivery, func() bool {
		k := 0
		completed.Range(func(any, any) bool { k++; return true })
		return k == n
	})
	require.NoError(t, c2.Close())
	require.Zero(t, memory.Len(dlq, "dlq"), "a shutdown is not a failure: nothing is dead-lettered")
	require.Empty(t, quiet(t, h, proc).calls, "everything completed was acknowledged")
}

// StoreConsumerHarness returns the [ConsumerHarness] of a store adapter
// whose consumer reads one of the store's own destinations (its
// NewConsumer is [broker.NewStoreConsumer]): Send publishes to destination
// of s, MakeConsumer calls newConsumer, and Close closes s. redelivery is
// the store's LeaseTTL: a record not acknowledged is delivered again once
// its lease runs out. A store source does not hold back a key's later
// records while an earlier one waits for redelivery, so it does not
// declare Ordered.
func StoreConsumerHarness(s *broker.Store, destination string, redelivery time.Duration,
	newConsumer func(s *broker.Store, destination string, proc *broker.Processor) (*broker.Consumer, error)) ConsumerHarness {
	return &storeConsumerHarness{s: s, dest: destination, redelivery: redelivery, newConsumer: newConsumer}
}

type storeConsumerHarness struct {
	s           *broker.Store
	dest        string
	redelivery  time.Duration
	newConsumer func(*broker.Store, string, *broker.Processor) (*broker.Consumer, error)
}

func (h *storeConsumerHarness) Send(ctx context.Context, msgs []*broker.Message) error {
	for _, m := range msgs {
		if err := h.s.Publish(ctx, h.dest, m); err != nil {
			return err
		}
	}
	return nil
}

func (h *storeConsumerHarness) MakeConsumer(_ context.Context, proc *broker.Processor) (*broker.Consumer, error) {
	return h.newConsumer(h.s, h.dest, proc)
}

func (h *storeConsumerHarness) ConsumerCapabilities() ConsumerCapabilities {
	return ConsumerCapabilities{DeliveryCount: true, Redelivery: h.redelivery}
}

func (h *storeConsumerHarness) Close() { _ = h.s.Close() }
