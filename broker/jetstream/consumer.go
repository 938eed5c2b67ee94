package jetstream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// ConsumerOptions configures a [Consumer].
type ConsumerOptions struct {
	// Processor configures the [broker.Processor] that runs the handler.
	// Its Publisher is required (typically a [*Store]); its Builder,
	// Destination, IdempotencyKey and Now are also used to dead-letter the
	// messages the server gave up on.
	Processor broker.ProcessorOptions
	// Batch is how many messages one pull asks for. They are processed one
	// after another. Default 1.
	Batch int
	// FetchWait is how long one pull waits for messages. Default 5s.
	FetchWait time.Duration
	// Progress is how often a message being processed is reported in
	// progress (+WPI), which restarts its ack wait, so in-place retries
	// longer than the ack wait do not cause a redelivery. Default half the
	// consumer's ack_wait; negative disables.
	Progress time.Duration
	// NakDelay is the delay asked for when a message is Nak'ed because it
	// could not be processed nor dead-lettered (the dead-letter write
	// failed, or the context ended). Default 0: redeliver at once.
	NakDelay time.Duration
	// DeleteGivenUp deletes a message from the source stream once the
	// server gave up on it and it was dead-lettered. Useful on work-queue
	// streams, where such a message would otherwise stay forever. Default
	// false.
	DeleteGivenUp bool
	// Remember bounds how many handler errors are remembered (by stream
	// sequence) for messages that were not acknowledged, so a message the
	// server later gives up on is dead-lettered with its real failure.
	// Default 10,000.
	Remember int
	// Logger receives errors of the dead-letter path. Nil discards.
	Logger *slog.Logger
}

// Consumer processes a source stream's pull consumer with a
// [broker.Processor], acknowledging each message only once it was
// processed or its dead-letter write was acknowledged, and dead-letters
// the messages the server gives up on after the consumer's max_deliver
// (the MAX_DELIVERIES advisory). It is safe for concurrent use.
type Consumer struct {
	js       natsjs.JetStream
	cons     natsjs.Consumer
	stream   natsjs.Stream
	h        broker.Handler
	proc     *broker.Processor
	pub      broker.Publisher
	builder  *envelope.Builder
	dest     func(*broker.Message, classify.Route) string
	key      func(*broker.Message) string
	now      func() time.Time
	batch    int
	wait     time.Duration
	progress time.Duration
	nakDelay time.Duration
	del      bool
	log      *slog.Logger

	mu       sync.Mutex
	failures map[uint64]failure
	order    []uint64
	remember int
}

type failure struct {
	err   error
	class classify.Class
}

// NewConsumer returns a consumer of cons, a pull consumer with explicit
// acks that the caller created (its max_deliver and ack_wait are the
// caller's choice). h is the handler the Processor runs.
func NewConsumer(ctx context.Context, js natsjs.JetStream, cons natsjs.Consumer, h broker.Handler, opts *ConsumerOptions) (*Consumer, error) {
	if js == nil || cons == nil || h == nil {
		return nil, errors.New("jetstream: NewConsumer needs a JetStream, a consumer and a handler")
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	proc, err := broker.NewProcessor(o.Processor)
	if err != nil {
		return nil, err
	}
	info := cons.CachedInfo()
	if info == nil {
		return nil, errors.New("jetstream: consumer has no info")
	}
	if info.Config.AckPolicy != natsjs.AckExplicitPolicy {
		return nil, fmt.Errorf("jetstream: consumer %q must use explicit acks, has %v", info.Name, info.Config.AckPolicy)
	}
	stream, err := js.Stream(ctx, info.Stream)
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %q: %w", info.Stream, err)
	}
	c := &Consumer{
		js: js, cons: cons, stream: stream, h: h, proc: proc,
		pub: o.Processor.Publisher, builder: o.Processor.Builder,
		dest: o.Processor.Destination, key: o.Processor.IdempotencyKey, now: o.Processor.Now,
		batch: o.Batch, wait: o.FetchWait, progress: o.Progress, nakDelay: o.NakDelay,
		del: o.DeleteGivenUp, log: o.Logger, remember: o.Remember,
		failures: map[uint64]failure{},
	}
	if c.builder == nil {
		if c.builder, err = envelope.NewBuilder(nil); err != nil {
			return nil, err
		}
	}
	if c.dest == nil {
		c.dest = broker.DefaultDestination
	}
	if c.key == nil {
		c.key = broker.DefaultIdempotencyKey
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.batch <= 0 {
		c.batch = 1
	}
	if c.wait <= 0 {
		c.wait = 5 * time.Second
	}
	if c.progress == 0 {
		c.progress = info.Config.AckWait / 2
	}
	if c.remember <= 0 {
		c.remember = 10_000
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// MessageFrom converts a JetStream message for a [broker.Processor]: body
// and headers as received (the key from [HeaderKey] when present),
// DeliveryAttempt = the server's NumDelivered, and Source = {system
// "nats", topic = subject, offset = stream sequence, message id =
// Nats-Msg-Id, timestamp = stored time, delivery count}.
func MessageFrom(m natsjs.Msg) (*broker.Message, error) {
	md, err := m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("jetstream: message metadata: %w", err)
	}
	return messageOf(m.Subject(), m.Data(), m.Headers(), md.Sequence.Stream, md.Timestamp, int(md.NumDelivered)), nil
}

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
	off := int64(seq)
	src := &envelope.Source{System: "nats", Topic: subject, Offset: &off, MessageID: h.Get(HeaderMsgID), Key: msg.Key, DeliveryCount: deliveries}
	if !ts.IsZero() {
		t := ts.UTC()
		src.Timestamp = &t
	}
	msg.Source = src
	return msg
}

// Handle processes one message of the consumer and settles it: a double
// ack when the handler succeeded or the dead-letter write was
// acknowledged, otherwise a Nak (after NakDelay) so the server redelivers
// it — until max_deliver, after which the MAX_DELIVERIES advisory takes
// over (see [Consumer.WatchMaxDeliveries]). While the message is
// processed it is reported in progress every Progress.
func (c *Consumer) Handle(ctx context.Context, m natsjs.Msg) (broker.Result, error) {
	msg, err := MessageFrom(m)
	if err != nil {
		_ = m.Nak()
		return broker.Result{}, err
	}
	seq := uint64(*msg.Source.Offset)
	stop := c.keepAlive(m)
	out, perr := c.proc.Process(ctx, msg, c.h)
	stop()
	if perr == nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := m.DoubleAck(actx); err != nil {
			return out, fmt.Errorf("jetstream: acknowledging %s #%d (processed or dead-lettered; a redelivery is absorbed by its idempotency key): %w", m.Subject(), seq, err)
		}
		c.forget(seq)
		return out, nil
	}
	if out.Err != nil {
		class := out.Decision.Class
		if !class.Valid() {
			class = classify.Classify(out.Err)
		}
		c.note(seq, failure{err: out.Err, class: class})
	}
	var nerr error
	if c.nakDelay > 0 {
		nerr = m.NakWithDelay(c.nakDelay)
	} else {
		nerr = m.Nak()
	}
	if nerr != nil {
		c.log.WarnContext(ctx, "geodlq: nak failed; the message returns after its ack wait", slog.Any("error", nerr))
	}
	return out, perr
}

func (c *Consumer) keepAlive(m natsjs.Msg) func() {
	if c.progress <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(c.progress)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (c *Consumer) note(seq uint64, f failure) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.failures[seq]; !ok {
		c.order = append(c.order, seq)
	}
	c.failures[seq] = f
	for len(c.order) > c.remember {
		delete(c.failures, c.order[0])
		c.order = c.order[1:]
	}
}

func (c *Consumer) forget(seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.failures, seq)
}

func (c *Consumer) lastFailure(seq uint64) (failure, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.failures[seq]
	return f, ok
}

// Run watches the MAX_DELIVERIES advisory and processes messages until ctx
// ends, then returns ctx.Err(). Messages are pulled Batch at a time and
// handled one after another with [Consumer.Handle].
func (c *Consumer) Run(ctx context.Context) error {
	stop, err := c.WatchMaxDeliveries(ctx)
	if err != nil {
		return err
	}
	defer stop()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := c.cons.Fetch(c.batch, natsjs.FetchMaxWait(c.wait))
		if err != nil {
			if errors.Is(err, natsjs.ErrConsumerDeleted) || errors.Is(err, natsjs.ErrConsumerNotFound) {
				return fmt.Errorf("jetstream: consumer: %w", err)
			}
			c.log.WarnContext(ctx, "geodlq: jetstream pull failed", slog.Any("error", err))
			if serr := sleep(ctx, time.Second); serr != nil {
				return serr
			}
			continue
		}
		for m := range batch.Messages() {
			if ctx.Err() != nil {
				_ = m.Nak()
				continue
			}
			if _, err := c.Handle(ctx, m); err != nil {
				c.log.WarnContext(ctx, "geodlq: message not acknowledged", slog.String("subject", m.Subject()), slog.Any("error", err))
			}
		}
		if err := batch.Error(); err != nil && ctx.Err() == nil {
			c.log.WarnContext(ctx, "geodlq: jetstream pull ended with an error", slog.Any("error", err))
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// MaxDeliveriesAdvisory is the server's io.nats.jetstream.advisory.v1.max_deliver
// event.
type MaxDeliveriesAdvisory struct {
	Type       string    `json:"type"`
	ID         string    `json:"id"`
	Time       time.Time `json:"timestamp"`
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries int       `json:"deliveries"`
}

// AdvisorySubject returns the subject of the MAX_DELIVERIES advisory of a
// stream's consumer.
func AdvisorySubject(stream, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
}

// WatchMaxDeliveries subscribes to the consumer's MAX_DELIVERIES advisory
// and, for every message the server gave up on, fetches it from the stream
// by sequence and dead-letters it (see [Consumer.DeadLetterGivenUp]),
// retrying a failed write with backoff until ctx ends. It returns once the
// subscription is in place; stop unsubscribes and waits for the advisory
// in hand to be finished.
//
// Advisories are core NATS messages: one published while no process
// watches is not redelivered. The messages stay in the stream (unless the
// retention removes them), so they can be dead-lettered later with
// DeadLetterGivenUp.
func (c *Consumer) WatchMaxDeliveries(ctx context.Context) (stop func(), err error) {
	info := c.cons.CachedInfo()
	nc := c.js.Conn()
	ch := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(AdvisorySubject(info.Stream, info.Name), ch)
	if err != nil {
		return nil, fmt.Errorf("jetstream: subscribing to max-deliveries advisories: %w", err)
	}
	// nats.go's FlushWithContext refuses a context without a deadline, and
	// a service's context (signal.NotifyContext) usually has none.
	fctx, fcancel := context.WithTimeout(ctx, flushTimeout)
	err = nc.FlushWithContext(fctx)
	fcancel()
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("jetstream: subscribing to max-deliveries advisories: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-wctx.Done():
				return
			case m := <-ch:
				var adv MaxDeliveriesAdvisory
				if err := json.Unmarshal(m.Data, &adv); err != nil {
					c.log.ErrorContext(wctx, "geodlq: unreadable max-deliveries advisory", slog.Any("error", err))
					continue
				}
				c.deadLetterWithRetry(wctx, adv)
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = sub.Unsubscribe()
			cancel()
			wg.Wait()
		})
	}, nil
}

func (c *Consumer) deadLetterWithRetry(ctx context.Context, adv MaxDeliveriesAdvisory) {
	delay := 100 * time.Millisecond
	for {
		err := c.DeadLetterGivenUp(ctx, adv.StreamSeq, adv.Deliveries)
		if err == nil {
			return
		}
		c.log.ErrorContext(ctx, "geodlq: dead-lettering a message the server gave up on failed",
			slog.String("stream", adv.Stream), slog.String("consumer", adv.Consumer),
			slog.Uint64("stream_seq", adv.StreamSeq), slog.Any("error", err))
		if errors.Is(err, natsjs.ErrMsgNotFound) || sleep(ctx, delay) != nil {
			return
		}
		delay = min(delay*2, 30*time.Second)
	}
}

// DeadLetterGivenUp dead-letters the message at stream sequence seq, which
// the server stopped delivering after deliveries attempts: it fetches the
// message by sequence, builds an envelope with attempts = deliveries and
// the class and error last recorded for it by [Consumer.Handle] in this
// process (unknown, with an error naming max_deliver, when none was), and
// publishes it with the Processor's publisher, destination and key
// functions. With DeleteGivenUp the message is then deleted from the
// stream.
func (c *Consumer) DeadLetterGivenUp(ctx context.Context, seq uint64, deliveries int) error {
	raw, err := c.stream.GetMsg(ctx, seq)
	if err != nil {
		return fmt.Errorf("jetstream: fetching given-up message #%d: %w", seq, err)
	}
	m := messageOf(raw.Subject, raw.Data, raw.Header, raw.Sequence, raw.Time, deliveries)
	info := c.cons.CachedInfo()
	class := classify.ClassUnknown
	herr := fmt.Errorf("jetstream: consumer %s of stream %s gave up after %d deliveries (max_deliver); no failure was recorded for it in this process",
		info.Name, info.Stream, deliveries)
	if f, ok := c.lastFailure(seq); ok {
		herr = f.err
		if f.class.Valid() {
			class = f.class
		}
	}
	dest := c.dest(m, classify.RouteFor(class))
	limit := 0
	if l, ok := c.pub.(broker.Limiter); ok {
		limit = l.MaxMessageBytes(dest)
	}
	firstSeen := raw.Time
	if v := m.Header(broker.HeaderFirstSeenAt); v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			firstSeen = t
		}
	}
	if firstSeen.IsZero() {
		firstSeen = c.now()
	}
	env, body, err := c.builder.Build(ctx, envelope.Input{
		Payload:        m.Body,
		IdempotencyKey: c.key(m),
		EventID:        m.Header(broker.HeaderEventID),
		Err:            herr,
		Class:          class,
		Attempts:       max(1, deliveries),
		FirstSeenAt:    firstSeen,
		Source:         m.Source,
		MaxBytes:       limit,
	})
	if err != nil {
		return fmt.Errorf("jetstream: building envelope for given-up message #%d: %w", seq, err)
	}
	if err := c.pub.Publish(ctx, dest, &broker.Message{Key: m.Key, Body: body, Headers: broker.Headers(env)}); err != nil {
		return fmt.Errorf("jetstream: dead-lettering given-up message #%d to %q: %w", seq, dest, err)
	}
	c.forget(seq)
	c.log.WarnContext(ctx, "geodlq: dead-lettered a message the server gave up on",
		slog.String("stream", info.Stream), slog.String("consumer", info.Name), slog.Uint64("stream_seq", seq),
		slog.Int("attempts", deliveries), slog.String("class", env.FailureClass.String()), slog.String("destination", dest),
		slog.String("event_id", env.EventID))
	if c.del {
		if err := c.stream.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, natsjs.ErrMsgNotFound) {
			return fmt.Errorf("jetstream: deleting given-up message #%d after dead-lettering it: %w", seq, err)
		}
	}
	return nil
}

// flushTimeout bounds the flush that makes the advisory subscription live.
const flushTimeout = DefaultTimeout
