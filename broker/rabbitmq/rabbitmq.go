package rabbitmq

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// HeaderKey is the AMQP header carrying a message's ordering key, as a byte
// array, since AMQP messages have no key of their own. The store sets it
// and [MessageOf] reads it; it is not returned in Record.Message.Headers.
const HeaderKey = "x-geodlq-key"

// Defaults of [Options].
const (
	// DefaultExchange is Options.Exchange's default.
	DefaultExchange = "geodlq.dlq"
	// DefaultLeaseTTL is the default of Options.LeaseTTL, RabbitMQ's
	// consumer_timeout.
	DefaultLeaseTTL = 30 * time.Minute
)

const (
	// defaultMaxMessageBytes is RabbitMQ's max_message_size (134217728).
	defaultMaxMessageBytes = 128 << 20
	defaultPublishChannels = 8
	defaultTimeout         = 30 * time.Second
	// maxName is the longest queue name and routing key AMQP carries.
	maxName = 255
)

// ErrUnroutable is wrapped by Publish errors for a message the broker
// returned (basic.return) because no queue was bound for it.
var ErrUnroutable = errors.New("rabbitmq: message returned unroutable")

// ErrNacked is wrapped by Publish errors for a message the broker
// negatively confirmed (basic.nack): it was not stored.
var ErrNacked = errors.New("rabbitmq: message nacked by the broker")

// Options configures the store [New] returns. nil means all defaults.
type Options struct {
	// StoreOptions: LeaseTTL is how long a fetched record may stay
	// unacknowledged before the store gives it back (basic.nack with
	// requeue), like RabbitMQ's consumer_timeout but per record; default
	// 30 minutes (a closed channel or connection gives records back at
	// once). MaxMessageBytes defaults to 128 MiB, RabbitMQ's
	// max_message_size; set it to the server's if that was lowered.
	// WriteTimeout (30s) also bounds the waits for the broker of calls
	// whose context has no deadline. ReadOnly opens the store for reading:
	// New declares nothing, and the portable store refuses every write and
	// lease with an error wrapping broker.ErrReadOnly (the store cannot
	// list: see the package doc).
	broker.StoreOptions
	// Exchange is the durable direct exchange dead-letter messages are
	// published to, with the destination as routing key. Default
	// "geodlq.dlq".
	Exchange string
	// QueuePrefix is prepended to a destination to name its durable queue.
	// Default "": the queue is named like the destination.
	QueuePrefix string
	// QueueArgs are the x-arguments of the destination queues, for example
	// amqp.Table{"x-queue-type": "quorum"}. Default none (a classic queue).
	// They must match those of an existing queue, or the declaration fails
	// with PRECONDITION_FAILED.
	QueueArgs amqp.Table
	// PublishChannels is the most channels (in confirm mode) the store
	// publishes on at once. Default 8.
	PublishChannels int
	// Create declares the exchange when it is missing. Default false: New
	// fails with an error wrapping [broker.ErrNoStore] on a broker without
	// it, and declares nothing. (Destination queues are declared on first
	// use either way, unless StoreOptions.ReadOnly.)
	Create bool
}

// driver is the RabbitMQ [broker.Driver].
type driver struct {
	conn      *amqp.Connection
	ownsConn  bool
	exchange  string
	prefix    string
	queueArgs amqp.Table
	lease     time.Duration
	limit     int
	timeout   time.Duration
	log       *slog.Logger
	id        string // this handle, in leases

	declMu   sync.Mutex
	declared map[string]bool

	pubSlots chan struct{}
	pubMu    sync.Mutex
	pubIdle  []*pubChan

	mu     sync.Mutex // the fetch channel and its leases
	getCh  *amqp.Channel
	gen    uint64
	leases map[uint64]*held
	closed atomic.Bool
}

type pubChan struct {
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

type held struct {
	gen      uint64
	fetched  time.Time // when the Fetch that leased it began
	deadline time.Time
	timer    *time.Timer
}

// maxHold is how long after its Fetch a delivery may be held at most:
// RabbitMQ's consumer_timeout (30 minutes by default) closes a channel
// holding a delivery longer, requeueing every delivery on it, so renewals
// stop short of it (or of LeaseTTL, when that is longer: the server's
// timeout must then have been raised to match).
func (d *driver) maxHold() time.Duration { return max(d.lease, DefaultLeaseTTL) }

var (
	_ broker.Driver  = (*driver)(nil)
	_ broker.Limiter = (*driver)(nil)
	_ broker.Aser    = (*driver)(nil)
)

// New returns a dead-letter store on conn. The exchange must exist, as a
// durable direct exchange; with opts.Create New declares it when missing.
// A missing exchange, or one of another kind, is refused with an error
// wrapping [broker.ErrNoStore]. Queues are declared per destination on
// first use. The connection stays the caller's: closing the store closes
// only the store's channels.
func New(ctx context.Context, conn *amqp.Connection, opts *Options) (*broker.Store, error) {
	if conn == nil {
		return nil, fmt.Errorf("rabbitmq: nil connection: %w", broker.ErrInvalidArgument)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	d, err := newDriver(ctx, conn, &o)
	if err != nil {
		return nil, err
	}
	return broker.NewStore("rabbitmq", d, &o.StoreOptions), nil
}

func newDriver(ctx context.Context, conn *amqp.Connection, o *Options) (*driver, error) {
	if o.Exchange == "" {
		o.Exchange = DefaultExchange
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("rabbitmq: negative MaxMessageBytes %d: %w", o.MaxMessageBytes, broker.ErrInvalidArgument)
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = defaultMaxMessageBytes
	}
	if o.PublishChannels <= 0 {
		o.PublishChannels = defaultPublishChannels
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = defaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.Exchange) > maxName || len(o.QueuePrefix) >= maxName {
		return nil, fmt.Errorf("rabbitmq: exchange %q or queue prefix %q too long (AMQP names are at most %d bytes): %w", o.Exchange, o.QueuePrefix, maxName, broker.ErrInvalidArgument)
	}
	d := &driver{
		conn: conn, exchange: o.Exchange, prefix: o.QueuePrefix, queueArgs: o.QueueArgs,
		lease: o.LeaseTTL, limit: o.MaxMessageBytes, timeout: o.WriteTimeout, log: o.Logger,
		id: newID(), declared: map[string]bool{}, pubSlots: make(chan struct{}, o.PublishChannels),
		leases: map[uint64]*held{},
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := d.checkExchange(o.Create && !o.ReadOnly, o.ReadOnly); err != nil {
		return nil, err
	}
	return d, nil
}

// checkExchange finds the store's exchange: it declares it with create;
// otherwise it checks that it exists (passively) and, unless readOnly,
// that it is a durable direct exchange (a declaration of an existing
// exchange with its own arguments changes nothing).
func (d *driver) checkExchange(create, readOnly bool) error {
	declare := func(passive bool) error {
		ch, err := d.conn.Channel()
		if err != nil {
			return fmt.Errorf("rabbitmq: opening a channel: %w", err)
		}
		// A failed declaration closes the channel: a channel of its own.
		defer ch.Close()
		if passive {
			return ch.ExchangeDeclarePassive(d.exchange, amqp.ExchangeDirect, true, false, false, false, nil)
		}
		return ch.ExchangeDeclare(d.exchange, amqp.ExchangeDirect, true, false, false, false, nil)
	}
	if !create {
		err := declare(true)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return fmt.Errorf("rabbitmq: no exchange %q (declare it with Options.Create): %w: %w", d.exchange, err, broker.ErrNoStore)
		}
		if err != nil || readOnly {
			return wrapDeclare(d.exchange, err)
		}
	}
	return wrapDeclare(d.exchange, declare(false))
}

func wrapDeclare(exchange string, err error) error {
	var ae *amqp.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed:
		return fmt.Errorf("rabbitmq: exchange %q is not a durable direct exchange: %w: %w", exchange, err, broker.ErrNoStore)
	}
	return fmt.Errorf("rabbitmq: exchange %q: %w", exchange, err)
}

// queue returns the name of destination's queue.
func (d *driver) queue(destination string) string { return d.prefix + destination }

// driverOf returns the RabbitMQ driver under s, or nil.
func driverOf(s *broker.Store) *driver {
	if s == nil {
		return nil
	}
	d, _ := s.Driver().(*driver)
	return d
}

// Queue returns the name of the queue a store made by [New] keeps
// destination in (Options.QueuePrefix + destination), or "" for a store
// of another adapter.
func Queue(s *broker.Store, destination string) string {
	if d := driverOf(s); d != nil {
		return d.queue(destination)
	}
	return ""
}

// Declare declares, idempotently, destination's durable queue ([Queue])
// and its binding to the store's exchange, which the store otherwise does
// on its first Publish or Fetch of the destination: call it to have the
// queue (to watch it, or to give it a policy) before anything is
// dead-lettered. It fails with an error wrapping errors.ErrUnsupported on
// a store of another adapter and [broker.ErrReadOnly] on a read-only one.
func Declare(ctx context.Context, s *broker.Store, destination string) error {
	d := driverOf(s)
	switch {
	case d == nil:
		return fmt.Errorf("rabbitmq: Declare on a store that is not a RabbitMQ store: %w", errors.ErrUnsupported)
	case s.ReadOnly():
		return fmt.Errorf("rabbitmq: declare: %w", broker.ErrReadOnly)
	}
	if err := broker.ValidDestination(destination); err != nil {
		return fmt.Errorf("rabbitmq: declare: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.declare(destination)
}

// As implements [broker.Aser]: target may be a **amqp.Connection.
func (d *driver) As(target any) bool {
	if p, ok := target.(**amqp.Connection); ok {
		*p = d.conn
		return true
	}
	return false
}

// MaxMessageBytes implements [broker.Limiter].
func (d *driver) MaxMessageBytes(string) int { return d.limit }

// declare declares destination's topology, idempotently: the durable queue
// (with Options.QueueArgs) bound to the exchange with the destination as
// routing key. Publish and Fetch call it on first use of a destination.
func (d *driver) declare(destination string) error {
	if len(destination) > maxName || len(d.queue(destination)) > maxName {
		return fmt.Errorf("rabbitmq: destination %q: queue names and routing keys are at most %d bytes: %w", destination, maxName, broker.ErrInvalidArgument)
	}
	d.declMu.Lock()
	defer d.declMu.Unlock()
	if d.declared[destination] {
		return nil
	}
	ch, err := d.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	defer ch.Close()
	q := d.queue(destination)
	if _, err := ch.QueueDeclare(q, true, false, false, false, d.queueArgs); err != nil {
		return fmt.Errorf("rabbitmq: declaring queue %q: %w", q, err)
	}
	if err := ch.QueueBind(q, destination, d.exchange, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: binding queue %q to %q: %w", q, d.exchange, err)
	}
	d.declared[destination] = true
	return nil
}

func (d *driver) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d.timeout)
}

// Publish publishes m to the exchange with destination as routing key,
// persistent and mandatory, on a channel in confirm mode, and returns once
// the broker confirmed it (for a durable queue: written to disk, or to a
// quorum of replicas). A message the broker returns (no queue bound) fails
// with [ErrUnroutable], one it nacks with [ErrNacked].
//
// The body is published as is; string headers are carried as AMQP headers
// and the key as the byte-array header [HeaderKey]. The message gets a
// fresh message_id, which becomes the record's ID.
func (d *driver) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if err := d.declare(destination); err != nil {
		return err
	}
	return d.publish(ctx, d.exchange, destination, m)
}

// publish publishes m to exchange with routing key key on a confirm
// channel of the pool, as Publish describes.
func (d *driver) publish(ctx context.Context, exchange, key string, m *broker.Message) error {
	destination := key
	pub := amqp.Publishing{
		Headers:      amqp.Table{},
		DeliveryMode: amqp.Persistent,
		MessageId:    newID(),
		Timestamp:    time.Now().UTC(),
		Body:         m.Body,
	}
	for k, v := range m.Headers {
		if k != HeaderKey {
			pub.Headers[k] = v
		}
	}
	if m.Key != nil {
		pub.Headers[HeaderKey] = append([]byte{}, m.Key...)
	}
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	pc, err := d.takePub(ctx)
	if err != nil {
		return err
	}
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, pub)
	if err != nil {
		d.dropPub(pc)
		return fmt.Errorf("rabbitmq: publishing to %q: %w", destination, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		// The confirm may still come, with a return before it: this channel
		// can no longer tell whose it is.
		d.dropPub(pc)
		return fmt.Errorf("rabbitmq: waiting for the confirm of a message to %q (it may or may not be stored): %w: %w", destination, broker.ErrOutcomeUnknown, err)
	}
	// A basic.return precedes the basic.ack of the same message on the
	// channel, and the client hands it over before it resolves the
	// confirm: it is in the buffer now if there is one.
	select {
	case r := <-pc.returns:
		d.givePub(pc)
		return fmt.Errorf("rabbitmq: publishing to %q: %d %s: %w", destination, r.ReplyCode, r.ReplyText, ErrUnroutable)
	default:
	}
	if !ok {
		var cerr *amqp.Error
		select {
		case cerr = <-pc.closes:
		default:
		}
		d.dropPub(pc)
		if cerr != nil && cerr.Code == amqp.PreconditionFailed && strings.Contains(cerr.Reason, "max size") {
			return fmt.Errorf("rabbitmq: %s: %w", cerr.Reason, &classify.TooLargeError{What: "message", Destination: destination, Size: len(m.Body), Limit: d.limit})
		}
		if cerr != nil {
			return fmt.Errorf("rabbitmq: publishing to %q: channel closed: %w: %w", destination, cerr, ErrNacked)
		}
		return fmt.Errorf("rabbitmq: publishing to %q: %w", destination, ErrNacked)
	}
	d.givePub(pc)
	return nil
}

// takePub returns an idle publishing channel or opens one, waiting while
// PublishChannels are in use.
func (d *driver) takePub(ctx context.Context) (*pubChan, error) {
	select {
	case d.pubSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d.pubMu.Lock()
	for len(d.pubIdle) > 0 {
		pc := d.pubIdle[len(d.pubIdle)-1]
		d.pubIdle = d.pubIdle[:len(d.pubIdle)-1]
		if !pc.ch.IsClosed() {
			d.pubMu.Unlock()
			return pc, nil
		}
	}
	d.pubMu.Unlock()
	ch, err := d.conn.Channel()
	if err != nil {
		<-d.pubSlots
		return nil, fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		<-d.pubSlots
		return nil, fmt.Errorf("rabbitmq: enabling publisher confirms: %w", err)
	}
	return &pubChan{
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 1)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

func (d *driver) givePub(pc *pubChan) {
	d.pubMu.Lock()
	if d.closed.Load() || pc.ch.IsClosed() {
		d.pubMu.Unlock()
		_ = pc.ch.Close()
	} else {
		d.pubIdle = append(d.pubIdle, pc)
		d.pubMu.Unlock()
	}
	<-d.pubSlots
}

func (d *driver) dropPub(pc *pubChan) {
	_ = pc.ch.Close()
	<-d.pubSlots
}

// fetchChannel returns the channel records are leased on, opening one when
// there is none. d.mu is held.
func (d *driver) fetchChannel() (*amqp.Channel, uint64, error) {
	if d.getCh != nil && !d.getCh.IsClosed() {
		return d.getCh, d.gen, nil
	}
	d.dropLeases()
	ch, err := d.conn.Channel()
	if err != nil {
		return nil, 0, fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	d.gen++
	d.getCh = ch
	gen := d.gen
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		e, ok := <-closes
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gen == gen && d.getCh == ch {
			if ok && e != nil {
				d.log.Warn("geodlq: rabbitmq fetch channel closed; its deliveries are requeued by the broker", slog.Any("error", e))
			}
			d.getCh = nil
			d.dropLeases()
		}
	}()
	return ch, gen, nil
}

// dropLeases forgets every lease: their channel is gone and the broker
// requeued the deliveries. d.mu is held.
func (d *driver) dropLeases() {
	for tag, h := range d.leases {
		h.timer.Stop()
		delete(d.leases, tag)
	}
}

// Fetch leases up to max records of destination matching f, oldest first,
// with basic.get (manual acknowledgement) on this handle's channel: a
// lease is an unacknowledged delivery on that channel. It lasts until Ack
// or Release, until LeaseTTL passes (the store then requeues it), or until
// the channel or connection closes (the broker then requeues it).
//
// Filters are applied here with [broker.Filter.MatchRecord]: records that
// do not match are held while the scan goes on and requeued before Fetch
// returns.
func (d *driver) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	if err := d.declare(destination); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ch, gen, err := d.fetchChannel()
	if err != nil {
		return nil, err
	}
	queue := d.queue(destination)
	filtered := !f.IsZero()
	byEnvelope := f
	byEnvelope.IDs = nil
	decode := !byEnvelope.IsZero()
	fetched := time.Now()
	deadline := fetched.Add(d.lease)
	var out []*broker.Record
	var keptTags, skipped []uint64
	requeue := func(tags []uint64) error {
		for _, tag := range tags {
			if err := ch.Nack(tag, false, true); err != nil {
				return err
			}
		}
		return nil
	}
	fail := func(err error) ([]*broker.Record, error) {
		for _, tag := range keptTags {
			if h := d.leases[tag]; h != nil {
				h.timer.Stop()
				delete(d.leases, tag)
			}
		}
		_ = requeue(keptTags)
		_ = requeue(skipped)
		return nil, err
	}
	for len(out) < max {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		dv, ok, err := ch.Get(queue, false)
		if err != nil {
			return fail(fmt.Errorf("rabbitmq: basic.get from %q: %w", queue, err))
		}
		if !ok {
			break
		}
		rec := record(destination, dv)
		if decode {
			if env, err := envelope.Decode(dv.Body); err == nil {
				rec.Envelope = env
			}
		}
		if filtered && !f.MatchRecord(rec) {
			skipped = append(skipped, dv.DeliveryTag)
			continue
		}
		tag := dv.DeliveryTag
		rec.Lease = d.id + "/" + strconv.FormatUint(gen, 10) + "/" + strconv.FormatUint(tag, 10)
		rec.LeaseExpires = deadline
		d.leases[tag] = &held{gen: gen, fetched: fetched, deadline: deadline, timer: time.AfterFunc(time.Until(deadline), func() { d.expire(gen, tag) })}
		keptTags = append(keptTags, tag)
		out = append(out, rec)
	}
	if len(skipped) > 0 {
		if err := requeue(skipped); err != nil {
			return fail(fmt.Errorf("rabbitmq: requeueing records a filter passed over: %w", err))
		}
		// A synchronous method after the nacks: the channel processed them
		// when it answers, so the next fetch sees the records again.
		if err := ch.Qos(0, 0, false); err != nil {
			return fail(fmt.Errorf("rabbitmq: requeueing records a filter passed over: %w", err))
		}
	}
	return out, nil
}

// record converts a delivery of a store queue. The ID is the message_id
// the store set at publish time, or, for messages published by others
// without one (a broker dead-letter exchange routing into the queue), a
// hash of the body and x-death.
func record(destination string, dv amqp.Delivery) *broker.Record {
	m := MessageOf(dv, "")
	m.Source = nil
	id := dv.MessageId
	if id == "" {
		h := sha256.New()
		h.Write(dv.Body)
		fmt.Fprintf(h, "%v", dv.Headers["x-death"])
		id = "sha256:" + hex.EncodeToString(h.Sum(nil)[:16])
	}
	deliveries := 0
	if n, ok := deliveryCount(dv.Headers); ok {
		deliveries = n + 1
	}
	m.DeliveryAttempt = deliveries
	return &broker.Record{ID: id, Destination: destination, Message: m, Deliveries: deliveries}
}

// expire gives back a lease that outlived LeaseTTL.
func (d *driver) expire(gen, tag uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.leases[tag]
	if h == nil || h.gen != gen {
		return
	}
	delete(d.leases, tag)
	if d.getCh != nil && d.gen == gen {
		if err := d.getCh.Nack(tag, false, true); err != nil {
			d.log.Warn("geodlq: requeueing an expired lease failed; the broker requeues it when the channel closes", slog.Any("error", err))
		}
	}
}

// Ack acknowledges r (basic.ack) and waits for the channel to have
// processed it. It fails with [broker.ErrLeaseLost] when r was fetched by
// another handle — an AMQP delivery tag belongs to the channel that
// received it, so only the fetching handle can settle it — or when r's
// lease ended: settled already, expired after LeaseTTL, or its channel
// closed.
func (d *driver) Ack(ctx context.Context, r *broker.Record) error {
	return d.settle(ctx, r, true)
}

// Release gives r back at once (basic.nack with requeue). It fails like
// Ack on a lost lease.
func (d *driver) Release(ctx context.Context, r *broker.Record) error {
	return d.settle(ctx, r, false)
}

// Renew moves r's lease deadline (the store's own, which requeues the
// delivery when it passes) to LeaseTTL from now. The delivery stays
// unacknowledged on this handle's channel, which the broker keeps from
// every other consumer while the channel lives. It fails with
// [broker.ErrLeaseLost] like Ack: another handle's record, a lease that
// ended. The deadline never moves past RabbitMQ's consumer_timeout (30
// minutes, or LeaseTTL if longer) after the Fetch, when the broker would
// close the channel and requeue the record: a renewal near it leaves
// the deadline there.
func (d *driver) Renew(_ context.Context, r *broker.Record) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, tag, err := d.leased(r)
	if err != nil {
		return err
	}
	now := time.Now()
	if !now.Before(h.deadline) {
		return fmt.Errorf("rabbitmq: record %s/%s: lease expired: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	// Never past the broker's consumer_timeout: there the lease stops
	// moving, and ends.
	until := now.Add(d.lease)
	if limit := h.fetched.Add(d.maxHold()); until.After(limit) {
		until = limit
	}
	gen := h.gen
	h.timer.Stop()
	h.deadline = until
	h.timer = time.AfterFunc(time.Until(until), func() { d.expire(gen, tag) })
	r.LeaseExpires = until
	return nil
}

// leased returns the lease r holds on this handle and its delivery tag,
// or an error wrapping [broker.ErrLeaseLost]. d.mu is held.
func (d *driver) leased(r *broker.Record) (*held, uint64, error) {
	lost := func(why string) error {
		return fmt.Errorf("rabbitmq: record %s/%s: %s: %w", r.Destination, r.ID, why, broker.ErrLeaseLost)
	}
	parts := strings.Split(r.Lease, "/")
	if len(parts) != 3 {
		return nil, 0, lost("no lease from this adapter")
	}
	if parts[0] != d.id {
		return nil, 0, lost("leased through another handle (a delivery tag belongs to its channel)")
	}
	gen, err1 := strconv.ParseUint(parts[1], 10, 64)
	tag, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return nil, 0, lost("malformed lease")
	}
	h := d.leases[tag]
	if h == nil || h.gen != gen || d.gen != gen || d.getCh == nil {
		return nil, 0, lost("lease ended (settled, expired after the lease TTL, or its channel closed)")
	}
	return h, tag, nil
}

func (d *driver) settle(_ context.Context, r *broker.Record, ack bool) error {
	lost := func(why string) error {
		return fmt.Errorf("rabbitmq: record %s/%s: %s: %w", r.Destination, r.ID, why, broker.ErrLeaseLost)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	h, tag, err := d.leased(r)
	if err != nil {
		return err
	}
	delete(d.leases, tag)
	h.timer.Stop()
	ch := d.getCh
	if !time.Now().Before(h.deadline) {
		_ = ch.Nack(tag, false, true)
		return lost("lease expired")
	}
	if ack {
		err = ch.Ack(tag, false)
	} else {
		err = ch.Nack(tag, false, true)
	}
	if err == nil {
		// A synchronous round trip on the same channel: when it returns,
		// the broker has processed the ack.
		err = ch.Qos(0, 0, false)
	}
	if err != nil {
		return fmt.Errorf("rabbitmq: settling record %s/%s: %w", r.Destination, r.ID, err)
	}
	return nil
}

// Close closes the store's channels — the broker requeues every record the
// store still leases — and the connection when the store's opener made it.
func (d *driver) Close() error {
	d.closed.Store(true)
	d.mu.Lock()
	d.dropLeases()
	ch := d.getCh
	d.getCh = nil
	d.mu.Unlock()
	if ch != nil {
		_ = ch.Close()
	}
	d.pubMu.Lock()
	idle := d.pubIdle
	d.pubIdle = nil
	d.pubMu.Unlock()
	for _, pc := range idle {
		_ = pc.ch.Close()
	}
	if d.ownsConn {
		return d.conn.Close()
	}
	return nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
