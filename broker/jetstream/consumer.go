package jetstream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
)

// ConsumerOptions configures [NewConsumer]. The zero value and nil are
// valid.
type ConsumerOptions struct {
	// ConsumerOptions: Concurrency default 1. MaxBatch, how many messages
	// one pull asks for, defaults to Concurrency, so that no pulled
	// message waits for a free worker while its ack wait runs (a message
	// that waits longer than ack_wait is delivered again elsewhere; its
	// idempotency key absorbs the duplicate). NackDelay (default 1s) is
	// the NakWithDelay of a message that was not acknowledged.
	broker.ConsumerOptions
	// FetchWait is how long one pull waits for messages. Default 5s.
	FetchWait time.Duration
	// Progress is how often a message being processed is reported in
	// progress (+WPI), which restarts its ack wait, so in-place retries
	// longer than the ack wait do not cause a redelivery. Default half
	// the consumer's ack_wait (15s for the server's default 30s);
	// negative disables.
	Progress time.Duration
	// IgnoreGivenUp leaves the messages the server gives up on after the
	// consumer's max_deliver in the source stream. Default false: the
	// consumer dead-letters them (see the package doc, max_deliver).
	IgnoreGivenUp bool
	// DeleteGivenUp deletes a message from the source stream once the
	// server gave up on it and it was dead-lettered. Useful on limits
	// streams, where such a message would otherwise stay until the
	// stream's limits remove it. Default false.
	DeleteGivenUp bool
	// RememberFailures bounds how many handler errors are remembered (by
	// stream sequence) for messages that were not acknowledged, so that a
	// message the server later gives up on is dead-lettered with its real
	// failure. Default 10,000.
	RememberFailures int
}

// NewConsumer returns a consumer of cons, a pull consumer with explicit
// acks of a stream of js that the caller created (its ack_wait and
// max_deliver are the caller's choice), that runs every message through
// proc: the handler with in-place retries, then the dead-letter write.
//
// A message is double-acked only once the handler succeeded or the
// dead-letter write was acknowledged; otherwise it is Nak'ed with
// ConsumerOptions.NackDelay. Message.DeliveryAttempt is the server's
// NumDelivered, where the Processor starts counting attempts. While a
// message is processed it is reported in progress every Progress.
//
// When the consumer has a max_deliver, the server stops delivering a
// message after that many deliveries and publishes a MAX_DELIVERIES
// advisory. From NewConsumer until Close the returned consumer watches
// those advisories and dead-letters each such message through proc, with
// the failure it last recorded for it (see the package doc, max_deliver),
// unless IgnoreGivenUp. Close the consumer when done.
func NewConsumer(ctx context.Context, js natsjs.JetStream, cons natsjs.Consumer, proc *broker.Processor, opts *ConsumerOptions) (*broker.Consumer, error) {
	if js == nil || cons == nil || proc == nil {
		return nil, fmt.Errorf("jetstream: NewConsumer needs a JetStream, a consumer and a processor: %w", broker.ErrInvalidArgument)
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	if o.Concurrency < 0 || o.MaxBatch < 0 {
		return nil, fmt.Errorf("jetstream: NewConsumer: negative Concurrency or MaxBatch: %w", broker.ErrInvalidArgument)
	}
	info := cons.CachedInfo()
	if info == nil {
		return nil, fmt.Errorf("jetstream: consumer has no info: %w", broker.ErrInvalidArgument)
	}
	if info.Config.AckPolicy != natsjs.AckExplicitPolicy {
		return nil, fmt.Errorf("jetstream: consumer %q must use explicit acks, has %v: %w", info.Name, info.Config.AckPolicy, broker.ErrInvalidArgument)
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = max(1, o.Concurrency)
	}
	if o.FetchWait <= 0 {
		o.FetchWait = 5 * time.Second
	}
	if o.Progress == 0 {
		o.Progress = info.Config.AckWait / 2
	}
	if o.RememberFailures <= 0 {
		o.RememberFailures = 10_000
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &source{
		js: js, cons: cons, proc: proc, name: info.Name, streamName: info.Stream,
		wait: o.FetchWait, progress: o.Progress, del: o.DeleteGivenUp, remember: o.RememberFailures,
		log: log, failures: map[uint64]error{}, done: make(chan struct{}),
	}
	if info.Config.MaxDeliver > 0 && !o.IgnoreGivenUp {
		if err := s.watch(ctx); err != nil {
			return nil, err
		}
	}
	user := o.OnResult
	o.OnResult = func(d *broker.Delivery, res broker.Result, err error) {
		s.noteResult(d, res, err)
		if user != nil {
			user(d, res, err)
		}
	}
	c, err := broker.NewConsumer(s, proc, &o.ConsumerOptions)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return c, nil
}

// source is the [broker.Source] of a JetStream pull consumer.
type source struct {
	js         natsjs.JetStream
	cons       natsjs.Consumer
	proc       *broker.Processor
	name       string
	streamName string
	wait       time.Duration
	progress   time.Duration
	del        bool
	remember   int
	log        *slog.Logger

	drains sync.WaitGroup // batches given back after Receive's context ended

	mu       sync.Mutex
	closed   bool
	failures map[uint64]error
	order    []uint64

	// The max-deliveries watcher, when it runs.
	stream  natsjs.Stream
	sub     *nats.Subscription
	cancel  context.CancelFunc
	watcher sync.WaitGroup
	done    chan struct{}
}

var (
	_ broker.Source   = (*source)(nil)
	_ broker.Extender = (*source)(nil)
)

// handle is what a Delivery's Handle holds.
type handle struct {
	msg natsjs.Msg
	seq uint64
}

// Receive pulls up to max messages, waiting up to FetchWait (or ctx's
// deadline) for the first. If ctx ends during the pull, the messages
// already received and those the pull still brings are given back with
// a Nak, so none waits for its ack wait.
func (s *source) Receive(ctx context.Context, max int) ([]*broker.Delivery, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("jetstream: consumer %q: %w", s.name, broker.ErrClosed)
	}
	wait := s.wait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	if wait < time.Millisecond {
		return nil, ctx.Err()
	}
	batch, err := s.cons.Fetch(max, natsjs.FetchMaxWait(wait))
	if err != nil {
		return nil, s.pullError(err)
	}
	var out []*broker.Delivery
	msgs := batch.Messages()
	for {
		select {
		case <-ctx.Done():
			for _, d := range out {
				_ = d.Handle.(*handle).msg.Nak()
			}
			giveBack := func() {
				for m := range msgs {
					_ = m.Nak()
				}
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				giveBack()
			} else {
				s.drains.Go(giveBack)
				s.mu.Unlock()
			}
			return nil, ctx.Err()
		case m, ok := <-msgs:
			if !ok {
				if err := batch.Error(); err != nil && len(out) == 0 {
					return nil, s.pullError(err)
				}
				return out, nil
			}
			md, err := m.Metadata()
			if err != nil {
				s.log.WarnContext(ctx, "geodlq: jetstream message without metadata given back", slog.String("consumer", s.name), slog.Any("error", err))
				_ = m.Nak()
				continue
			}
			msg := messageOf(m.Subject(), m.Data(), m.Headers(), md.Sequence.Stream, md.Timestamp, int(md.NumDelivered))
			out = append(out, &broker.Delivery{Message: msg, Handle: &handle{msg: m, seq: md.Sequence.Stream}})
		}
	}
}

// pullError wraps a failed pull: one that says the consumer or the
// connection is gone for good wraps [broker.ErrClosed], which stops Run.
func (s *source) pullError(err error) error {
	if errors.Is(err, natsjs.ErrConsumerDeleted) || errors.Is(err, natsjs.ErrConsumerNotFound) || errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("jetstream: consumer %q: %w: %w", s.name, err, broker.ErrClosed)
	}
	return fmt.Errorf("jetstream: pulling from consumer %q: %w", s.name, err)
}

// Ack double-acks d: the server confirms it.
func (s *source) Ack(ctx context.Context, d *broker.Delivery) error {
	h := d.Handle.(*handle)
	if err := h.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("jetstream: acknowledging %s #%d (processed or dead-lettered; a redelivery is absorbed by its idempotency key): %w", h.msg.Subject(), h.seq, err)
	}
	s.forget(h.seq)
	return nil
}

// Nack Naks d, with delay when positive: the server redelivers it then.
func (s *source) Nack(_ context.Context, d *broker.Delivery, delay time.Duration) error {
	h := d.Handle.(*handle)
	var err error
	if delay > 0 {
		err = h.msg.NakWithDelay(delay)
	} else {
		err = h.msg.Nak()
	}
	if err != nil {
		return fmt.Errorf("jetstream: nak of %s #%d (it returns after its ack wait): %w", h.msg.Subject(), h.seq, err)
	}
	return nil
}

// ExtendEvery implements [broker.Extender]: Progress, or 0 when disabled.
func (s *source) ExtendEvery() time.Duration { return max(s.progress, 0) }

// Extend reports d in progress (+WPI), which restarts its ack wait.
func (s *source) Extend(_ context.Context, d *broker.Delivery) error {
	return d.Handle.(*handle).msg.InProgress()
}

// Close stops the max-deliveries watcher (waiting for the message in
// hand) and waits for the messages of an interrupted pull to be given
// back. It does not touch the user's connection or consumer.
func (s *source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
		s.cancel()
		close(s.done)
		s.watcher.Wait()
	}
	s.drains.Wait()
	return nil
}

// noteResult remembers the failure of a message that was not
// acknowledged, for the dead letter of a message the server gives up on.
// A context's end is a shutdown, not the message's failure.
func (s *source) noteResult(d *broker.Delivery, res broker.Result, err error) {
	h, ok := d.Handle.(*handle)
	if !ok || err == nil || res.Err == nil || errors.Is(res.Err, context.Canceled) || errors.Is(res.Err, context.DeadlineExceeded) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.failures[h.seq]; !ok {
		s.order = append(s.order, h.seq)
	}
	s.failures[h.seq] = res.Err
	for len(s.order) > s.remember {
		delete(s.failures, s.order[0])
		s.order = s.order[1:]
	}
}

func (s *source) forget(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.failures, seq)
}

func (s *source) lastFailure(seq uint64) (error, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	err, ok := s.failures[seq]
	return err, ok
}

// messageOf converts a source message for the Processor: body and headers
// as received (the key from [HeaderKey] when present), DeliveryAttempt =
// the server's delivery count, and Source = {system "nats", topic = the
// subject, offset = the stream sequence, message id = Nats-Msg-Id,
// timestamp = the stored time, delivery count}.
func messageOf(subject string, data []byte, h nats.Header, seq uint64, ts time.Time, deliveries int) *broker.Message {
	msg := &broker.Message{Body: data, DeliveryAttempt: deliveries}
	if len(h) > 0 {
		msg.Headers = make(map[string]string, len(h))
		for k, vs := range h {
			if len(vs) > 0 {
				msg.Headers[k] = vs[0]
			}
		}
	}
	if v := h.Get(HeaderKey); v != "" {
		if key, err := base64.StdEncoding.DecodeString(v); err == nil {
			msg.Key = key
		}
	}
	off := int64(min(seq, math.MaxInt64))
	src := &envelope.Source{System: "nats", Topic: subject, Offset: &off, MessageID: h.Get(headerMsgID), Key: msg.Key, DeliveryCount: deliveries}
	if !ts.IsZero() {
		t := ts.UTC()
		src.Timestamp = &t
	}
	msg.Source = src
	return msg
}

// maxDeliveriesAdvisory is the server's
// io.nats.jetstream.advisory.v1.max_deliver event.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// advisorySubject returns the subject of the MAX_DELIVERIES advisory of a
// stream's consumer.
func advisorySubject(stream, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
}

// flushTimeout bounds the flush that makes the advisory subscription live
// (nats.go refuses to flush with a context without a deadline).
const flushTimeout = 10 * time.Second

// maxAdvisoryBytes bounds the advisories read: the server's are a few
// hundred bytes.
const maxAdvisoryBytes = 64 << 10

// watch subscribes to the consumer's MAX_DELIVERIES advisory and, until
// Close, dead-letters every message the server gave up on, retrying a
// failed write with backoff.
func (s *source) watch(ctx context.Context) error {
	stream, err := s.js.Stream(ctx, s.streamName)
	if err != nil {
		return fmt.Errorf("jetstream: stream %q: %w", s.streamName, err)
	}
	s.stream = stream
	nc := s.js.Conn()
	ch := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(advisorySubject(s.streamName, s.name), ch)
	if err != nil {
		return fmt.Errorf("jetstream: subscribing to max-deliveries advisories: %w", err)
	}
	fctx, fcancel := context.WithTimeout(ctx, flushTimeout)
	err = nc.FlushWithContext(fctx)
	fcancel()
	if err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("jetstream: subscribing to max-deliveries advisories: %w", err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.sub, s.cancel = sub, cancel
	s.watcher.Go(func() {
		for {
			select {
			case <-s.done:
				return
			case m := <-ch:
				var adv maxDeliveriesAdvisory
				if len(m.Data) > maxAdvisoryBytes {
					s.log.ErrorContext(wctx, "geodlq: oversized max-deliveries advisory ignored", slog.Int("bytes", len(m.Data)))
					continue
				}
				if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
					s.log.ErrorContext(wctx, "geodlq: unreadable max-deliveries advisory", slog.Any("error", err))
					continue
				}
				s.deadLetterWithRetry(wctx, adv)
			}
		}
	})
	return nil
}

func (s *source) deadLetterWithRetry(ctx context.Context, adv maxDeliveriesAdvisory) {
	delay := 100 * time.Millisecond
	for {
		err := s.deadLetterGivenUp(ctx, adv.StreamSeq, adv.Deliveries)
		if err == nil {
			return
		}
		s.log.ErrorContext(ctx, "geodlq: dead-lettering a message the server gave up on failed",
			slog.String("stream", s.streamName), slog.String("consumer", s.name),
			slog.Uint64("stream_seq", adv.StreamSeq), slog.Any("error", err))
		if errors.Is(err, natsjs.ErrMsgNotFound) || sleepCtx(ctx, delay) != nil {
			return
		}
		delay = min(delay*2, 30*time.Second)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// givenUpError is the failure a message the server gave up on is
// dead-lettered with: the failure last recorded for it, or one naming
// max_deliver. Its RetryAfter asks for longer than any retry policy waits
// in place, so that the Processor dead-letters it at once whatever its
// class (a replayable one to the retry destination), without calling a
// handler again: the server already made every delivery it will.
type givenUpError struct{ err error }

func (e *givenUpError) Error() string             { return e.err.Error() }
func (e *givenUpError) Unwrap() error             { return e.err }
func (e *givenUpError) RetryAfter() time.Duration { return time.Duration(math.MaxInt64) }

// deadLetterGivenUp dead-letters the message at stream sequence seq, which
// the server stopped delivering after deliveries attempts: it reads the
// message by sequence and runs it through the Processor with a handler
// that fails with the error last recorded for it in this process (or, when
// none was, an unknown failure naming max_deliver), so that the envelope
// has attempts = deliveries, the recorded class and stage, and the
// Processor's destination, idempotency key, builder and publisher. With
// DeleteGivenUp the message is then deleted from the stream.
func (s *source) deadLetterGivenUp(ctx context.Context, seq uint64, deliveries int) error {
	raw, err := s.stream.GetMsg(ctx, seq)
	if err != nil {
		return fmt.Errorf("jetstream: reading given-up message #%d: %w", seq, err)
	}
	m := messageOf(raw.Subject, raw.Data, raw.Header, raw.Sequence, raw.Time, max(1, deliveries))
	cause, ok := s.lastFailure(seq)
	if !ok {
		cause = fmt.Errorf("jetstream: consumer %s of stream %s gave up after %d deliveries (max_deliver); no failure was recorded for it in this process",
			s.name, s.streamName, deliveries)
	}
	herr := &givenUpError{err: cause}
	res, err := s.proc.Process(ctx, m, func(context.Context, *broker.Message) error { return herr })
	if err != nil {
		return fmt.Errorf("jetstream: dead-lettering given-up message #%d: %w", seq, err)
	}
	s.forget(seq)
	s.log.WarnContext(ctx, "geodlq: dead-lettered a message the server gave up on",
		slog.String("stream", s.streamName), slog.String("consumer", s.name), slog.Uint64("stream_seq", seq),
		slog.Int("attempts", res.Attempts), slog.String("destination", res.Destination))
	if s.del {
		if err := s.stream.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, natsjs.ErrMsgNotFound) {
			// Not retried: the dead letter is written, and a retry would
			// write it again.
			s.log.WarnContext(ctx, "geodlq: deleting a given-up message after dead-lettering it failed; it stays in the stream",
				slog.String("stream", s.streamName), slog.Uint64("stream_seq", seq), slog.Any("error", err))
		}
	}
	return nil
}
