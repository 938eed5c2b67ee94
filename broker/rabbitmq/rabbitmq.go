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
// array, since AMQP messages have no key of their own. It is not returned
// in Record.Message.Headers.
const HeaderKey = "x-geodlq-key"

// Defaults of [Options].
const (
	// DefaultExchange is Options.Exchange's default.
	DefaultExchange = "geodlq.dlq"
	// DefaultLeaseTTL is Options.LeaseTTL's default, RabbitMQ's
	// consumer_timeout.
	DefaultLeaseTTL = 30 * time.Minute
	// DefaultMaxMessageBytes is Options.MaxMessageBytes's default,
	// RabbitMQ's max_message_size (134217728).
	DefaultMaxMessageBytes = 128 << 20
	// DefaultPublishChannels is Options.PublishChannels's default.
	DefaultPublishChannels = 8
	// DefaultTimeout is Options.Timeout's default.
	DefaultTimeout = 30 * time.Second
)

// ErrUnroutable is wrapped by Publish errors for a message the broker
// returned (basic.return) because no queue was bound for it.
var ErrUnroutable = errors.New("rabbitmq: message returned unroutable")

// ErrNacked is wrapped by Publish errors for a message the broker
// negatively confirmed (basic.nack): it was not stored.
var ErrNacked = errors.New("rabbitmq: message nacked by the broker")

// Options configures a [Store]. nil means all defaults.
type Options struct {
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
	// LeaseTTL is how long a fetched record may stay unacknowledged before
	// the store gives it back (basic.nack with requeue), like RabbitMQ's
	// consumer_timeout (30 minutes by default) but per record. A closed
	// channel or connection gives records back at once. Default 30m.
	LeaseTTL time.Duration
	// MaxMessageBytes refuses larger bodies with [classify.TooLargeError]
	// before publishing. Default 128 MiB, RabbitMQ's max_message_size.
	MaxMessageBytes int
	// PublishChannels is the most channels (in confirm mode) the store
	// publishes on at once. Default 8.
	PublishChannels int
	// Timeout bounds waits for the broker (confirms, declarations) when the
	// context has no deadline. Default 30s.
	Timeout time.Duration
	// Logger receives warnings (a failed requeue, a lost channel). Nil
	// discards.
	Logger *slog.Logger
}

// Store is a dead-letter store in RabbitMQ queues: a [broker.Publisher],
// [broker.DeadLetterSource] and [broker.Limiter] on the caller's
// connection. It is safe for concurrent use.
type Store struct {
	conn      *amqp.Connection
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
	deadline time.Time
	timer    *time.Timer
}

var (
	_ broker.Publisher        = (*Store)(nil)
	_ broker.DeadLetterSource = (*Store)(nil)
	_ broker.Limiter          = (*Store)(nil)
)

// New returns a store on conn and declares its exchange. Queues are
// declared per destination on first use (see [Store.Declare]). The
// connection stays the caller's: [Store.Close] closes only the store's
// channels.
func New(ctx context.Context, conn *amqp.Connection, opts *Options) (*Store, error) {
	if conn == nil {
		return nil, errors.New("rabbitmq: nil connection")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Exchange == "" {
		o.Exchange = DefaultExchange
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.PublishChannels <= 0 {
		o.PublishChannels = DefaultPublishChannels
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		conn: conn, exchange: o.Exchange, prefix: o.QueuePrefix, queueArgs: o.QueueArgs,
		lease: o.LeaseTTL, limit: o.MaxMessageBytes, timeout: o.Timeout, log: o.Logger,
		id: newID(), declared: map[string]bool{}, pubSlots: make(chan struct{}, o.PublishChannels),
		leases: map[uint64]*held{},
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(s.exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("rabbitmq: declaring exchange %q: %w", s.exchange, err)
	}
	return s, nil
}

// Queue returns the name of destination's queue.
func (s *Store) Queue(destination string) string { return s.prefix + destination }

// Exchange returns the exchange the store publishes to.
func (s *Store) Exchange() string { return s.exchange }

// Connection returns the connection the store was made with.
func (s *Store) Connection() *amqp.Connection { return s.conn }

// As gives access to the underlying client: i may be a **amqp.Connection.
// It reports whether i was set.
func (s *Store) As(i any) bool {
	if p, ok := i.(**amqp.Connection); ok {
		*p = s.conn
		return true
	}
	return false
}

// MaxMessageBytes implements [broker.Limiter].
func (s *Store) MaxMessageBytes(string) int { return s.limit }

// Declare declares destination's topology, idempotently: the durable queue
// [Store.Queue] (with Options.QueueArgs) bound to the exchange with the
// destination as routing key. Publish and Fetch call it on first use of a
// destination; call it ahead to create the queue before anything is
// dead-lettered.
func (s *Store) Declare(ctx context.Context, destination string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if destination == "" || len(destination) > 255 || len(s.Queue(destination)) > 255 {
		return fmt.Errorf("rabbitmq: destination %q: queue names and routing keys are 1 to 255 bytes", destination)
	}
	s.declMu.Lock()
	defer s.declMu.Unlock()
	if s.declared[destination] {
		return nil
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	defer ch.Close()
	q := s.Queue(destination)
	if _, err := ch.QueueDeclare(q, true, false, false, false, s.queueArgs); err != nil {
		return fmt.Errorf("rabbitmq: declaring queue %q: %w", q, err)
	}
	if err := ch.QueueBind(q, destination, s.exchange, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: binding queue %q to %q: %w", q, s.exchange, err)
	}
	s.declared[destination] = true
	return nil
}

func (s *Store) isClosed() bool { return s.closed.Load() }

func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
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
func (s *Store) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m == nil {
		return errors.New("rabbitmq: nil message")
	}
	if s.isClosed() {
		return broker.ErrClosed
	}
	if len(m.Body) > s.limit {
		return &classify.TooLargeError{Destination: destination, Size: len(m.Body), Limit: s.limit}
	}
	if err := s.Declare(ctx, destination); err != nil {
		return err
	}
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
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	pc, err := s.takePub(ctx)
	if err != nil {
		return err
	}
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, s.exchange, destination, true, false, pub)
	if err != nil {
		s.dropPub(pc)
		return fmt.Errorf("rabbitmq: publishing to %q: %w", destination, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		// The confirm may still come, with a return before it: this channel
		// can no longer tell whose it is.
		s.dropPub(pc)
		return fmt.Errorf("rabbitmq: waiting for the confirm of a message to %q (it may or may not be stored): %w", destination, err)
	}
	// A basic.return precedes the basic.ack of the same message on the
	// channel, and the client hands it over before it resolves the
	// confirm: it is in the buffer now if there is one.
	select {
	case r := <-pc.returns:
		s.givePub(pc)
		return fmt.Errorf("rabbitmq: publishing to %q: %d %s: %w", destination, r.ReplyCode, r.ReplyText, ErrUnroutable)
	default:
	}
	if !ok {
		var cerr *amqp.Error
		select {
		case cerr = <-pc.closes:
		default:
		}
		s.dropPub(pc)
		if cerr != nil && cerr.Code == amqp.PreconditionFailed && strings.Contains(cerr.Reason, "max size") {
			return fmt.Errorf("rabbitmq: %s: %w", cerr.Reason, &classify.TooLargeError{Destination: destination, Size: len(m.Body), Limit: s.limit})
		}
		if cerr != nil {
			return fmt.Errorf("rabbitmq: publishing to %q: channel closed: %w: %w", destination, cerr, ErrNacked)
		}
		return fmt.Errorf("rabbitmq: publishing to %q: %w", destination, ErrNacked)
	}
	s.givePub(pc)
	return nil
}

// takePub returns an idle publishing channel or opens one, waiting while
// PublishChannels are in use.
func (s *Store) takePub(ctx context.Context) (*pubChan, error) {
	select {
	case s.pubSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.pubMu.Lock()
	for len(s.pubIdle) > 0 {
		pc := s.pubIdle[len(s.pubIdle)-1]
		s.pubIdle = s.pubIdle[:len(s.pubIdle)-1]
		if !pc.ch.IsClosed() {
			s.pubMu.Unlock()
			return pc, nil
		}
	}
	s.pubMu.Unlock()
	ch, err := s.conn.Channel()
	if err != nil {
		<-s.pubSlots
		return nil, fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		<-s.pubSlots
		return nil, fmt.Errorf("rabbitmq: enabling publisher confirms: %w", err)
	}
	return &pubChan{
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 1)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

func (s *Store) givePub(pc *pubChan) {
	s.pubMu.Lock()
	if s.closed.Load() || pc.ch.IsClosed() {
		s.pubMu.Unlock()
		_ = pc.ch.Close()
	} else {
		s.pubIdle = append(s.pubIdle, pc)
		s.pubMu.Unlock()
	}
	<-s.pubSlots
}

func (s *Store) dropPub(pc *pubChan) {
	_ = pc.ch.Close()
	<-s.pubSlots
}

// fetchChannel returns the channel records are leased on, opening one when
// there is none. s.mu is held.
func (s *Store) fetchChannel() (*amqp.Channel, uint64, error) {
	if s.getCh != nil && !s.getCh.IsClosed() {
		return s.getCh, s.gen, nil
	}
	s.dropLeases()
	ch, err := s.conn.Channel()
	if err != nil {
		return nil, 0, fmt.Errorf("rabbitmq: opening a channel: %w", err)
	}
	s.gen++
	s.getCh = ch
	gen := s.gen
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		e, ok := <-closes
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.gen == gen && s.getCh == ch {
			if ok && e != nil {
				s.log.Warn("geodlq: rabbitmq fetch channel closed; its deliveries are requeued by the broker", slog.Any("error", e))
			}
			s.getCh = nil
			s.dropLeases()
		}
	}()
	return ch, gen, nil
}

// dropLeases forgets every lease: their channel is gone and the broker
// requeued the deliveries. s.mu is held.
func (s *Store) dropLeases() {
	for tag, h := range s.leases {
		h.timer.Stop()
		delete(s.leases, tag)
	}
}

// Fetch leases up to max records of destination matching f, oldest first,
// with basic.get (manual acknowledgement) on this handle's channel: a
// lease is an unacknowledged delivery on that channel. It lasts until Ack
// or Release, until LeaseTTL passes (the store then requeues it), or until
// the channel or connection closes (the broker then requeues it).
//
// Filters are applied here with [broker.Filter.Match]: records that do not
// match are held while the scan goes on and requeued before Fetch returns.
func (s *Store) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, broker.ErrClosed
	}
	if max <= 0 {
		return nil, nil
	}
	if err := s.Declare(ctx, destination); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, broker.ErrClosed
	}
	ch, gen, err := s.fetchChannel()
	if err != nil {
		return nil, err
	}
	queue := s.Queue(destination)
	filtered := !f.IsZero()
	deadline := time.Now().Add(s.lease)
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
			if h := s.leases[tag]; h != nil {
				h.timer.Stop()
				delete(s.leases, tag)
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
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return fail(fmt.Errorf("rabbitmq: basic.get from %q: %w", queue, err))
		}
		if !ok {
			break
		}
		rec := record(destination, d)
		if filtered {
			env, err := envelope.Decode(d.Body)
			if err != nil || !f.Match(env) {
				skipped = append(skipped, d.DeliveryTag)
				continue
			}
			rec.Envelope = env
		}
		tag := d.DeliveryTag
		rec.Lease = s.id + "/" + strconv.FormatUint(gen, 10) + "/" + strconv.FormatUint(tag, 10)
		s.leases[tag] = &held{gen: gen, deadline: deadline, timer: time.AfterFunc(time.Until(deadline), func() { s.expire(gen, tag) })}
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

// record converts a delivery. The ID is the message_id the store set at
// publish time, or, for messages published by others without one (a
// broker dead-letter exchange routing into the queue), a hash of the body
// and headers.
func record(destination string, d amqp.Delivery) *broker.Record {
	m := MessageFromDelivery(d, "")
	m.Source = nil
	id := d.MessageId
	if id == "" {
		h := sha256.New()
		h.Write(d.Body)
		fmt.Fprintf(h, "%v", d.Headers["x-death"])
		id = "sha256:" + hex.EncodeToString(h.Sum(nil)[:16])
	}
	deliveries := 0
	if n, ok := deliveryCount(d.Headers); ok {
		deliveries = n + 1
	}
	m.DeliveryAttempt = deliveries
	return &broker.Record{ID: id, Destination: destination, Message: m, Deliveries: deliveries}
}

// expire gives back a lease that outlived LeaseTTL.
func (s *Store) expire(gen, tag uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.leases[tag]
	if h == nil || h.gen != gen {
		return
	}
	delete(s.leases, tag)
	if s.getCh != nil && s.gen == gen {
		if err := s.getCh.Nack(tag, false, true); err != nil {
			s.log.Warn("geodlq: requeueing an expired lease failed; the broker requeues it when the channel closes", slog.Any("error", err))
		}
	}
}

// Ack acknowledges r (basic.ack) and waits for the channel to have
// processed it. It fails with [broker.ErrLeaseLost] when r was fetched by
// another handle — an AMQP delivery tag belongs to the channel that
// received it, so only the fetching handle can settle it — or when r's
// lease ended: settled already, expired after LeaseTTL, or its channel
// closed.
func (s *Store) Ack(ctx context.Context, r *broker.Record) error {
	return s.settle(ctx, r, true)
}

// Release gives r back at once (basic.nack with requeue). It fails like
// Ack on a lost lease.
func (s *Store) Release(ctx context.Context, r *broker.Record) error {
	return s.settle(ctx, r, false)
}

func (s *Store) settle(ctx context.Context, r *broker.Record, ack bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r == nil {
		return errors.New("rabbitmq: nil record")
	}
	lost := func(why string) error {
		return fmt.Errorf("rabbitmq: record %s/%s: %s: %w", r.Destination, r.ID, why, broker.ErrLeaseLost)
	}
	parts := strings.Split(r.Lease, "/")
	if len(parts) != 3 {
		return lost("no lease from this adapter")
	}
	if parts[0] != s.id {
		return lost("leased through another handle (a delivery tag belongs to its channel)")
	}
	gen, err1 := strconv.ParseUint(parts[1], 10, 64)
	tag, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return lost("malformed lease")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return broker.ErrClosed
	}
	h := s.leases[tag]
	if h == nil || h.gen != gen || s.gen != gen || s.getCh == nil {
		return lost("lease ended (settled, expired after the lease TTL, or its channel closed)")
	}
	delete(s.leases, tag)
	h.timer.Stop()
	ch := s.getCh
	if !time.Now().Before(h.deadline) {
		_ = ch.Nack(tag, false, true)
		return lost("lease expired")
	}
	var err error
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
// store still leases — and makes later operations fail with
// [broker.ErrClosed]. It does not close the connection.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.mu.Lock()
	s.dropLeases()
	ch := s.getCh
	s.getCh = nil
	s.mu.Unlock()
	if ch != nil {
		_ = ch.Close()
	}
	s.pubMu.Lock()
	idle := s.pubIdle
	s.pubIdle = nil
	s.pubMu.Unlock()
	for _, pc := range idle {
		_ = pc.ch.Close()
	}
	return nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
