package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/geodlq/geodlq/broker"
)

// Consumer defaults.
const (
	// defaultConcurrency is how many partitions a consumer processes at
	// once by default.
	defaultConcurrency = 16
	// defaultMaxBatch is the default records per poll, Kafka's
	// max.poll.records.
	defaultMaxBatch = 500
)

// ConsumerOptions configures [NewConsumer]. The zero value and nil are
// valid.
type ConsumerOptions struct {
	// ConsumerOptions: Concurrency is how many partitions are processed
	// at once; a partition's records are always processed one at a time,
	// in offset order. Default 16. MaxBatch is the records taken per poll
	// (Kafka's max.poll.records). Default 500. NackDelay is how long the
	// consumer waits before it reads a partition again from a record that
	// was not acknowledged (its dead-letter write failed, or the consumer
	// is shutting down). Default 1s. SettleTimeout bounds each offset
	// commit. Default 30s. OnResult's Delivery carries the record as its
	// Handle (a *kgo.Record).
	broker.ConsumerOptions
}

// ConsumerOpts returns the options a source-topic client needs for
// [NewConsumer]: the group and topics, no autocommit (the consumer
// commits), and rebalances blocked while polled records are processed (so
// that the consumer never commits a partition it no longer owns).
func ConsumerOpts(group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
	}
}

// NewConsumer returns a consumer of the source topics of the group
// consumer cl that runs every record through proc: the handler with
// in-place retries, then the dead-letter write. Run it with Run(ctx,
// handler); it returns when ctx ends or the consumer is closed. Closing
// the consumer does not close cl.
//
// A partition's records are processed one at a time, in offset order, so
// per-key order holds; partitions are processed concurrently. A record's
// offset is committed only once its outcome says Ack — the handler
// succeeded, or the envelope is durably in the dead-letter topic (acks=all
// when proc publishes to a store made by [New]). When a record is not
// acknowledged (the dead-letter write failed, or ctx ended), nothing from
// it on is committed: the partition is sought back to it and read again
// after NackDelay, and a restarted consumer starts from it too. Commits
// are synchronous, after every poll's records are settled, before
// rebalances are allowed again.
//
// Kafka keeps no delivery count, so every consumption starts the
// Processor's attempts at 1 (Message.DeliveryAttempt is 0); attempts made
// before a crash or a failed dead-letter write are not remembered.
//
// cl must be a group consumer with autocommit disabled and
// kgo.BlockRebalanceOnPoll, as [ConsumerOpts] configures; NewConsumer
// fails otherwise. Rebalances wait while a poll's records are processed,
// so a poll must be processed within the group's rebalance timeout
// (kgo.RebalanceTimeout, default 60s), in-place retries included: lower
// MaxBatch when the Processor's Policy retries for long. A member that
// overruns it is evicted; its commits then fail and its records are read
// again by the new owner — duplicates, which the idempotency key absorbs,
// never losses.
func NewConsumer(cl *kgo.Client, proc *broker.Processor, opts *ConsumerOptions) (*broker.Consumer, error) {
	if cl == nil || proc == nil {
		return nil, fmt.Errorf("kafka: NewConsumer needs a client and a processor: %w", broker.ErrInvalidArgument)
	}
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g == "" {
		return nil, fmt.Errorf("kafka: NewConsumer: the client must be a group consumer (kgo.ConsumerGroup): %w", broker.ErrInvalidArgument)
	}
	if off, _ := cl.OptValue(kgo.DisableAutoCommit).(bool); !off {
		return nil, fmt.Errorf("kafka: NewConsumer: the client must not autocommit (kgo.DisableAutoCommit): it would commit records whose dead-letter write failed: %w", broker.ErrInvalidArgument)
	}
	if block, _ := cl.OptValue(kgo.BlockRebalanceOnPoll).(bool); !block {
		return nil, fmt.Errorf("kafka: NewConsumer: the client must use kgo.BlockRebalanceOnPoll, so that it never commits a partition it no longer owns: %w", broker.ErrInvalidArgument)
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	if o.Concurrency == 0 {
		o.Concurrency = defaultConcurrency
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = defaultMaxBatch
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	src := &source{cl: cl, log: log, closed: make(chan struct{}), batch: map[topicPartition]*batchPart{}}
	return broker.NewConsumer(src, proc, &o.ConsumerOptions)
}

// topicPartition names a partition.
type topicPartition struct {
	topic string
	p     int32
}

// source is the [broker.Source] of a Kafka consumer: one poll is one
// batch, whose acknowledged offsets EndBatch commits.
type source struct {
	cl  *kgo.Client
	log *slog.Logger

	closeOnce sync.Once
	closed    chan struct{}

	mu      sync.Mutex
	batch   map[topicPartition]*batchPart // the records of the poll being processed
	polled  bool                          // a poll's rebalance block is held
	retryAt time.Time                     // no poll before (a partition was sought back)
	delay   time.Duration                 // the longest Nack delay of the batch
}

var (
	_ broker.Source     = (*source)(nil)
	_ broker.BatchEnder = (*source)(nil)
)

// batchPart is one partition's records in a poll and what became of them.
type batchPart struct {
	recs  []*kgo.Record // offset order
	acked map[int64]bool
	nack  int64 // the lowest offset given back; -1 none
}

// Receive polls up to max records. A poll blocks rebalances
// (kgo.BlockRebalanceOnPoll) until EndBatch, or until Receive returns no
// records.
func (s *source) Receive(ctx context.Context, max int) ([]*broker.Delivery, error) {
	select {
	case <-s.closed:
		return nil, fmt.Errorf("kafka: consumer: %w", broker.ErrClosed)
	default:
	}
	s.mu.Lock()
	wait := time.Until(s.retryAt)
	s.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-s.closed:
		case <-t.C:
		}
		t.Stop()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	// Close interrupts a poll.
	pctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-pctx.Done():
		}
	}()
	fs := s.cl.PollRecords(pctx, max)
	cancel()
	if fs.IsClientClosed() {
		s.cl.AllowRebalance()
		return nil, fmt.Errorf("kafka: consumer client closed: %w", broker.ErrClosed)
	}
	for _, fe := range fs.Errors() {
		if !errors.Is(fe.Err, context.Canceled) && !errors.Is(fe.Err, context.DeadlineExceeded) {
			s.log.WarnContext(ctx, "geodlq: kafka: fetch error", slog.String("topic", fe.Topic),
				slog.Int("partition", int(fe.Partition)), slog.Any("error", fe.Err))
		}
	}
	var ds []*broker.Delivery
	s.mu.Lock()
	clear(s.batch)
	s.delay = 0
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		tp := topicPartition{fp.Topic, fp.Partition}
		bp := s.batch[tp]
		if bp == nil {
			bp = &batchPart{acked: map[int64]bool{}, nack: -1}
			s.batch[tp] = bp
		}
		key := fp.Topic + "/" + strconv.FormatInt(int64(fp.Partition), 10)
		for _, r := range fp.Records {
			bp.recs = append(bp.recs, r)
			ds = append(ds, &broker.Delivery{Message: MessageOf(r), OrderingKey: key, Handle: r})
		}
	})
	s.polled = len(ds) > 0
	s.mu.Unlock()
	if len(ds) == 0 {
		s.cl.AllowRebalance()
		select {
		case <-s.closed:
			return nil, fmt.Errorf("kafka: consumer: %w", broker.ErrClosed)
		default:
		}
	}
	return ds, nil
}

// part returns the batch partition of d and d's record.
func (s *source) part(d *broker.Delivery) (*batchPart, *kgo.Record, error) {
	r, ok := d.Handle.(*kgo.Record)
	if !ok || r == nil {
		return nil, nil, fmt.Errorf("kafka: a delivery of another source: %w", broker.ErrInvalidArgument)
	}
	bp := s.batch[topicPartition{r.Topic, r.Partition}]
	if bp == nil {
		return nil, nil, fmt.Errorf("kafka: record %s/%d@%d is not in the current poll: %w", r.Topic, r.Partition, r.Offset, broker.ErrInvalidArgument)
	}
	return bp, r, nil
}

// Ack marks d's offset done; EndBatch commits it.
func (s *source) Ack(_ context.Context, d *broker.Delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	bp, r, err := s.part(d)
	if err != nil {
		return err
	}
	bp.acked[r.Offset] = true
	return nil
}

// Nack marks d's partition to be read again from d's record; EndBatch
// seeks it back, and the next poll waits delay.
func (s *source) Nack(_ context.Context, d *broker.Delivery, delay time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	bp, r, err := s.part(d)
	if err != nil {
		return err
	}
	if bp.nack < 0 || r.Offset < bp.nack {
		bp.nack = r.Offset
	}
	s.delay = max(s.delay, delay)
	return nil
}

// EndBatch commits, synchronously, each partition's acknowledged records
// up to the first one that was not, seeks the partitions with a record
// not acknowledged back to it, and then lets a rebalance proceed.
func (s *source) EndBatch(ctx context.Context) error {
	s.mu.Lock()
	if !s.polled {
		s.mu.Unlock()
		return nil
	}
	commit := map[string]map[int32]kgo.EpochOffset{}
	seek := map[string]map[int32]kgo.EpochOffset{}
	add := func(m map[string]map[int32]kgo.EpochOffset, r *kgo.Record, off int64) {
		if m[r.Topic] == nil {
			m[r.Topic] = map[int32]kgo.EpochOffset{}
		}
		m[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: off}
	}
	for _, bp := range s.batch {
		slices.SortFunc(bp.recs, func(a, b *kgo.Record) int { return cmp.Compare(a.Offset, b.Offset) })
		var last, retry *kgo.Record
		for _, r := range bp.recs {
			if !bp.acked[r.Offset] || (bp.nack >= 0 && r.Offset >= bp.nack) {
				retry = r // neither acknowledged nor given back counts as given back
				break
			}
			last = r
		}
		if last != nil {
			add(commit, last, last.Offset+1)
		}
		if retry != nil {
			add(seek, retry, retry.Offset)
		}
	}
	clear(s.batch)
	s.polled = false
	if len(seek) > 0 {
		s.retryAt = time.Now().Add(s.delay)
	}
	s.mu.Unlock()
	defer s.cl.AllowRebalance()

	var cerr error
	if len(commit) > 0 {
		s.cl.CommitOffsetsSync(ctx, commit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err == nil {
				err = commitErr(resp)
			}
			if err != nil {
				cerr = fmt.Errorf("kafka: committing source offsets: %w", err)
			}
		})
	}
	if len(seek) > 0 {
		s.cl.SetOffsets(seek)
	}
	return cerr
}

// Close makes Receive report [broker.ErrClosed]; a poll in progress
// returns. It does not close the client.
func (s *source) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// commitErr returns the first partition error of an offset commit.
func commitErr(resp *kmsg.OffsetCommitResponse) error {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, err)
			}
		}
	}
	return nil
}
