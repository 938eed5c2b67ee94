package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// Header names the adapter sets on the messages it publishes, besides the
// message's own headers. They are not returned in Record.Message.Headers.
const (
	// HeaderKey carries the message's ordering key, base64 (standard
	// encoding), since NATS messages have no key of their own.
	HeaderKey = "Geodlq-Key"
	// HeaderMsgID is JetStream's de-duplication header.
	HeaderMsgID = "Nats-Msg-Id"
)

// Defaults of [Options].
const (
	// DefaultStream is Options.Stream's default.
	DefaultStream = "GEODLQ"
	// DefaultSubjectPrefix is Options.SubjectPrefix's default.
	DefaultSubjectPrefix = "geodlq.dlq"
	// DefaultReplayer is Options.Replayer's default.
	DefaultReplayer = "geodlq-replay"
	// DefaultAckWait is Options.AckWait's default (the server's own).
	DefaultAckWait = 30 * time.Second
	// DefaultMaxAckPending is Options.MaxAckPending's default.
	DefaultMaxAckPending = 10_000
	// DefaultDuplicates is Options.Duplicates's default (the server's own).
	DefaultDuplicates = 2 * time.Minute
	// DefaultHeaderBytes is Options.HeaderBytes's default.
	DefaultHeaderBytes = 4096
	// DefaultTimeout is Options.Timeout's default.
	DefaultTimeout = 10 * time.Second
)

// Options configures a [Store]. nil means all defaults.
type Options struct {
	// Stream names the JetStream stream holding every destination.
	// Default "GEODLQ". [New] creates it when missing.
	Stream string
	// SubjectPrefix is the literal subject prefix of the dead-letter
	// subjects: destination d is stored under "<prefix>.<SubjectToken(d)>"
	// and the stream captures "<prefix>.>". Default "geodlq.dlq".
	SubjectPrefix string
	// Replayer names the replayer group: each destination is read through
	// the durable pull consumer "<Replayer>_<SubjectToken(d)>" (hashed when
	// long), shared by every handle with the same Replayer, so handles in
	// several processes share the work and never hold the same record.
	// Default "geodlq-replay".
	Replayer string
	// AckWait is the consumer's ack_wait: how long the server waits for an
	// acknowledgement of a fetched record before redelivering it. The
	// lease a [Store] enforces is slightly shorter (see [Store.Lease]).
	// Default 30s.
	AckWait time.Duration
	// MaxDeliver is the consumer's max_deliver. Default -1 (unlimited): a
	// dead-letter store must not stop delivering a record because replays
	// of it failed or filtered fetches skipped it (each skip is a delivery).
	MaxDeliver int
	// MaxAckPending is the consumer's max_ack_pending: the most records
	// leased at once across all handles. A filtered Fetch leases (and then
	// releases) the records it skips, so it sees at most this many records
	// past the oldest. Default 10,000.
	MaxAckPending int
	// Storage is the stream's storage when [New] creates it. Default
	// natsjs.FileStorage (the server fsyncs per its sync_interval).
	Storage natsjs.StorageType
	// Replicas is the stream's replica count when [New] creates it.
	// Default 1.
	Replicas int
	// Duplicates is the stream's duplicate_window when [New] creates it:
	// how long a Nats-Msg-Id is remembered. Default 2 minutes.
	Duplicates time.Duration
	// MaxMessageBytes caps message bodies. Default and upper bound: the
	// smaller of the server's max_payload (the connection's MaxPayload, 1
	// MiB by default) and the stream's max_msg_size, minus HeaderBytes.
	MaxMessageBytes int
	// HeaderBytes is the room reserved for headers within max_payload when
	// the body limit is computed. Default 4096.
	HeaderBytes int
	// Timeout bounds each server request whose context has no deadline
	// (publish acks, acks, naks, lookups). Default 10s.
	Timeout time.Duration
	// Logger receives warnings (a Nak that failed, a lapsed lease). Nil
	// discards.
	Logger *slog.Logger
}

// Store is a dead-letter store in a JetStream stream: a [broker.Publisher],
// [broker.DeadLetterSource] and [broker.Limiter]. It is safe for
// concurrent use.
type Store struct {
	js         natsjs.JetStream
	nc         *nats.Conn
	stream     natsjs.Stream
	streamName string
	prefix     string
	replayer   string
	ackWait    time.Duration
	lease      time.Duration
	maxDeliver int
	maxPending int
	limit      int // body limit
	physical   int // body+headers limit
	timeout    time.Duration
	log        *slog.Logger

	mu        sync.Mutex
	consumers map[string]natsjs.Consumer
	settled   map[string]time.Time // lease -> deadline, for leases this handle settled
	closed    bool
}

var (
	_ broker.Publisher        = (*Store)(nil)
	_ broker.DeadLetterSource = (*Store)(nil)
	_ broker.Limiter          = (*Store)(nil)
)

// New returns a store on js's connection. It creates the stream when it
// does not exist (work-queue retention: an acknowledged record is deleted;
// subjects "<prefix>.>"; opts.Storage, Replicas and Duplicates) and adds
// the subjects to an existing stream that lacks them. It refuses an
// existing stream with limits retention, where an acknowledgement does not
// remove a record. The connection stays the caller's: [Store.Close] does
// not close it.
func New(ctx context.Context, js natsjs.JetStream, opts *Options) (*Store, error) {
	if js == nil {
		return nil, errors.New("jetstream: nil JetStream")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.SubjectPrefix == "" {
		o.SubjectPrefix = DefaultSubjectPrefix
	}
	if o.Replayer == "" {
		o.Replayer = DefaultReplayer
	}
	if o.AckWait <= 0 {
		o.AckWait = DefaultAckWait
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = -1
	}
	if o.MaxAckPending <= 0 {
		o.MaxAckPending = DefaultMaxAckPending
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Duplicates <= 0 {
		o.Duplicates = DefaultDuplicates
	}
	if o.HeaderBytes <= 0 {
		o.HeaderBytes = DefaultHeaderBytes
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if !validName(o.Stream) {
		return nil, fmt.Errorf("jetstream: invalid stream name %q", o.Stream)
	}
	if !validName(o.Replayer) {
		return nil, fmt.Errorf("jetstream: invalid replayer name %q", o.Replayer)
	}
	if !validPrefix(o.SubjectPrefix) {
		return nil, fmt.Errorf("jetstream: invalid subject prefix %q", o.SubjectPrefix)
	}
	nc := js.Conn()
	if nc == nil {
		return nil, errors.New("jetstream: JetStream has no connection")
	}
	s := &Store{
		js: js, nc: nc, streamName: o.Stream, prefix: o.SubjectPrefix, replayer: o.Replayer,
		ackWait: o.AckWait, lease: leaseFor(o.AckWait), maxDeliver: o.MaxDeliver,
		maxPending: o.MaxAckPending, timeout: o.Timeout, log: o.Logger,
		consumers: map[string]natsjs.Consumer{}, settled: map[string]time.Time{},
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	stream, err := ensureStream(ctx, js, o)
	if err != nil {
		return nil, err
	}
	s.stream = stream
	physical := int(nc.MaxPayload())
	if mm := stream.CachedInfo().Config.MaxMsgSize; mm > 0 && int(mm) < physical {
		physical = int(mm)
	}
	if physical <= o.HeaderBytes {
		return nil, fmt.Errorf("jetstream: message limit %d leaves no room for a body after %d header bytes", physical, o.HeaderBytes)
	}
	s.physical = physical
	s.limit = physical - o.HeaderBytes
	if o.MaxMessageBytes > 0 && o.MaxMessageBytes < s.limit {
		s.limit = o.MaxMessageBytes
	}
	return s, nil
}

// leaseFor returns the lease a store enforces for an ack wait: a tenth
// shorter (at most 5s shorter), so that an Ack the store lets through
// reaches the server before the server redelivers the record.
func leaseFor(ackWait time.Duration) time.Duration {
	return ackWait - min(ackWait/10, 5*time.Second)
}

func ensureStream(ctx context.Context, js natsjs.JetStream, o Options) (natsjs.Stream, error) {
	want := o.SubjectPrefix + ".>"
	st, err := js.Stream(ctx, o.Stream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		storage := o.Storage
		st, err = js.CreateStream(ctx, natsjs.StreamConfig{
			Name:        o.Stream,
			Description: "geodlq dead-letter store",
			Subjects:    []string{want},
			Retention:   natsjs.WorkQueuePolicy,
			Storage:     storage,
			Replicas:    o.Replicas,
			Duplicates:  o.Duplicates,
			Discard:     natsjs.DiscardNew,
		})
		if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
			st, err = js.Stream(ctx, o.Stream)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %q: %w", o.Stream, err)
	}
	cfg := st.CachedInfo().Config
	if cfg.Retention == natsjs.LimitsPolicy {
		return nil, fmt.Errorf("jetstream: stream %q has limits retention, where an acknowledged record stays in the stream; a dead-letter store needs work-queue (or interest) retention", o.Stream)
	}
	for _, subj := range cfg.Subjects {
		if subj == want {
			return st, nil
		}
	}
	cfg.Subjects = append(cfg.Subjects, want)
	st, err = js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("jetstream: adding subjects %q to stream %q: %w", want, o.Stream, err)
	}
	return st, nil
}

// Subject returns the subject destination is stored under.
func (s *Store) Subject(destination string) string {
	return s.prefix + "." + SubjectToken(destination)
}

// ConsumerName returns the durable consumer the store reads destination
// through.
func (s *Store) ConsumerName(destination string) string {
	return consumerName(s.replayer, destination)
}

// StreamName returns the stream's name.
func (s *Store) StreamName() string { return s.streamName }

// JetStream returns the client the store was made with.
func (s *Store) JetStream() natsjs.JetStream { return s.js }

// Lease returns how long a fetched record stays leased: Options.AckWait
// less a tenth of it (at most 5s). Ack and Release refuse a record older
// than that with [broker.ErrLeaseLost]; the server redelivers it once
// AckWait has passed.
func (s *Store) Lease() time.Duration { return s.lease }

// As gives access to the underlying client: i may be a
// *natsjs.JetStream, **nats.Conn or *natsjs.Stream. It reports whether i
// was set.
func (s *Store) As(i any) bool {
	switch p := i.(type) {
	case *natsjs.JetStream:
		*p = s.js
	case **nats.Conn:
		*p = s.nc
	case *natsjs.Stream:
		*p = s.stream
	default:
		return false
	}
	return true
}

// MaxMessageBytes implements [broker.Limiter]: the body limit, the same
// for every destination.
func (s *Store) MaxMessageBytes(string) int { return s.limit }

// Close makes later operations fail with [broker.ErrClosed]. It does not
// close the connection, and records leased through the store stay leased
// until their ack wait passes.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// Publish appends m to destination's subject and waits for the stream's
// acknowledgement (stored per the stream's storage and replicas). The body
// is stored as is; headers become NATS headers, the key travels base64 in
// [HeaderKey], and [HeaderMsgID] is set so a retried write is absorbed by
// the stream's duplicate window (see the package documentation).
func (s *Store) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if destination == "" {
		return errors.New("jetstream: empty destination")
	}
	if s.isClosed() {
		return broker.ErrClosed
	}
	return publish(ctx, pubTarget{
		js: s.js, stream: s.stream, subject: s.Subject(destination), destination: destination,
		limit: s.limit, physical: s.physical, timeout: s.timeout,
	}, m)
}

type pubTarget struct {
	js          natsjs.JetStream
	stream      natsjs.Stream // nil: no duplicate check against deletion
	subject     string
	destination string
	limit       int
	physical    int
	timeout     time.Duration
}

// maxChain bounds how many deleted predecessors a write with the same
// message id is chained past.
const maxChain = 16

func publish(ctx context.Context, t pubTarget, m *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m == nil {
		return errors.New("jetstream: nil message")
	}
	if t.limit > 0 && len(m.Body) > t.limit {
		return &classify.TooLargeError{Destination: t.destination, Size: len(m.Body), Limit: t.limit}
	}
	msg := nats.NewMsg(t.subject)
	msg.Data = m.Body
	for k, v := range m.Headers {
		if k == "" || strings.ContainsAny(k, ":\r\n \t") || strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("jetstream: header %q cannot be carried by NATS (empty, or contains ':', whitespace or a line break)", k)
		}
		if k == HeaderMsgID || k == HeaderKey {
			continue
		}
		msg.Header[k] = []string{v}
	}
	if m.Key != nil {
		msg.Header[HeaderKey] = []string{base64.StdEncoding.EncodeToString(m.Key)}
	}
	id := MsgID(t.destination, m)
	if id != "" {
		msg.Header[HeaderMsgID] = []string{id}
	}
	if t.physical > 0 {
		if hl := headerLen(msg.Header); len(m.Body)+hl > t.physical {
			return &classify.TooLargeError{Destination: t.destination, Size: len(m.Body), Limit: t.physical - hl}
		}
	}
	ctx, cancel := withTimeout(ctx, t.timeout)
	defer cancel()
	for range maxChain {
		ack, err := t.js.PublishMsg(ctx, msg)
		if err != nil {
			var apiErr *natsjs.APIError
			if errors.Is(err, nats.ErrMaxPayload) || (errors.As(err, &apiErr) && apiErr.ErrorCode == natsjs.JSErrCodeStreamMessageExceedsMaximum) {
				return fmt.Errorf("jetstream: %w", &classify.TooLargeError{Destination: t.destination, Size: len(m.Body), Limit: t.limit})
			}
			return fmt.Errorf("jetstream: publishing to %q: %w", t.subject, err)
		}
		if !ack.Duplicate || t.stream == nil {
			return nil
		}
		// The duplicate window remembered the id. If the earlier write is
		// still in the stream, this write was a retry and is absorbed. If
		// it is gone, it was replayed and acknowledged: this is the same
		// event failing again, and it must be stored, under an id chained
		// to the deleted one (deterministic, so a retry of this write is
		// absorbed in turn).
		_, err = t.stream.GetMsg(ctx, ack.Sequence)
		if err == nil {
			return nil
		}
		if !errors.Is(err, natsjs.ErrMsgNotFound) {
			return fmt.Errorf("jetstream: checking duplicate of %q at sequence %d: %w", t.subject, ack.Sequence, err)
		}
		msg.Header[HeaderMsgID] = []string{id + ".after." + strconv.FormatUint(ack.Sequence, 10)}
		id = msg.Header[HeaderMsgID][0]
	}
	return fmt.Errorf("jetstream: publishing to %q: more than %d deleted duplicates of message id %q", t.subject, maxChain, id)
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// headerLen returns the encoded size of h as NATS sends it.
func headerLen(h nats.Header) int {
	n := len("NATS/1.0\r\n") + 2
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// MsgID returns the Nats-Msg-Id the adapter sets when it publishes m to
// destination, or "" when m carries no idempotency key.
//
// The id hashes the destination, the idempotency key (the
// [broker.HeaderIdempotencyKey] header, else the envelope's) and what
// tells a retried write from a new failure of the same event: the
// [broker.HeaderReplayOf] header of a re-injected message, else the
// envelope's source position (system, topic, partition, offset, message
// id). A write retried after a lost acknowledgement, or the same source
// message dead-lettered again after its source redelivered it, gets the
// same id and is absorbed by the duplicate window; the same event failing
// again after a replay comes from a new source position and gets a new
// one.
func MsgID(destination string, m *broker.Message) string {
	key := m.Header(broker.HeaderIdempotencyKey)
	disc := ""
	if ro := m.Header(broker.HeaderReplayOf); ro != "" {
		disc = "replay-of\x00" + ro
	} else if env, err := broker.EnvelopeOf(m); err == nil {
		if key == "" {
			key = env.IdempotencyKey
		}
		disc = "source\x00" + sourcePosition(env.Source)
	}
	if key == "" {
		return ""
	}
	h := sha256.New()
	for _, p := range []string{"geodlq.msgid.v1", destination, key, disc} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return "geodlq-" + hex.EncodeToString(h.Sum(nil)[:16])
}

func sourcePosition(s *envelope.Source) string {
	if s == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(s.System)
	b.WriteByte(0)
	b.WriteString(s.Topic)
	b.WriteByte(0)
	if s.Partition != nil {
		b.WriteString(strconv.FormatInt(int64(*s.Partition), 10))
	}
	b.WriteByte(0)
	if s.Offset != nil {
		b.WriteString(strconv.FormatInt(*s.Offset, 10))
	}
	b.WriteByte(0)
	b.WriteString(s.MessageID)
	return b.String()
}

// consumer returns (creating once per handle) the durable consumer of
// destination.
func (s *Store) consumer(ctx context.Context, destination string) (natsjs.Consumer, error) {
	s.mu.Lock()
	c := s.consumers[destination]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	name := s.ConsumerName(destination)
	c, err := s.js.CreateOrUpdateConsumer(ctx, s.streamName, natsjs.ConsumerConfig{
		Durable:       name,
		Description:   "geodlq replay of " + destination,
		DeliverPolicy: natsjs.DeliverAllPolicy,
		AckPolicy:     natsjs.AckExplicitPolicy,
		AckWait:       s.ackWait,
		MaxDeliver:    s.maxDeliver,
		MaxAckPending: s.maxPending,
		FilterSubject: s.Subject(destination),
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: consumer %q on stream %q: %w", name, s.streamName, err)
	}
	s.mu.Lock()
	s.consumers[destination] = c
	s.mu.Unlock()
	return c, nil
}

// forgetConsumer drops the cached consumer of destination when err says
// the server no longer has it, so the next Fetch creates it again.
func (s *Store) forgetConsumer(destination string, err error) {
	if errors.Is(err, natsjs.ErrConsumerNotFound) || errors.Is(err, natsjs.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders) {
		s.mu.Lock()
		delete(s.consumers, destination)
		s.mu.Unlock()
	}
}

// scanBatch is the pull size of a filtered Fetch.
const scanBatch = 256

// Fetch leases up to max records of destination matching f, oldest first,
// through the destination's durable pull consumer. Filters are applied
// here with [broker.Filter.Match]: records that do not match are leased
// while the scan goes on (so the scan moves past them) and released with a
// Nak before Fetch returns, so they are neither lost nor held. Each such
// skip counts as a delivery in the record's NumDelivered.
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
	cons, err := s.consumer(ctx, destination)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	deadline := start.Add(s.lease)
	filtered := !f.IsZero()
	var out []*broker.Record
	var skipped []natsjs.Msg
	var kept []natsjs.Msg
	recreated := false
	// Records given back are Nak'ed synchronously: the server has
	// processed the Nak when the reply comes, so the next Fetch (of any
	// handle) sees them again.
	giveBack := func(msgs []natsjs.Msg) {
		if len(msgs) == 0 {
			return
		}
		nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		for _, m := range msgs {
			if _, err := s.nc.RequestWithContext(nctx, m.Reply(), []byte("-NAK")); err != nil {
				s.log.Warn("geodlq: jetstream nak failed; the record returns after its ack wait",
					slog.String("destination", destination), slog.Any("error", err))
			}
		}
	}
	defer func() { giveBack(skipped) }()
	for len(out) < max {
		if err := ctx.Err(); err != nil {
			giveBack(kept)
			return nil, err
		}
		want := max - len(out)
		if filtered {
			want = scanBatch
		}
		asked := time.Now()
		batch, err := cons.FetchNoWait(want)
		if err != nil {
			giveBack(kept)
			s.forgetConsumer(destination, err)
			return nil, fmt.Errorf("jetstream: fetching from %q: %w", destination, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			rec, env, err := s.record(destination, m, deadline, filtered)
			if err != nil {
				skipped = append(skipped, m)
				s.log.Warn("geodlq: jetstream message without metadata skipped", slog.String("destination", destination), slog.Any("error", err))
				continue
			}
			if len(out) >= max || (filtered && (env == nil || !f.Match(env))) {
				skipped = append(skipped, m)
				continue
			}
			out = append(out, rec)
			kept = append(kept, m)
		}
		if err := batch.Error(); err != nil {
			giveBack(kept)
			s.forgetConsumer(destination, err)
			return nil, fmt.Errorf("jetstream: fetching from %q: %w", destination, err)
		}
		if n == 0 && !recreated && time.Since(asked) > 500*time.Millisecond {
			// A live consumer answers a no-wait pull at once, even when it
			// has nothing; silence until the pull expires means the server
			// has no such consumer (deleted by an operator): make it again.
			recreated = true
			ictx, cancel := s.withTimeout(ctx)
			_, ierr := cons.Info(ictx)
			cancel()
			if errors.Is(ierr, natsjs.ErrConsumerNotFound) {
				s.forgetConsumer(destination, ierr)
				if cons, err = s.consumer(ctx, destination); err != nil {
					giveBack(kept)
					return nil, err
				}
				continue
			}
		}
		if n < want {
			break
		}
	}
	return out, nil
}

func (s *Store) record(destination string, m natsjs.Msg, deadline time.Time, decode bool) (*broker.Record, *envelope.Envelope, error) {
	md, err := m.Metadata()
	if err != nil {
		return nil, nil, err
	}
	msg := toMessage(m.Data(), m.Headers())
	msg.DeliveryAttempt = int(md.NumDelivered)
	rec := &broker.Record{
		ID:          strconv.FormatUint(md.Sequence.Stream, 10),
		Destination: destination,
		Message:     msg,
		Deliveries:  int(md.NumDelivered),
		Lease:       strconv.FormatInt(deadline.UnixNano(), 10) + " " + m.Reply(),
	}
	var env *envelope.Envelope
	if decode {
		if e, err := envelope.Decode(msg.Body); err == nil {
			env = e
			rec.Envelope = e
		}
	}
	return rec, env, nil
}

// toMessage converts a stored NATS message: the body as is, the headers
// (first value of each) without the adapter's own, the key from
// [HeaderKey].
func toMessage(data []byte, h nats.Header) *broker.Message {
	m := &broker.Message{Body: data}
	if len(h) > 0 {
		m.Headers = make(map[string]string, len(h))
	}
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		switch k {
		case HeaderKey:
			if key, err := base64.StdEncoding.DecodeString(vs[0]); err == nil {
				m.Key = key
			}
		case HeaderMsgID:
		default:
			m.Headers[k] = vs[0]
		}
	}
	return m
}

// Ack acknowledges r with a double ack (the server confirms it), which on
// a work-queue stream deletes it. It fails with [broker.ErrLeaseLost] when
// r's lease has lapsed ([Store.Lease] after the Fetch began) — the server
// may have handed the record to another consumer — or when this handle
// already settled r.
func (s *Store) Ack(ctx context.Context, r *broker.Record) error {
	return s.settle(ctx, r, []byte("+ACK"))
}

// Release gives r back at once with a Nak; the server redelivers it on the
// next fetch. It fails like Ack on a lapsed lease.
func (s *Store) Release(ctx context.Context, r *broker.Record) error {
	return s.settle(ctx, r, []byte("-NAK"))
}

func (s *Store) settle(ctx context.Context, r *broker.Record, body []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r == nil {
		return errors.New("jetstream: nil record")
	}
	deadline, reply, err := s.parseLease(r)
	if err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return broker.ErrClosed
	}
	if len(s.settled) > 4096 {
		for l, d := range s.settled {
			if now.After(d) {
				delete(s.settled, l)
			}
		}
	}
	_, done := s.settled[r.Lease]
	if !done && now.Before(deadline) {
		s.settled[r.Lease] = deadline
	}
	s.mu.Unlock()
	if done {
		return fmt.Errorf("jetstream: record %s/%s already settled: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	if !now.Before(deadline) {
		return fmt.Errorf("jetstream: record %s/%s: lease lapsed %v ago (ack wait %v): %w",
			r.Destination, r.ID, now.Sub(deadline).Round(time.Millisecond), s.ackWait, broker.ErrLeaseLost)
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if _, err := s.nc.RequestWithContext(ctx, reply, body); err != nil {
		s.mu.Lock()
		delete(s.settled, r.Lease)
		s.mu.Unlock()
		return fmt.Errorf("jetstream: settling record %s/%s: %w", r.Destination, r.ID, err)
	}
	return nil
}

// parseLease checks that r's lease was issued for r by a store reading the
// same stream with the same replayer.
func (s *Store) parseLease(r *broker.Record) (time.Time, string, error) {
	ns, reply, ok := strings.Cut(r.Lease, " ")
	nanos, err := strconv.ParseInt(ns, 10, 64)
	bad := func(why string) (time.Time, string, error) {
		return time.Time{}, "", fmt.Errorf("jetstream: record %s/%s: %s: %w", r.Destination, r.ID, why, broker.ErrLeaseLost)
	}
	if !ok || err != nil {
		return bad("no lease from this adapter")
	}
	// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>
	// (newer servers add a domain and account hash after $JS.ACK).
	toks := strings.Split(reply, ".")
	if len(toks) < 9 || toks[0] != "$JS" || toks[1] != "ACK" {
		return bad("lease is not a JetStream ack subject")
	}
	if len(toks) >= 12 {
		toks = append(toks[:2], toks[4:]...)
	}
	if toks[2] != s.streamName || toks[3] != s.ConsumerName(r.Destination) || toks[5] != r.ID {
		return bad("lease belongs to another stream, consumer or record")
	}
	return time.Unix(0, nanos), reply, nil
}
