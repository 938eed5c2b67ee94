package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/telemetry"
)

// Delivery is a message a [Source] received, with what the Source needs to
// settle it.
type Delivery struct {
	// Message is the message, with DeliveryAttempt and Source set as the
	// broker reports them.
	Message *Message
	// OrderingKey groups deliveries that must be processed one after
	// another, in order (a Kafka partition, an SQS FIFO message group, a
	// Pub/Sub ordering key). When one is not acknowledged, the
	// deliveries after it with the same key in the same batch are not
	// processed but given back too, so that the broker redelivers them in
	// order. "" means no ordering.
	OrderingKey string
	// Handle is the Source's own handle (a receipt handle, an ack id, a
	// delivery tag). The Consumer never looks at it.
	Handle any
}

// Source is what an adapter implements to feed a [Consumer] from one of
// its broker's sources: a queue, a subscription, a consumer group. Users
// never call a Source: they run the Consumer an adapter's NewConsumer
// returns. The Consumer calls Receive from one goroutine at a time, and
// Ack, Nack and Extend concurrently.
type Source interface {
	// Receive waits for messages and returns up to max of them. It may
	// return fewer, or none after a poll that found nothing (then the
	// Consumer calls it again). It must honour ctx. An error wrapping
	// [ErrClosed] stops the Consumer; other errors are retried with
	// backoff.
	Receive(ctx context.Context, max int) ([]*Delivery, error)
	// Ack tells the broker d is done for good: deleted, acknowledged,
	// committed. The Consumer calls it only when the handler succeeded or
	// the dead letter is durably written.
	Ack(ctx context.Context, d *Delivery) error
	// Nack gives d back for redelivery, after delay where the broker can
	// delay it (sooner is allowed; never later than the broker's own
	// redelivery would be).
	Nack(ctx context.Context, d *Delivery, delay time.Duration) error
	// Close releases the Source's resources (not the user's client).
	Close() error
}

// Extender is implemented by Sources whose deliveries carry a lease that
// must be renewed while a long handler runs (an SQS visibility timeout, a
// Service Bus lock, a JetStream ack wait).
type Extender interface {
	// ExtendEvery is how often Extend must be called for a delivery being
	// processed; 0 means never.
	ExtendEvery() time.Duration
	// Extend renews d's lease.
	Extend(ctx context.Context, d *Delivery) error
}

// BatchEnder is implemented by Sources that settle a batch as a whole
// (Kafka commits offsets and lets a rebalance proceed). EndBatch is called
// after every delivery of a batch was acknowledged or given back.
type BatchEnder interface {
	EndBatch(ctx context.Context) error
}

// ConsumerOptions configures a [Consumer]. Adapters embed it in their own
// consumer options. The zero value and nil are valid.
type ConsumerOptions struct {
	// Concurrency is how many deliveries are processed at once (those
	// sharing an OrderingKey always one after another). Default 1.
	Concurrency int
	// MaxBatch is how many deliveries one Receive asks for. Default 10;
	// adapters document their broker's maximum.
	MaxBatch int
	// NackDelay is how long a delivery that was not acknowledged (its
	// dead-letter write failed, or the consumer is shutting down) waits
	// before the broker redelivers it, where the broker can delay. Default
	// 1s.
	NackDelay time.Duration
	// ReceiveBackoff is the first wait after a failed Receive; it doubles
	// up to 30s while Receive keeps failing. Default 1s.
	ReceiveBackoff time.Duration
	// SettleTimeout bounds each Ack, Nack and EndBatch, which run even
	// when Run's context has ended, so that outcomes already decided are
	// delivered to the broker. Default 30s.
	SettleTimeout time.Duration
	// OnResult, when set, is called after each delivery with the
	// Processor's result and error, from the goroutine that processed it.
	OnResult func(d *Delivery, res Result, err error)
	// Logger receives a record per delivery not acknowledged and per
	// failed settle. Nil discards.
	Logger *slog.Logger
	// TracerProvider traces geodlq.consume.batch. Nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Consumer reads a [Source] and runs every delivery through a
// [Processor]: the handler with in-place retries, then the dead-letter
// write. It acknowledges a delivery only when the Processor says so — the
// handler succeeded, or the envelope is durably in the dead-letter store —
// and gives it back otherwise, so every event is at every moment either
// unacknowledged at its source or safely in the store. It is the one
// consumer every adapter's NewConsumer returns.
type Consumer struct {
	src    Source
	proc   *Processor
	o      ConsumerOptions
	log    *slog.Logger
	tracer trace.Tracer

	mu      sync.Mutex
	running bool
	closed  bool
}

// NewConsumer returns a consumer of src that processes with proc. Adapters
// call it; users call the adapter's NewConsumer.
func NewConsumer(src Source, proc *Processor, opts *ConsumerOptions) (*Consumer, error) {
	if src == nil || proc == nil {
		return nil, fmt.Errorf("broker: NewConsumer needs a source and a processor: %w", ErrInvalidArgument)
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	if o.Concurrency < 0 || o.MaxBatch < 0 {
		return nil, fmt.Errorf("broker: negative Concurrency or MaxBatch: %w", ErrInvalidArgument)
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 10
	}
	if o.NackDelay <= 0 {
		o.NackDelay = time.Second
	}
	if o.ReceiveBackoff <= 0 {
		o.ReceiveBackoff = time.Second
	}
	if o.SettleTimeout <= 0 {
		o.SettleTimeout = 30 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Consumer{src: src, proc: proc, o: o, log: log, tracer: telemetry.New(nil, o.TracerProvider).Tracer}, nil
}

// Source returns the Source the consumer reads, for adapters' helpers.
func (c *Consumer) Source() Source { return c.src }

// Run receives and processes deliveries until ctx ends (it then returns
// ctx's error, once the deliveries in hand are settled) or the Source
// reports [ErrClosed]. One Run at a time per Consumer.
func (c *Consumer) Run(ctx context.Context, h Handler) error {
	if h == nil {
		return fmt.Errorf("broker: Consumer.Run: nil handler: %w", ErrInvalidArgument)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if c.running {
		c.mu.Unlock()
		return errors.New("broker: Consumer.Run is already running")
	}
	c.running = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()
	backoff := c.o.ReceiveBackoff
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ds, err := c.src.Receive(ctx, c.o.MaxBatch)
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.log.WarnContext(ctx, "geodlq: receive failed; retrying", slog.Duration("backoff", backoff), slog.Any("error", err))
			if serr := sleepCtx(ctx, backoff); serr != nil {
				return serr
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = c.o.ReceiveBackoff
		if len(ds) > 0 {
			c.batch(ctx, ds, h)
		}
	}
}

// Handle processes one batch of deliveries as Run would and settles them.
// It is for adapters whose broker pushes deliveries (an HTTP push handler,
// a serverless function) rather than being polled; it returns the results
// in the order of ds.
func (c *Consumer) Handle(ctx context.Context, ds []*Delivery, h Handler) []DeliveryResult {
	return c.batch(ctx, ds, h)
}

// DeliveryResult is what [Consumer.Handle] did with one delivery.
type DeliveryResult struct {
	// Result and Err are the Processor's.
	Result Result
	Err    error
	// Acked is true when the delivery was acknowledged at its source.
	Acked bool
	// Skipped is true when the delivery was not processed because an
	// earlier one with its OrderingKey was not acknowledged.
	Skipped bool
	// SettleErr is the Ack or Nack error, if any.
	SettleErr error
}

// batch processes ds: groups of one OrderingKey in order, groups
// concurrently up to Concurrency.
func (c *Consumer) batch(ctx context.Context, ds []*Delivery, h Handler) []DeliveryResult {
	ctx, span := c.tracer.Start(ctx, "geodlq.consume.batch", trace.WithAttributes(attribute.Int("geodlq.deliveries", len(ds))))
	defer span.End()
	results := make([]DeliveryResult, len(ds))
	var groups [][]int
	keyed := map[string]int{}
	for i, d := range ds {
		if d == nil || d.Message == nil {
			results[i] = DeliveryResult{Skipped: true, Err: fmt.Errorf("broker: nil delivery: %w", ErrInvalidArgument)}
			continue
		}
		if d.OrderingKey == "" {
			groups = append(groups, []int{i})
			continue
		}
		g, ok := keyed[d.OrderingKey]
		if !ok {
			g = len(groups)
			keyed[d.OrderingKey] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	sem := make(chan struct{}, c.o.Concurrency)
	var wg sync.WaitGroup
	for _, g := range groups {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			failed := false
			for _, i := range g {
				if failed {
					results[i] = DeliveryResult{Skipped: true, SettleErr: c.nack(ctx, ds[i])}
					continue
				}
				results[i] = c.one(ctx, ds[i], h)
				failed = !results[i].Acked
			}
		})
	}
	wg.Wait()
	if be, ok := c.src.(BatchEnder); ok {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.SettleTimeout)
		if err := be.EndBatch(sctx); err != nil {
			c.log.WarnContext(ctx, "geodlq: ending a batch failed; its acknowledged messages may be delivered again", slog.Any("error", err))
		}
		cancel()
	}
	return results
}

func (c *Consumer) one(ctx context.Context, d *Delivery, h Handler) DeliveryResult {
	stop := c.extend(ctx, d)
	res, err := c.proc.Process(ctx, d.Message, h)
	stop()
	if c.o.OnResult != nil {
		c.o.OnResult(d, res, err)
	}
	out := DeliveryResult{Result: res, Err: err}
	if err == nil && res.Ack {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.SettleTimeout)
		out.SettleErr = c.src.Ack(sctx, d)
		cancel()
		out.Acked = out.SettleErr == nil
		if out.SettleErr != nil {
			c.log.WarnContext(ctx, "geodlq: acknowledging at the source failed; the message will be delivered again (its idempotency key absorbs the duplicate)",
				slog.String("idempotency_key", res.IdempotencyKey), slog.Any("error", out.SettleErr))
		}
		return out
	}
	c.log.WarnContext(ctx, "geodlq: message not acknowledged; the broker delivers it again",
		slog.String("idempotency_key", res.IdempotencyKey), slog.Any("error", err))
	out.SettleErr = c.nack(ctx, d)
	return out
}

func (c *Consumer) nack(ctx context.Context, d *Delivery) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.SettleTimeout)
	defer cancel()
	err := c.src.Nack(sctx, d, c.o.NackDelay)
	if err != nil {
		c.log.WarnContext(ctx, "geodlq: giving a message back failed; the broker redelivers it when its lease expires", slog.Any("error", err))
	}
	return err
}

// extend renews d's lease while it is processed, when the Source needs it.
func (c *Consumer) extend(ctx context.Context, d *Delivery) (stop func()) {
	ex, ok := c.src.(Extender)
	if !ok || ex.ExtendEvery() <= 0 {
		return func() {}
	}
	every := ex.ExtendEvery()
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ectx.Done():
				return
			case <-t.C:
				sctx, scancel := context.WithTimeout(ectx, c.o.SettleTimeout)
				if err := ex.Extend(sctx, d); err != nil && ectx.Err() == nil {
					c.log.WarnContext(ctx, "geodlq: extending a message's lease failed", slog.Any("error", err))
				}
				scancel()
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Close closes the consumer's Source; a Run in progress returns once its
// Source reports it closed. Close is idempotent.
func (c *Consumer) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	return c.src.Close()
}

// StoreSourceOptions configures [StoreSource].
type StoreSourceOptions struct {
	// Filter selects the records consumed. Zero: all.
	Filter Filter
	// PollInterval is how long Receive waits after finding nothing.
	// Default 1s.
	PollInterval time.Duration
}

// StoreSource returns a [Source] over one destination of a store: any
// store's records can feed a [Consumer] (PostGIS, SQLite, MySQL, Redis
// Streams and memory consumers are built on it). Deliveries are leased
// with Fetch, acknowledged with Ack and given back with Release; a Nack
// with a delay leaves the record leased, so the store redelivers it when
// its lease expires. Records with the same message key are processed in
// order. Closing the Source does not close the store.
func StoreSource(s *Store, destination string, opts *StoreSourceOptions) Source {
	var o StoreSourceOptions
	if opts != nil {
		o = *opts
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	return &storeSource{s: s, dest: destination, o: o}
}

type storeSource struct {
	s    *Store
	dest string
	o    StoreSourceOptions
}

func (ss *storeSource) Receive(ctx context.Context, n int) ([]*Delivery, error) {
	recs, err := ss.s.Fetch(ctx, ss.dest, ss.o.Filter, n)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, sleepCtx(ctx, ss.o.PollInterval)
	}
	ds := make([]*Delivery, 0, len(recs))
	for _, r := range recs {
		m := r.Message
		if m == nil {
			m = &Message{}
		}
		m.DeliveryAttempt = max(m.DeliveryAttempt, r.Deliveries)
		if m.Source == nil {
			m.Source = &envelope.Source{System: ss.s.Name(), Topic: ss.dest, MessageID: r.ID, DeliveryCount: r.Deliveries}
		}
		ds = append(ds, &Delivery{Message: m, OrderingKey: string(m.Key), Handle: r})
	}
	return ds, nil
}

func (ss *storeSource) Ack(ctx context.Context, d *Delivery) error {
	return ss.s.Ack(ctx, d.Handle.(*Record))
}

func (ss *storeSource) Nack(ctx context.Context, d *Delivery, delay time.Duration) error {
	if delay > 0 {
		return nil // left leased: redelivered when the lease expires
	}
	return ss.s.Release(ctx, d.Handle.(*Record))
}

func (ss *storeSource) Close() error { return nil }

// NewStoreConsumer returns a consumer of destination of store that
// processes with proc: [NewConsumer] over [StoreSource]. It is what the
// store adapters' NewConsumer functions (memory, sqlite, postgis, mysql,
// redisstream) are, with their argument checks written once: store must
// not be nil or read-only, destination must be valid, and so must
// src.Filter.
func NewStoreConsumer(store *Store, destination string, proc *Processor, opts *ConsumerOptions, src *StoreSourceOptions) (*Consumer, error) {
	if store == nil {
		return nil, fmt.Errorf("broker: NewStoreConsumer: nil store: %w", ErrInvalidArgument)
	}
	if store.ReadOnly() {
		return nil, fmt.Errorf("%s: consume %q: %w", store.Name(), destination, ErrReadOnly)
	}
	if err := ValidDestination(destination); err != nil {
		return nil, fmt.Errorf("%s: consume: %w", store.Name(), err)
	}
	if src != nil {
		if err := src.Filter.Validate(); err != nil {
			return nil, fmt.Errorf("%s: consume %q: %w", store.Name(), destination, err)
		}
	}
	return NewConsumer(StoreSource(store, destination, src), proc, opts)
}
