package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/geodlq/geodlq/broker"
)

// ConsumeOptions configures [Consume]. The zero value and nil are valid.
type ConsumeOptions struct {
	// RetryBackoff is how long Consume waits before it reads a partition
	// again from a record that was not acknowledged (its dead-letter write
	// failed). Default 1s.
	RetryBackoff time.Duration
	// MaxPollRecords bounds the records taken per poll (Kafka's
	// max.poll.records). Default 500.
	MaxPollRecords int
	// OnOutcome, when set, is called after every record with the
	// Processor's outcome and error, from the goroutine processing the
	// record's partition.
	OnOutcome func(r *kgo.Record, out broker.Result, err error)
	// Logger receives a record per record left unacknowledged and per
	// failed commit. Nil discards.
	Logger *slog.Logger
}

// ConsumerOpts returns the options a source-topic client needs for
// [Consume]: the group and topics, no autocommit (Consume commits), and
// rebalances blocked while polled records are processed (so that Consume
// never commits a partition it no longer owns).
func ConsumerOpts(group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
	}
}

// Consume reads the source topics of the group consumer cl and runs
// proc.Process(h) on every record, until ctx ends (it then returns
// ctx.Err()) or the client is closed.
//
// A partition's records are processed one at a time, in offset order, so
// per-key order holds; partitions are processed concurrently. A record's
// offset is committed only once its outcome says Ack — the handler
// succeeded, or the envelope is durably in the dead-letter topic (acks=all
// when proc publishes to a [Store]). When the outcome says not to ack (the
// dead-letter write failed, or ctx ended), nothing from that record on is
// committed: Consume seeks the partition back to the record and reads it
// again after RetryBackoff, and a restarted consumer starts from it too.
// Commits are synchronous, after every poll, before rebalances are
// allowed again.
//
// Kafka keeps no delivery count, so every consumption starts the
// Processor's attempts at 1; attempts made before a crash or a failed
// dead-letter write are not remembered.
//
// cl must be a group consumer with autocommit disabled and
// kgo.BlockRebalanceOnPoll, as [ConsumerOpts] configures; Consume fails
// otherwise. Rebalances wait while a poll's records are processed, so a
// poll must be processed within the group's rebalance timeout
// (kgo.RebalanceTimeout, default 60s), in-place retries included: lower
// MaxPollRecords when the Processor's Policy retries for long. A member
// that overruns it is evicted; its commits then fail and its records are
// read again by the new owner — duplicates, which the idempotency key
// absorbs, never losses.
func Consume(ctx context.Context, cl *kgo.Client, proc *broker.Processor, h broker.Handler, opts *ConsumeOptions) error {
	if cl == nil || proc == nil || h == nil {
		return errors.New("kafka: Consume: nil client, processor or handler")
	}
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g == "" {
		return errors.New("kafka: Consume: the client must be a group consumer (kgo.ConsumerGroup)")
	}
	if off, _ := cl.OptValue(kgo.DisableAutoCommit).(bool); !off {
		return errors.New("kafka: Consume: the client must not autocommit (kgo.DisableAutoCommit): it would commit records whose dead-letter write failed")
	}
	if block, _ := cl.OptValue(kgo.BlockRebalanceOnPoll).(bool); !block {
		return errors.New("kafka: Consume: the client must use kgo.BlockRebalanceOnPoll")
	}
	var o ConsumeOptions
	if opts != nil {
		o = *opts
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = time.Second
	}
	if o.MaxPollRecords <= 0 {
		o.MaxPollRecords = 500
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &consumer{cl: cl, proc: proc, h: h, o: o, log: log}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		fs := cl.PollRecords(ctx, o.MaxPollRecords)
		if fs.IsClientClosed() {
			cl.AllowRebalance()
			return broker.ErrClosed
		}
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.Canceled) && !errors.Is(fe.Err, context.DeadlineExceeded) {
				log.WarnContext(ctx, "geodlq: kafka: fetch error", slog.String("topic", fe.Topic),
					slog.Int("partition", int(fe.Partition)), slog.Any("error", fe.Err))
			}
		}
		retry := c.batch(ctx, fs)
		cl.AllowRebalance()
		if retry {
			t := time.NewTimer(o.RetryBackoff)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

type consumer struct {
	cl   *kgo.Client
	proc *broker.Processor
	h    broker.Handler
	o    ConsumeOptions
	log  *slog.Logger
}

// batch processes one poll and commits what was acknowledged; it reports
// whether a partition was seeked back for a retry.
func (c *consumer) batch(ctx context.Context, fs kgo.Fetches) bool {
	type result struct {
		commit *kgo.Record // last acknowledged record
		retry  *kgo.Record // first record not acknowledged
	}
	var (
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
	)
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		wg.Go(func() {
			var res result
			for _, r := range p.Records {
				out, err := c.proc.Process(ctx, MessageOf(r), c.h)
				if c.o.OnOutcome != nil {
					c.o.OnOutcome(r, out, err)
				}
				if err != nil || !out.Ack {
					res.retry = r
					c.log.WarnContext(ctx, "geodlq: kafka: record not acknowledged; it will be read again",
						slog.String("topic", r.Topic), slog.Int("partition", int(r.Partition)),
						slog.Int64("offset", r.Offset), slog.Any("error", err))
					break
				}
				res.commit = r
			}
			mu.Lock()
			results = append(results, res)
			mu.Unlock()
		})
	})
	wg.Wait()

	commit := map[string]map[int32]kgo.EpochOffset{}
	seek := map[string]map[int32]kgo.EpochOffset{}
	add := func(m map[string]map[int32]kgo.EpochOffset, r *kgo.Record, off int64) {
		if m[r.Topic] == nil {
			m[r.Topic] = map[int32]kgo.EpochOffset{}
		}
		m[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: off}
	}
	for _, res := range results {
		if res.commit != nil {
			add(commit, res.commit, res.commit.Offset+1)
		}
		if res.retry != nil {
			add(seek, res.retry, res.retry.Offset)
		}
	}
	if len(commit) > 0 {
		// Commit even if ctx ended: these outcomes are final.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		c.cl.CommitOffsetsSync(cctx, commit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err == nil {
				err = commitErr(resp)
			}
			if err != nil {
				c.log.WarnContext(ctx, "geodlq: kafka: commit failed; acknowledged records will be read again",
					slog.Any("error", err))
			}
		})
		cancel()
	}
	if len(seek) > 0 {
		c.cl.SetOffsets(seek)
	}
	return len(seek) > 0
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
