package servicebus

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// sender is the part of *azservicebus.Sender the adapter uses.
type sender interface {
	SendMessage(ctx context.Context, message *azservicebus.Message, options *azservicebus.SendMessageOptions) error
	Close(ctx context.Context) error
}

// Receiver is the part of *azservicebus.Receiver the adapter uses; pass
// the receiver itself (the interface lets tests stand in for it). It must
// be in PeekLock mode (the SDK's default).
type Receiver interface {
	ReceiveMessages(ctx context.Context, maxMessages int, options *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	CompleteMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.CompleteMessageOptions) error
	AbandonMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.AbandonMessageOptions) error
	DeadLetterMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.DeadLetterOptions) error
	RenewMessageLock(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.RenewMessageLockOptions) error
	Close(ctx context.Context) error
}

var (
	_ sender   = (*azservicebus.Sender)(nil)
	_ Receiver = (*azservicebus.Receiver)(nil)
)

// connector opens senders and receivers for queues.
type connector interface {
	// sender returns a sender for queue.
	Sender(queue string) (sender, error)
	// Receiver returns a PeekLock receiver for queue, or for its
	// dead-letter sub-queue when deadLetter is true.
	Receiver(queue string, deadLetter bool) (Receiver, error)
}

type clientConnector struct{ c *azservicebus.Client }

func (cc clientConnector) Sender(queue string) (sender, error) { return cc.c.NewSender(queue, nil) }

func (cc clientConnector) Receiver(queue string, deadLetter bool) (Receiver, error) {
	o := &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModePeekLock}
	if deadLetter {
		o.SubQueue = azservicebus.SubQueueDeadLetter
	}
	return cc.c.NewReceiverForQueue(queue, o)
}

// Limits and defaults (documented in numbers on the options).
const (
	defaultMaxMessageBytes = 256 << 10 // the Standard tier's limit
	defaultHeaderBudget    = 8 << 10
	defaultReceiveWait     = time.Second
	defaultFilterScanLimit = 10_000
	// deadLetterSuffix names a queue's dead-letter sub-queue as a
	// destination: "vector-jobs/$DeadLetterQueue".
	deadLetterSuffix = "/$DeadLetterQueue"
)

// Application properties the adapter sets besides the headers.
const (
	// HeaderKey is the application property that carries a message's
	// ordering key, base64.
	HeaderKey = "geodlq-key"
	// HeaderEnvelope is the application property that carries the dlq.v1
	// envelope of a message a [DeadLetterer] dead-lettered into its
	// queue's $DeadLetterQueue sub-queue (whose body stays the original
	// payload).
	HeaderEnvelope = "geodlq-envelope"
)

// DeadLetterQueue returns the destination naming queue's dead-letter
// sub-queue, "<queue>/$DeadLetterQueue".
func DeadLetterQueue(queue string) string { return queue + deadLetterSuffix }

func splitDest(dest string) (queue string, deadLetter bool) {
	if i := strings.LastIndex(dest, "/"); i >= 0 && strings.EqualFold(dest[i:], deadLetterSuffix) {
		return dest[:i], true
	}
	return dest, false
}

// Options configures [New]. The zero value and nil are valid.
type Options struct {
	// StoreOptions: LeaseTTL does not apply — a lease is the message
	// lock, whose length is the queue's LockDuration (Service Bus's
	// default 60s; see [QueueConfig]), set on the queue, not per receive.
	// MaxMessageBytes is the entities' message size limit: default
	// 262,144 (the Standard tier's 256 KiB); on Premium, the queue's
	// MaxMessageSizeInKilobytes × 1024.
	broker.StoreOptions
	// HeaderBudget is the part of MaxMessageBytes kept for properties:
	// the body may use MaxMessageBytes − HeaderBudget, the limit the store
	// reports (broker.Limiter). Default 8,192 bytes.
	HeaderBudget int
	// ReceiveWait bounds how long Fetch waits for a first message
	// (ReceiveMessages blocks until one arrives). Default 1s.
	ReceiveWait time.Duration
	// FilterScanLimit bounds how many messages a filtered Fetch receives
	// while looking for matches. Default 10,000.
	FilterScanLimit int
}

// driver is the Service Bus [broker.Driver]. It is safe for concurrent
// use.
type driver struct {
	conn   connector
	client *azservicebus.Client // nil in tests
	opts   Options
	log    *slog.Logger
	seq    atomic.Uint64

	mu        sync.Mutex
	senders   map[string]sender
	receivers map[string]Receiver
	leased    map[string]leased // lease → the received message, for settling
}

var (
	_ broker.Driver  = (*driver)(nil)
	_ broker.Limiter = (*driver)(nil)
	_ broker.Aser    = (*driver)(nil)
)

type leased struct {
	recv Receiver
	msg  *azservicebus.ReceivedMessage
}

// New returns a dead-letter store on the queues of client's namespace.
// New makes no request; closing the store closes the senders and
// receivers it opened, not client. Options are checked: an impossible
// value is an error wrapping broker.ErrInvalidArgument.
func New(ctx context.Context, client *azservicebus.Client, opts *Options) (*broker.Store, error) {
	if client == nil {
		return nil, fmt.Errorf("servicebus: New: nil client: %w", broker.ErrInvalidArgument)
	}
	d, err := newDriver(clientConnector{client}, opts)
	if err != nil {
		return nil, err
	}
	d.client = client
	return broker.NewStore("servicebus", d, &d.opts.StoreOptions), nil
}

func newDriver(conn connector, opts *Options) (*driver, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = defaultMaxMessageBytes
	}
	if o.HeaderBudget == 0 {
		o.HeaderBudget = defaultHeaderBudget
	}
	if o.MaxMessageBytes < 0 || o.HeaderBudget < 0 || o.HeaderBudget >= o.MaxMessageBytes {
		return nil, fmt.Errorf("servicebus: HeaderBudget %d must be below MaxMessageBytes %d: %w", o.HeaderBudget, o.MaxMessageBytes, broker.ErrInvalidArgument)
	}
	if o.ReceiveWait <= 0 {
		o.ReceiveWait = defaultReceiveWait
	}
	if o.FilterScanLimit <= 0 {
		o.FilterScanLimit = defaultFilterScanLimit
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &driver{conn: conn, opts: o, log: log, senders: map[string]sender{}, receivers: map[string]Receiver{}, leased: map[string]leased{}}, nil
}

// Close closes the senders and receivers the store opened. Locks it holds
// lapse on their own.
func (s *driver) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, x := range s.senders {
		errs = append(errs, x.Close(context.Background()))
	}
	for _, x := range s.receivers {
		errs = append(errs, x.Close(context.Background()))
	}
	return errors.Join(errs...)
}

// As implements [broker.Aser]: target may be a **azservicebus.Client.
func (s *driver) As(target any) bool {
	if t, ok := target.(**azservicebus.Client); ok && s.client != nil {
		*t = s.client
		return true
	}
	return false
}

// MaxMessageBytes implements broker.Limiter: Options.MaxMessageBytes −
// Options.HeaderBudget (253,952 bytes by default).
func (s *driver) MaxMessageBytes(string) int { return s.opts.MaxMessageBytes - s.opts.HeaderBudget }

func (s *driver) sender(queue string) (sender, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x, ok := s.senders[queue]; ok {
		return x, nil
	}
	x, err := s.conn.Sender(queue)
	if err != nil {
		return nil, fmt.Errorf("servicebus: sender for %s: %w", queue, err)
	}
	s.senders[queue] = x
	return x, nil
}

func (s *driver) receiver(dest string) (Receiver, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x, ok := s.receivers[dest]; ok {
		return x, nil
	}
	q, dl := splitDest(dest)
	x, err := s.conn.Receiver(q, dl)
	if err != nil {
		return nil, fmt.Errorf("servicebus: receiver for %s: %w", dest, err)
	}
	s.receivers[dest] = x
	return x, nil
}

// properties maps headers and key onto application properties, and
// returns their size as counted against the limit.
func properties(m *broker.Message) (map[string]any, int) {
	props := make(map[string]any, len(m.Headers)+1)
	size := 0
	for k, v := range m.Headers {
		props[k] = v
		size += len(k) + len(v)
	}
	if len(m.Key) > 0 {
		v := base64.StdEncoding.EncodeToString(m.Key)
		props[HeaderKey] = v
		size += len(HeaderKey) + len(v)
	}
	return props, size
}

// Publish sends m to the destination queue (SendMessage) and returns once
// Service Bus has accepted it. The body is m.Body exactly; headers become
// string application properties, the key [HeaderKey]. A destination naming a
// dead-letter sub-queue is refused: Service Bus moves messages there only
// by dead-lettering them (see [DeadLetterer]).
func (s *driver) Publish(ctx context.Context, destination string, m *broker.Message) error {
	q, dl := splitDest(destination)
	if dl {
		return fmt.Errorf("servicebus: cannot send to %s: a dead-letter sub-queue is filled by dead-lettering (use DeadLetterer): %w", destination, broker.ErrInvalidArgument)
	}
	props, psize := properties(m)
	if total := len(m.Body) + psize; total > s.opts.MaxMessageBytes {
		return &classify.TooLargeError{What: "message with its properties", Destination: destination, Size: total, Limit: s.opts.MaxMessageBytes}
	}
	snd, err := s.sender(q)
	if err != nil {
		return err
	}
	msg := &azservicebus.Message{Body: m.Body, ApplicationProperties: props}
	if c := m.Header(broker.HeaderClass); c != "" {
		msg.Subject = &c
	}
	if err := snd.SendMessage(ctx, msg, nil); err != nil {
		return fmt.Errorf("servicebus: send to %s: %w", destination, err)
	}
	return nil
}

// Fetch receives up to max records of destination that match f. A
// destination is a queue, whose records are envelopes the store sent, or a
// queue's dead-letter sub-queue ([DeadLetterQueue]), whose records the
// a [DeadLetterer] dead-lettered with the envelope in [HeaderEnvelope] (a message
// Service Bus dead-lettered itself, MaxDeliveryCountExceeded say, has no
// envelope: its record carries the original body and no Envelope).
//
// The lease is the lock Service Bus gives (the queue's LockDuration);
// Record.Deliveries is the DeliveryCount and Record.ID the sequence number.
// With a non-zero filter, non-matching messages are held locked until the
// scan ends, so matches behind them are reached, and then abandoned at
// once; never completed. A Fetch waits up to Options.ReceiveWait for a
// first message.
//
// Records must be acknowledged or released through the store that fetched
// them: Service Bus settles a message on the link that received it.
func (s *driver) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	recv, err := s.receiver(destination)
	if err != nil {
		return nil, err
	}
	filtered := !f.IsZero()
	var out []*broker.Record
	var held []*azservicebus.ReceivedMessage
	scanned := 0
	for len(out) < max {
		n := min(max-len(out), 100)
		if filtered {
			n = 100
		}
		rctx, cancel := context.WithTimeout(ctx, s.opts.ReceiveWait)
		msgs, err := recv.ReceiveMessages(rctx, n, nil)
		cancel()
		if err != nil && !(ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded)) {
			s.abandon(ctx, recv, held)
			for _, r := range out {
				_ = s.Release(ctx, r)
			}
			return nil, fmt.Errorf("servicebus: receive from %s: %w", destination, err)
		}
		if len(msgs) == 0 {
			break
		}
		scanned += len(msgs)
		for _, msg := range msgs {
			rec := s.record(destination, recv, msg)
			if len(out) >= max || filtered && !f.Match(rec.Envelope) {
				s.forget(rec.Lease)
				held = append(held, msg)
				continue
			}
			out = append(out, rec)
		}
		if filtered && scanned >= s.opts.FilterScanLimit {
			break
		}
	}
	s.abandon(ctx, recv, held)
	return out, nil
}

func (s *driver) abandon(ctx context.Context, recv Receiver, msgs []*azservicebus.ReceivedMessage) {
	ctx = context.WithoutCancel(ctx)
	for _, m := range msgs {
		if err := recv.AbandonMessage(ctx, m, nil); err != nil {
			s.log.WarnContext(ctx, "geodlq: servicebus: could not abandon a message a filtered fetch held; its lock expiry brings it back", slog.Any("error", err))
		}
	}
}

func (s *driver) forget(lease string) {
	s.mu.Lock()
	delete(s.leased, lease)
	s.mu.Unlock()
}

func (s *driver) record(destination string, recv Receiver, msg *azservicebus.ReceivedMessage) *broker.Record {
	m := messageOf(destination, msg)
	if v, ok := msg.ApplicationProperties[HeaderEnvelope].(string); ok {
		m.Body = []byte(v)
		delete(m.Headers, HeaderEnvelope)
	}
	id := msg.MessageID
	if msg.SequenceNumber != nil {
		id = strconv.FormatInt(*msg.SequenceNumber, 10)
	}
	lease := hex.EncodeToString(msg.LockToken[:]) + "/" + strconv.FormatUint(s.seq.Add(1), 10)
	rec := &broker.Record{ID: id, Destination: destination, Message: m, Deliveries: int(msg.DeliveryCount), Lease: lease,
		LeaseExpires: lockEnd(msg)}
	if env, err := envelope.Decode(m.Body); err == nil {
		rec.Envelope = env
	}
	s.mu.Lock()
	s.sweep()
	s.leased[lease] = leased{recv: recv, msg: msg}
	s.mu.Unlock()
	return rec
}

// sweep drops leases whose lock ended over a minute ago. s.mu held.
func (s *driver) sweep() {
	if len(s.leased) < 1024 {
		return
	}
	cutoff := time.Now().Add(-time.Minute)
	for k, l := range s.leased {
		if l.msg.LockedUntil != nil && l.msg.LockedUntil.Before(cutoff) {
			delete(s.leased, k)
		}
	}
}

// lockEnd is when msg's lock ends by the local clock, as far as it can
// be trusted: Service Bus reports the end on its own clock
// (LockedUntil), so a tenth of what is left, at most a second, is
// allowed for the clocks' skew. Zero when the message has no lock time.
func lockEnd(msg *azservicebus.ReceivedMessage) time.Time {
	if msg.LockedUntil == nil {
		return time.Time{}
	}
	until := *msg.LockedUntil
	return until.Add(-min(max(time.Until(until), 0)/10, time.Second))
}

// Renew renews the message lock (RenewMessageLock, through the receiver
// that locked it): Service Bus's own lease renewal, for the queue's
// LockDuration from now. A lost lock (CodeLockLost), or a record this
// store did not lease or already settled, gives an error wrapping
// broker.ErrLeaseLost.
func (s *driver) Renew(ctx context.Context, r *broker.Record) error {
	s.mu.Lock()
	l, ok := s.leased[r.Lease]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("servicebus: renew %s: not leased by this store (already settled, or fetched elsewhere): %w", r.ID, broker.ErrLeaseLost)
	}
	if err := l.recv.RenewMessageLock(ctx, l.msg, nil); err != nil {
		if isLockLost(err) {
			return fmt.Errorf("servicebus: renew %s: %w: %w", r.ID, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("servicebus: renew %s: %w", r.ID, err)
	}
	r.LeaseExpires = lockEnd(l.msg)
	return nil
}

func (s *driver) take(r *broker.Record, op string) (leased, error) {
	s.mu.Lock()
	l, ok := s.leased[r.Lease]
	delete(s.leased, r.Lease)
	s.mu.Unlock()
	if !ok {
		return leased{}, fmt.Errorf("servicebus: %s %s: not leased by this store (already settled, or fetched elsewhere): %w", op, r.ID, broker.ErrLeaseLost)
	}
	return l, nil
}

// isLockLost reports whether err is Service Bus saying a message lock was
// lost (azservicebus.CodeLockLost).
func isLockLost(err error) bool {
	var e *azservicebus.Error
	return errors.As(err, &e) && e.Code == azservicebus.CodeLockLost
}

// Ack completes the record (CompleteMessage). A lost lock gives an error
// wrapping broker.ErrLeaseLost.
func (s *driver) Ack(ctx context.Context, r *broker.Record) error {
	l, err := s.take(r, "ack")
	if err != nil {
		return err
	}
	if err := l.recv.CompleteMessage(ctx, l.msg, nil); err != nil {
		if isLockLost(err) {
			return fmt.Errorf("servicebus: ack %s: %w: %w", r.ID, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("servicebus: ack %s: %w", r.ID, err)
	}
	return nil
}

// Release abandons the record (AbandonMessage): it is available again at
// once, its DeliveryCount incremented.
func (s *driver) Release(ctx context.Context, r *broker.Record) error {
	l, err := s.take(r, "release")
	if err != nil {
		return err
	}
	if err := l.recv.AbandonMessage(ctx, l.msg, nil); err != nil {
		if isLockLost(err) {
			return fmt.Errorf("servicebus: release %s: %w: %w", r.ID, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("servicebus: release %s: %w", r.ID, err)
	}
	return nil
}

// messageOf converts a received message into a broker.Message: the body
// exactly, headers from string application properties (other values
// formatted with %v), the key from HeaderKey, DeliveryAttempt from
// DeliveryCount, and provenance (system "servicebus", the entity, message
// id, sequence number as offset, enqueued time).
func messageOf(entity string, msg *azservicebus.ReceivedMessage) *broker.Message {
	m := &broker.Message{Body: msg.Body, DeliveryAttempt: int(msg.DeliveryCount)}
	for k, v := range msg.ApplicationProperties {
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		switch x := v.(type) {
		case string:
			m.Headers[k] = x
		default:
			m.Headers[k] = fmt.Sprint(x)
		}
	}
	if v, ok := m.Headers[HeaderKey]; ok {
		if b, err := base64.StdEncoding.DecodeString(v); err == nil {
			m.Key = b
		}
		delete(m.Headers, HeaderKey)
	}
	src := &envelope.Source{System: "servicebus", Topic: entity, MessageID: msg.MessageID, Key: m.Key, DeliveryCount: int(msg.DeliveryCount)}
	if msg.SequenceNumber != nil {
		seq := *msg.SequenceNumber
		src.Offset = &seq
	}
	if msg.EnqueuedTime != nil {
		t := msg.EnqueuedTime.UTC()
		src.Timestamp = &t
	}
	m.Source = src
	return m
}
