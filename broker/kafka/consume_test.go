package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/kafka"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// publisherFunc adapts a function to broker.Publisher.
type publisherFunc func(ctx context.Context, destination string, m *broker.Message) error

func (f publisherFunc) Publish(ctx context.Context, destination string, m *broker.Message) error {
	return f(ctx, destination, m)
}

func processor(t *testing.T, pub broker.Publisher) *broker.Processor {
	t.Helper()
	p, err := broker.NewProcessor(&broker.ProcessorOptions{
		Publisher: pub, Policy: classify.Policy{MaxAttempts: 1},
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
	})
	require.NoError(t, err)
	return p
}

// run runs a consumer of cl until stop returns true (checked after every
// result) or the deadline passes, then closes cl: the consumer leaves its
// group.
func run(t *testing.T, cl *kgo.Client, proc *broker.Processor, h broker.Handler, maxPoll int, stop func(r *kgo.Record, out broker.Result, err error) bool) {
	t.Helper()
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stopped atomic.Bool
	c, err := kafka.NewConsumer(cl, proc, &kafka.ConsumerOptions{ConsumerOptions: broker.ConsumerOptions{
		NackDelay: 50 * time.Millisecond,
		MaxBatch:  maxPoll,
		OnResult: func(d *broker.Delivery, out broker.Result, err error) {
			if stop(d.Handle.(*kgo.Record), out, err) {
				stopped.Store(true)
				cancel()
			}
		},
	}})
	require.NoError(t, err)
	require.ErrorIs(t, c.Run(ctx, h), context.Canceled)
	require.True(t, stopped.Load(), "the consumer stopped on its deadline, not on the test's condition")
	require.NoError(t, c.Close())
}

func TestNewConsumerRequiresManualCommits(t *testing.T) {
	c := newCluster(t)
	proc := processor(t, publisherFunc(func(context.Context, string, *broker.Message) error { return nil }))
	for name, opts := range map[string][]kgo.Opt{
		"no group":          {kgo.ConsumeTopics("t")},
		"autocommit":        {kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")},
		"rebalance on poll": {kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.DisableAutoCommit()},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := kafka.NewConsumer(c.client(opts...), proc, nil)
			require.ErrorIs(t, err, broker.ErrInvalidArgument)
		})
	}
	_, err := kafka.NewConsumer(nil, proc, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	_, err = kafka.NewConsumer(c.client(kafka.ConsumerOpts("g", "t")...), nil, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
}

// Close stops a Run that waits for records; the client stays open.
func TestConsumerClose(t *testing.T) {
	c := newCluster(t)
	src := unique("src")
	c.createTopic(src, 1)
	cl := c.client(kafka.ConsumerOpts(unique("app"), src)...)
	cons, err := kafka.NewConsumer(cl, processor(t, publisherFunc(func(context.Context, string, *broker.Message) error { return nil })), nil)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- cons.Run(context.Background(), func(context.Context, *broker.Message) error { return nil })
	}()
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, cons.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, broker.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	require.NoError(t, cl.Ping(context.Background()), "the client is the caller's: still open")
}

// The source offset is committed only after the dead-letter write is
// acknowledged: while the envelope is being written, the group's offset
// is still before the record.
func TestConsumeCommitsAfterDeadLetterAck(t *testing.T) {
	c := newCluster(t)
	s := c.store(nil)
	src, group := unique("src"), unique("app")
	c.createTopic(src, 1)
	for i := range 5 {
		c.produce(&kgo.Record{Topic: src, Key: []byte("k"), Value: []byte(`{"n":` + strconv.Itoa(i) + `}`)})
	}
	var during []int64 // one partition: results come one at a time
	gate := publisherFunc(func(ctx context.Context, d string, m *broker.Message) error {
		during = append(during, c.committed(group, src, 0))
		if err := s.Publish(ctx, d, m); err != nil {
			return err
		}
		return nil
	})
	proc := processor(t, gate)
	h := func(_ context.Context, m *broker.Message) error {
		if string(m.Body) == `{"n":2}` {
			return poison
		}
		return nil
	}
	cl := c.client(kafka.ConsumerOpts(group, src)...)
	// One record per poll, so that every record is committed on its own.
	run(t, cl, proc, h, 1, func(r *kgo.Record, _ broker.Result, _ error) bool { return r.Offset == 4 })
	require.Equal(t, []int64{2}, during, "while the envelope of offset 2 was being written, only offsets 0 and 1 were committed")
	require.Equal(t, int64(5), c.committed(group, src, 0), "after the write, everything is committed")
	recs := drain(t, s, src+".poison.dlt")
	require.Len(t, recs, 1)
	require.Equal(t, "2", recs[0].Message.Header(kafka.HeaderOriginalOffset))
}

// A failed dead-letter write leaves the source offset uncommitted: the
// consumer reads the record again (seeking back), and so does a consumer
// restarted in the same group, which then dead-letters it for good.
func TestConsumeFailedDeadLetterIsNotCommitted(t *testing.T) {
	c := newCluster(t)
	src, group := unique("src"), unique("app")
	c.createTopic(src, 1)
	c.produce(
		&kgo.Record{Topic: src, Key: []byte("a"), Value: []byte(`{"ok":1}`)},
		&kgo.Record{Topic: src, Key: []byte("a"), Value: []byte(bowtie)},
		&kgo.Record{Topic: src, Key: []byte("a"), Value: []byte(`{"ok":2}`)},
	)
	h := func(_ context.Context, m *broker.Message) error {
		if string(m.Body) == bowtie {
			return poison
		}
		return nil
	}
	var writes atomic.Int32
	down := publisherFunc(func(context.Context, string, *broker.Message) error {
		writes.Add(1)
		return errors.New("kafka: dead-letter cluster unavailable")
	})
	seen := map[int64]int{} // one partition: results come one at a time
	cl := c.client(kafka.ConsumerOpts(group, src)...)
	run(t, cl, processor(t, down), h, 0, func(r *kgo.Record, out broker.Result, err error) bool {
		seen[r.Offset]++
		if r.Offset == 1 {
			assert.ErrorIs(t, err, broker.ErrNotAcked)
			assert.False(t, out.Ack)
		}
		return seen[1] >= 3
	})
	require.GreaterOrEqual(t, int(writes.Load()), 3, "the failed record was read again and again")
	require.Equal(t, 1, seen[0], "the record before it was processed once")
	require.Zero(t, seen[2], "nothing after the failed record was processed")
	require.Equal(t, int64(1), c.committed(group, src, 0), "the offset stops at the record whose dead-letter write failed")

	// Restart: a new consumer in the group, the dead-letter topic back up.
	s := c.store(nil)
	var again []int64
	cl2 := c.client(kafka.ConsumerOpts(group, src)...)
	run(t, cl2, processor(t, s), h, 0, func(r *kgo.Record, out broker.Result, err error) bool {
		assert.NoError(t, err)
		again = append(again, r.Offset)
		return r.Offset == 2
	})
	require.Equal(t, []int64{1, 2}, again, "the restarted consumer starts at the uncommitted record")
	require.Equal(t, int64(3), c.committed(group, src, 0))
	recs := drain(t, s, src+".poison.dlt")
	require.Len(t, recs, 1)
	require.Equal(t, []byte(bowtie), mustRestore(t, recs[0]))
}

// The consumer keeps per-key order: a partition's records are processed one at
// a time, and their envelopes land in the dead-letter topic in order.
func TestConsumeKeyOrder(t *testing.T) {
	c := newCluster(t)
	s := c.store(nil)
	src, group := unique("src"), unique("app")
	c.createTopic(src, 4)
	const n = 120
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: src, Key: []byte("entity-" + strconv.Itoa(i%9)), Value: []byte(`{"seq":` + strconv.Itoa(i) + `}`)})
	}
	c.produce(rs...)
	var mu sync.Mutex
	order := map[string][]int{}
	h := func(_ context.Context, m *broker.Message) error {
		var seq int
		_, err := fmt.Sscanf(string(m.Body), `{"seq":%d}`, &seq)
		assert.NoError(t, err)
		mu.Lock()
		order[string(m.Key)] = append(order[string(m.Key)], seq)
		mu.Unlock()
		return poison
	}
	var done atomic.Int32
	run(t, c.client(kafka.ConsumerOpts(group, src)...), processor(t, s), h, 0, func(_ *kgo.Record, out broker.Result, err error) bool {
		assert.NoError(t, err)
		assert.True(t, out.DeadLettered)
		return done.Add(1) == n
	})
	for k, seqs := range order {
		require.IsIncreasing(t, seqs, "key %s handled in order", k)
	}
	dl := map[string][]int{}
	for _, r := range drain(t, s, src+".poison.dlt") {
		var seq int
		_, err := fmt.Sscanf(string(mustRestore(t, r)), `{"seq":%d}`, &seq)
		require.NoError(t, err)
		dl[string(r.Message.Key)] = append(dl[string(r.Message.Key)], seq)
	}
	require.Equal(t, order, dl, "each key's envelopes are in the dead-letter topic in order")
}

// mustRestore returns the original payload of a dead-letter record.
func mustRestore(t *testing.T, r *broker.Record) []byte {
	t.Helper()
	env, err := envelope.Decode(r.Message.Body)
	require.NoError(t, err)
	b, err := env.Restore(context.Background(), nil)
	require.NoError(t, err)
	return b
}

// Rebalances never make a record processed twice: a member commits what
// it acknowledged before it lets a rebalance take its partitions, so the
// member that gets them starts after it.
func TestConsumerRebalance(t *testing.T) {
	c := newCluster(t)
	src, group := unique("src"), unique("app")
	c.createTopic(src, 6)
	const n = 300
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: src, Key: []byte("entity-" + strconv.Itoa(i%23)), Value: []byte(`{"seq":` + strconv.Itoa(i) + `}`)})
	}
	c.produce(rs...)
	var mu sync.Mutex
	calls := map[string]int{}
	per := map[int]int{} // records processed per consumer
	handler := func(i int) broker.Handler {
		return func(ctx context.Context, m *broker.Message) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(2 * time.Millisecond):
			}
			mu.Lock()
			calls[string(m.Body)]++
			per[i]++
			mu.Unlock()
			return nil
		}
	}
	distinct := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(calls)
	}
	proc := processor(t, publisherFunc(func(context.Context, string, *broker.Message) error { return nil }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(i int) (*broker.Consumer, chan error) {
		// An eager balancer with fast heartbeats hands partitions over
		// at once: a commit made after the rebalance was allowed would
		// come too late for the new owner, which would process the
		// records again.
		cl := c.client(append(kafka.ConsumerOpts(group, src), kgo.FetchMaxWait(100*time.Millisecond),
			kgo.Balancers(kgo.StickyBalancer()), kgo.HeartbeatInterval(100*time.Millisecond))...)
		cons, err := kafka.NewConsumer(cl, proc, &kafka.ConsumerOptions{ConsumerOptions: broker.ConsumerOptions{MaxBatch: 20}})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- cons.Run(ctx, handler(i)) }()
		return cons, done
	}
	_, done1 := start(1)
	require.Eventually(t, func() bool { return distinct() >= n/6 }, 30*time.Second, 10*time.Millisecond)
	_, done2 := start(2) // joins: the group rebalances while the first member processes
	require.Eventually(t, func() bool { return distinct() >= n/2 }, 30*time.Second, 10*time.Millisecond)
	_, done3 := start(3)
	// The first two may finish the first batch before the group has given
	// the third any partition: keep producing, a few records at a time,
	// until the third has processed some.
	total := n
	require.Eventually(t, func() bool {
		mu.Lock()
		got := per[3]
		mu.Unlock()
		if got > 0 {
			return true
		}
		var more []*kgo.Record
		for i := total; i < total+12; i++ {
			more = append(more, &kgo.Record{Topic: src, Key: []byte("entity-" + strconv.Itoa(i%23)), Value: []byte(`{"seq":` + strconv.Itoa(i) + `}`)})
		}
		c.produce(more...)
		total += len(more)
		return false
	}, 30*time.Second, 50*time.Millisecond, "the third consumer is given partitions")
	require.Eventually(t, func() bool { return distinct() == total }, 30*time.Second, 10*time.Millisecond)
	cancel()
	for _, d := range []chan error{done1, done2, done3} {
		require.ErrorIs(t, <-d, context.Canceled)
	}
	for body, k := range calls {
		require.Equal(t, 1, k, "%s processed once across rebalances", body)
	}
	for i := 1; i <= 3; i++ {
		require.Positive(t, per[i], "consumer %d got partitions in a rebalance and processed records (%v)", i, per)
	}
}
