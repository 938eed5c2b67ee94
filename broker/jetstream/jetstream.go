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

// HeaderKey is the NATS header carrying a message's ordering key, base64
// (standard encoding), since NATS messages have no key of their own. The
// store sets it on what it publishes and the consumer reads it; it is not
// returned in Record.Message.Headers.
const HeaderKey = "Geodlq-Key"

// headerMsgID is JetStream's de-duplication header.
const headerMsgID = natsjs.MsgIDHeader

// jsErrCodeMessageExceedsMaximum is the JetStream API error code of a
// message larger than the stream's max_msg_size (nats-server's
// JSStreamMessageExceedsMaximumErr). nats.go names it
// JSErrCodeStreamMessageExceedsMaximum only from v1.54; the adapter's floor
// is older.
const jsErrCodeMessageExceedsMaximum natsjs.ErrorCode = 10054

// Defaults of [Options].
const (
	// DefaultStream is Options.Stream's default.
	DefaultStream = "GEODLQ"
	// DefaultSubjectPrefix is Options.SubjectPrefix's default.
	DefaultSubjectPrefix = "geodlq.dlq"
	// DefaultReplayer is Options.Replayer's default.
	DefaultReplayer = "geodlq-replay"
	// DefaultLeaseTTL is the default of Options.LeaseTTL, the replay
	// consumers' ack_wait (the server's own default).
	DefaultLeaseTTL = 30 * time.Second
)

const (
	defaultMaxAckPending = 10_000
	defaultDuplicates    = 2 * time.Minute
	defaultHeaderBudget  = 4096
	defaultTimeout       = 30 * time.Second
)

// Options configures the store [New] returns. nil means all defaults.
type Options struct {
	// StoreOptions: LeaseTTL is the ack_wait of the replay consumers,
	// default 30s; the store refuses Ack and Release a tenth of it (at
	// most 5s) earlier, so 27s by default (see the package doc, Leases).
	// MaxMessageBytes defaults to, and may only lower, the smaller of the
	// server's max_payload (the connection's MaxPayload, 1 MiB by
	// default) and the stream's max_msg_size, less HeaderBudget:
	// 1,044,480 bytes on a default server. WriteTimeout (30s) also bounds
	// every other request to the server whose context has no deadline.
	// ReadOnly opens the store for reading: New creates and changes
	// nothing (not even the replay consumers), and the portable store
	// refuses Publish, Fetch, Ack and Release with an error wrapping
	// broker.ErrReadOnly; List, Destinations and Stats work.
	broker.StoreOptions
	// Stream names the JetStream stream holding every destination.
	// Default "GEODLQ".
	Stream string
	// SubjectPrefix is the literal subject prefix of the dead-letter
	// subjects: a destination is stored under "<prefix>.<token>" (see the
	// package doc, Layout) and the stream captures "<prefix>.>". Default
	// "geodlq.dlq".
	SubjectPrefix string
	// Replayer names the replayer group: each destination is read through
	// the durable pull consumer "<Replayer>_<token>" (hashed when long),
	// shared by every handle with the same Replayer, so handles in several
	// processes share the work and never hold the same record. Default
	// "geodlq-replay".
	Replayer string
	// MaxDeliver is the replay consumers' max_deliver. Default -1
	// (unlimited): a dead-letter store must not stop delivering a record
	// because replays of it failed or filtered fetches skipped it (each
	// skip is a delivery).
	MaxDeliver int
	// MaxAckPending is the replay consumers' max_ack_pending: the most
	// records leased at once across all handles. A filtered Fetch leases
	// (and then releases) the records it skips, so it sees at most this
	// many records past the oldest. Default 10,000.
	MaxAckPending int
	// Storage is the stream's storage when New creates it. Default
	// natsjs.FileStorage (the server fsyncs per its sync_interval).
	Storage natsjs.StorageType
	// Replicas is the stream's replica count when New creates it.
	// Default 1.
	Replicas int
	// Duplicates is the stream's duplicate_window when New creates it:
	// how long a Nats-Msg-Id is remembered. Default 2 minutes.
	Duplicates time.Duration
	// HeaderBudget is the room reserved for headers within max_payload
	// when the body limit is computed. Default 4096 bytes.
	HeaderBudget int
	// Create creates the stream when it is missing, and adds
	// "<prefix>.>" to an existing stream that lacks it (never with
	// StoreOptions.ReadOnly). Default false: New fails with an error
	// wrapping [broker.ErrNoStore] and changes nothing.
	Create bool
}

// driver is the JetStream [broker.Driver].
type driver struct {
	js         natsjs.JetStream
	nc         *nats.Conn
	ownsConn   bool
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
	settled   map[string]time.Time // ack subject -> lease deadline, for deliveries this handle settled
}

var (
	_ broker.Driver  = (*driver)(nil)
	_ broker.Limiter = (*driver)(nil)
	_ broker.Lister  = (*driver)(nil)
	_ broker.Aser    = (*driver)(nil)
)

// New returns a dead-letter store in a stream of js's connection. The
// stream must exist and capture "<prefix>.>" with work-queue (or
// interest) retention; with opts.Create, New creates it when missing
// (work-queue retention, no limits, discard "new"; opts.Storage, Replicas,
// Duplicates) and adds "<prefix>.>" to an existing stream that lacks it. A
// missing stream, one with limits retention (where an acknowledgement does
// not remove a record) or one that does not capture the prefix is refused
// with an error wrapping [broker.ErrNoStore]. The connection stays the
// caller's: closing the store does not close it.
func New(ctx context.Context, js natsjs.JetStream, opts *Options) (*broker.Store, error) {
	if js == nil {
		return nil, fmt.Errorf("jetstream: nil JetStream: %w", broker.ErrInvalidArgument)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	d, err := newDriver(ctx, js, &o)
	if err != nil {
		return nil, err
	}
	return broker.NewStore("jetstream", d, &o.StoreOptions), nil
}

// newDriver fills o's defaults and returns the driver.
func newDriver(ctx context.Context, js natsjs.JetStream, o *Options) (*driver, error) {
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.SubjectPrefix == "" {
		o.SubjectPrefix = DefaultSubjectPrefix
	}
	if o.Replayer == "" {
		o.Replayer = DefaultReplayer
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = -1
	}
	if o.MaxAckPending <= 0 {
		o.MaxAckPending = defaultMaxAckPending
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Duplicates <= 0 {
		o.Duplicates = defaultDuplicates
	}
	if o.HeaderBudget <= 0 {
		o.HeaderBudget = defaultHeaderBudget
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = defaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("jetstream: negative MaxMessageBytes %d: %w", o.MaxMessageBytes, broker.ErrInvalidArgument)
	}
	if !validName(o.Stream) {
		return nil, fmt.Errorf("jetstream: invalid stream name %q: %w", o.Stream, broker.ErrInvalidArgument)
	}
	if !validName(o.Replayer) {
		return nil, fmt.Errorf("jetstream: invalid replayer name %q: %w", o.Replayer, broker.ErrInvalidArgument)
	}
	if !validPrefix(o.SubjectPrefix) {
		return nil, fmt.Errorf("jetstream: invalid subject prefix %q: %w", o.SubjectPrefix, broker.ErrInvalidArgument)
	}
	nc := js.Conn()
	if nc == nil {
		return nil, fmt.Errorf("jetstream: JetStream has no connection: %w", broker.ErrInvalidArgument)
	}
	d := &driver{
		js: js, nc: nc, streamName: o.Stream, prefix: o.SubjectPrefix, replayer: o.Replayer,
		ackWait: o.LeaseTTL, lease: leaseFor(o.LeaseTTL), maxDeliver: o.MaxDeliver,
		maxPending: o.MaxAckPending, timeout: o.WriteTimeout, log: o.Logger,
		consumers: map[string]natsjs.Consumer{}, settled: map[string]time.Time{},
	}
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	stream, err := ensureStream(ctx, js, o)
	if err != nil {
		return nil, err
	}
	d.stream = stream
	physical := int(nc.MaxPayload())
	if mm := stream.CachedInfo().Config.MaxMsgSize; mm > 0 && int(mm) < physical {
		physical = int(mm)
	}
	if physical <= o.HeaderBudget {
		return nil, fmt.Errorf("jetstream: message limit %d leaves no room for a body after %d header bytes: %w", physical, o.HeaderBudget, broker.ErrInvalidArgument)
	}
	d.physical = physical
	d.limit = physical - o.HeaderBudget
	if o.MaxMessageBytes > 0 && o.MaxMessageBytes < d.limit {
		d.limit = o.MaxMessageBytes
	}
	return d, nil
}

// leaseFor returns the lease a store enforces for an ack wait: a tenth
// shorter (at most 5s shorter), so that an Ack the store lets through
// reaches the server before the server redelivers the record.
func leaseFor(ackWait time.Duration) time.Duration {
	return ackWait - min(ackWait/10, 5*time.Second)
}

// ensureStream finds the store's stream, creating it or adding the
// store's subjects only with o.Create (and never with o.ReadOnly).
func ensureStream(ctx context.Context, js natsjs.JetStream, o *Options) (natsjs.Stream, error) {
	want := o.SubjectPrefix + ".>"
	create := o.Create && !o.ReadOnly
	st, err := js.Stream(ctx, o.Stream)
	switch {
	case errors.Is(err, natsjs.ErrStreamNotFound) && create:
		st, err = js.CreateStream(ctx, natsjs.StreamConfig{
			Name:        o.Stream,
			Description: "geodlq dead-letter store",
			Subjects:    []string{want},
			Retention:   natsjs.WorkQueuePolicy,
			Storage:     o.Storage,
			Replicas:    o.Replicas,
			Duplicates:  o.Duplicates,
			Discard:     natsjs.DiscardNew,
		})
		if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
			st, err = js.Stream(ctx, o.Stream)
		}
	case errors.Is(err, natsjs.ErrStreamNotFound):
		return nil, fmt.Errorf("jetstream: no stream %q (create it with Options.Create): %w", o.Stream, broker.ErrNoStore)
	case errors.Is(err, natsjs.ErrJetStreamNotEnabled), errors.Is(err, natsjs.ErrJetStreamNotEnabledForAccount):
		return nil, fmt.Errorf("jetstream: %w: %w", err, broker.ErrNoStore)
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %q: %w", o.Stream, err)
	}
	cfg := st.CachedInfo().Config
	if cfg.Retention == natsjs.LimitsPolicy {
		return nil, fmt.Errorf("jetstream: stream %q has limits retention, where an acknowledged record stays in the stream; a dead-letter store needs work-queue (or interest) retention: %w", o.Stream, broker.ErrNoStore)
	}
	for _, subj := range cfg.Subjects {
		if subj == want {
			return st, nil
		}
	}
	if !create {
		return nil, fmt.Errorf("jetstream: stream %q does not capture %q (add it with Options.Create): %w", o.Stream, want, broker.ErrNoStore)
	}
	cfg.Subjects = append(cfg.Subjects, want)
	st, err = js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("jetstream: adding subjects %q to stream %q: %w", want, o.Stream, err)
	}
	return st, nil
}

// subject returns the subject destination is stored under.
func (d *driver) subject(destination string) string {
	return d.prefix + "." + subjectToken(destination)
}

// destinationOf returns the destination a subject of the store holds, or
// false for a subject the store did not write.
func (d *driver) destinationOf(subject string) (string, bool) {
	tok, ok := strings.CutPrefix(subject, d.prefix+".")
	if !ok || tok == "" || strings.Contains(tok, ".") {
		return "", false
	}
	dest, err := destinationOfToken(tok)
	return dest, err == nil && dest != ""
}

// consumerName returns the durable consumer the store reads destination
// through.
func (d *driver) consumerName(destination string) string {
	return consumerName(d.replayer, destination)
}

// As implements [broker.Aser]: target may be a *natsjs.JetStream,
// **nats.Conn or *natsjs.Stream.
func (d *driver) As(target any) bool {
	switch p := target.(type) {
	case *natsjs.JetStream:
		*p = d.js
	case **nats.Conn:
		*p = d.nc
	case *natsjs.Stream:
		*p = d.stream
	default:
		return false
	}
	return true
}

// MaxMessageBytes implements [broker.Limiter]: the body limit, the same
// for every destination.
func (d *driver) MaxMessageBytes(string) int { return d.limit }

// Close closes the connection when the store's opener made it. Records
// leased through the store stay leased until their ack wait passes.
func (d *driver) Close() error {
	if d.ownsConn {
		d.nc.Close()
	}
	return nil
}

func (d *driver) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return withTimeout(ctx, d.timeout)
}

func withTimeout(ctx context.Context, t time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || t <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, t)
}

// maxChain bounds how many deleted predecessors a write with the same
// message id is chained past.
const maxChain = 16

// Publish appends m to destination's subject and waits for the stream's
// acknowledgement (see the package doc, Durability). The portable store
// has checked the body against the limit; the headers are checked here.
func (d *driver) Publish(ctx context.Context, destination string, m *broker.Message) error {
	subject := d.subject(destination)
	msg := nats.NewMsg(subject)
	msg.Data = m.Body
	for k, v := range m.Headers {
		if k == "" || strings.ContainsAny(k, ":\r\n \t") || strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("jetstream: header %q cannot be carried by NATS (empty, or contains ':', whitespace or a line break): %w", k, broker.ErrInvalidArgument)
		}
		if k == headerMsgID || k == HeaderKey {
			continue
		}
		msg.Header[k] = []string{v}
	}
	if m.Key != nil {
		msg.Header[HeaderKey] = []string{base64.StdEncoding.EncodeToString(m.Key)}
	}
	id := msgID(destination, m)
	if id != "" {
		msg.Header[headerMsgID] = []string{id}
	}
	if hl := headerLen(msg.Header); len(m.Body)+hl > d.physical {
		return &classify.TooLargeError{What: "message", Destination: destination, Size: len(m.Body), Limit: max(0, d.physical-hl),
			Hint: fmt.Sprintf("its headers take %d of the %d bytes of max_payload", hl, d.physical)}
	}
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	for range maxChain {
		ack, err := d.js.PublishMsg(ctx, msg)
		if err != nil {
			var apiErr *natsjs.APIError
			if errors.Is(err, nats.ErrMaxPayload) || (errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeMessageExceedsMaximum) {
				return fmt.Errorf("jetstream: %w", &classify.TooLargeError{What: "message", Destination: destination, Size: len(m.Body), Limit: d.limit})
			}
			return fmt.Errorf("jetstream: publishing to %q: %w", subject, err)
		}
		if !ack.Duplicate {
			return nil
		}
		// The duplicate window remembered the id. If the earlier write is
		// still in the stream, this write was a retry and is absorbed. If
		// it is gone, it was replayed and acknowledged: this is the same
		// event failing again, and it must be stored, under an id chained
		// to the deleted one (deterministic, so a retry of this write is
		// absorbed in turn).
		_, err = d.stream.GetMsg(ctx, ack.Sequence)
		if err == nil {
			return nil
		}
		if !errors.Is(err, natsjs.ErrMsgNotFound) {
			return fmt.Errorf("jetstream: checking duplicate of %q at sequence %d: %w", subject, ack.Sequence, err)
		}
		id += ".after." + strconv.FormatUint(ack.Sequence, 10)
		msg.Header[headerMsgID] = []string{id}
	}
	return fmt.Errorf("jetstream: publishing to %q: more than %d deleted duplicates of message id %q", subject, maxChain, id)
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

// msgID returns the Nats-Msg-Id the adapter sets when it publishes m to
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
func msgID(destination string, m *broker.Message) string {
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
func (d *driver) consumer(ctx context.Context, destination string) (natsjs.Consumer, error) {
	d.mu.Lock()
	c := d.consumers[destination]
	d.mu.Unlock()
	if c != nil {
		return c, nil
	}
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	name := d.consumerName(destination)
	c, err := d.js.CreateOrUpdateConsumer(ctx, d.streamName, natsjs.ConsumerConfig{
		Durable:       name,
		Description:   "geodlq replay of " + destination,
		DeliverPolicy: natsjs.DeliverAllPolicy,
		AckPolicy:     natsjs.AckExplicitPolicy,
		AckWait:       d.ackWait,
		MaxDeliver:    d.maxDeliver,
		MaxAckPending: d.maxPending,
		FilterSubject: d.subject(destination),
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: consumer %q on stream %q: %w", name, d.streamName, err)
	}
	d.mu.Lock()
	d.consumers[destination] = c
	d.mu.Unlock()
	return c, nil
}

// forgetConsumer drops the cached consumer of destination when err says
// the server no longer has it, so the next Fetch creates it again.
func (d *driver) forgetConsumer(destination string, err error) {
	if errors.Is(err, natsjs.ErrConsumerNotFound) || errors.Is(err, natsjs.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders) {
		d.mu.Lock()
		delete(d.consumers, destination)
		d.mu.Unlock()
	}
}

// scanBatch is the pull size of a filtered Fetch.
const scanBatch = 256

// Fetch leases up to max records of destination matching f, oldest first,
// through the destination's durable pull consumer. Filters are applied
// here with [broker.Filter.MatchRecord]: records that do not match are
// leased while the scan goes on (so the scan moves past them) and released
// with a Nak before Fetch returns, so they are neither lost nor held. Each
// such skip counts as a delivery in the record's NumDelivered.
func (d *driver) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	cons, err := d.consumer(ctx, destination)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(d.lease)
	filtered := !f.IsZero()
	byEnvelope := f
	byEnvelope.IDs = nil
	decode := !byEnvelope.IsZero()
	var out []*broker.Record
	var skipped, kept []natsjs.Msg
	recreated := false
	// Records given back are Nak'ed synchronously: the server has
	// processed the Nak when the reply comes, so the next Fetch (of any
	// handle) sees them again.
	giveBack := func(msgs []natsjs.Msg) {
		if len(msgs) == 0 {
			return
		}
		nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.timeout)
		defer cancel()
		for _, m := range msgs {
			if _, err := d.nc.RequestWithContext(nctx, m.Reply(), []byte("-NAK")); err != nil {
				d.log.Warn("geodlq: jetstream nak failed; the record returns after its ack wait",
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
			d.forgetConsumer(destination, err)
			return nil, fmt.Errorf("jetstream: fetching from %q: %w", destination, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			rec, err := d.record(destination, m, deadline)
			if err != nil {
				skipped = append(skipped, m)
				d.log.Warn("geodlq: jetstream message without metadata skipped", slog.String("destination", destination), slog.Any("error", err))
				continue
			}
			if decode && len(out) < max {
				if env, err := envelope.Decode(rec.Message.Body); err == nil {
					rec.Envelope = env
				}
			}
			if len(out) >= max || (filtered && !f.MatchRecord(rec)) {
				skipped = append(skipped, m)
				continue
			}
			out = append(out, rec)
			kept = append(kept, m)
		}
		if err := batch.Error(); err != nil {
			giveBack(kept)
			d.forgetConsumer(destination, err)
			return nil, fmt.Errorf("jetstream: fetching from %q: %w", destination, err)
		}
		if n == 0 && !recreated && time.Since(asked) > 500*time.Millisecond {
			// A live consumer answers a no-wait pull at once, even when it
			// has nothing; silence until the pull expires means the server
			// has no such consumer (deleted by an operator): make it again.
			recreated = true
			ictx, cancel := d.withTimeout(ctx)
			_, ierr := cons.Info(ictx)
			cancel()
			if errors.Is(ierr, natsjs.ErrConsumerNotFound) {
				d.forgetConsumer(destination, ierr)
				if cons, err = d.consumer(ctx, destination); err != nil {
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

// record converts a leased message; its Lease is the lease deadline and
// the ack subject.
func (d *driver) record(destination string, m natsjs.Msg, deadline time.Time) (*broker.Record, error) {
	md, err := m.Metadata()
	if err != nil {
		return nil, err
	}
	msg := storedMessage(m.Data(), m.Headers())
	msg.DeliveryAttempt = int(md.NumDelivered)
	return &broker.Record{
		ID:           strconv.FormatUint(md.Sequence.Stream, 10),
		Destination:  destination,
		Message:      msg,
		Deliveries:   int(md.NumDelivered),
		Lease:        strconv.FormatInt(deadline.UnixNano(), 10) + " " + m.Reply(),
		LeaseExpires: deadline,
	}, nil
}

// storedMessage converts a stored NATS message: the body as is, the
// headers (first value of each) without the adapter's own, the key from
// [HeaderKey].
func storedMessage(data []byte, h nats.Header) *broker.Message {
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
		case headerMsgID:
		default:
			m.Headers[k] = vs[0]
		}
	}
	return m
}

// Ack acknowledges r with a double ack (the server confirms it), which on
// a work-queue stream deletes it. It fails with [broker.ErrLeaseLost] when
// r's lease has lapsed — the server may have handed the record to another
// consumer — or when this handle already settled r.
func (d *driver) Ack(ctx context.Context, r *broker.Record) error {
	return d.settle(ctx, r, []byte("+ACK"))
}

// Renew tells the server the record is in progress ("+WPI", waited for),
// which restarts its ack wait, and moves the lease's deadline to the
// store's lease from the moment it was sent. Like Ack, it refuses with
// [broker.ErrLeaseLost], without asking the server, a lease whose
// deadline has passed — the server may have handed the record to another
// consumer, and would take the progress from a stale holder as well — or
// a record this handle settled.
func (d *driver) Renew(ctx context.Context, r *broker.Record) error {
	deadline, reply, err := d.parseLease(r)
	if err != nil {
		return err
	}
	d.mu.Lock()
	_, done := d.settled[reply]
	d.mu.Unlock()
	sent := time.Now()
	switch {
	case done:
		return fmt.Errorf("jetstream: record %s/%s already settled: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	case !sent.Before(deadline):
		return fmt.Errorf("jetstream: record %s/%s: lease lapsed %v ago (ack wait %v): %w",
			r.Destination, r.ID, sent.Sub(deadline).Round(time.Millisecond), d.ackWait, broker.ErrLeaseLost)
	}
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	if _, err := d.nc.RequestWithContext(ctx, reply, []byte("+WPI")); err != nil {
		return fmt.Errorf("jetstream: renewing record %s/%s: %w", r.Destination, r.ID, err)
	}
	until := sent.Add(d.lease)
	r.Lease = strconv.FormatInt(until.UnixNano(), 10) + " " + reply
	r.LeaseExpires = until
	return nil
}

// Release gives r back at once with a Nak, waited for; the server
// redelivers it on the next fetch. It fails like Ack on a lapsed lease.
func (d *driver) Release(ctx context.Context, r *broker.Record) error {
	return d.settle(ctx, r, []byte("-NAK"))
}

func (d *driver) settle(ctx context.Context, r *broker.Record, body []byte) error {
	deadline, reply, err := d.parseLease(r)
	if err != nil {
		return err
	}
	now := time.Now()
	d.mu.Lock()
	if len(d.settled) > 4096 {
		for l, dl := range d.settled {
			if now.After(dl) {
				delete(d.settled, l)
			}
		}
	}
	_, done := d.settled[reply]
	if !done && now.Before(deadline) {
		d.settled[reply] = deadline
	}
	d.mu.Unlock()
	if done {
		return fmt.Errorf("jetstream: record %s/%s already settled: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	if !now.Before(deadline) {
		return fmt.Errorf("jetstream: record %s/%s: lease lapsed %v ago (ack wait %v): %w",
			r.Destination, r.ID, now.Sub(deadline).Round(time.Millisecond), d.ackWait, broker.ErrLeaseLost)
	}
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	if _, err := d.nc.RequestWithContext(ctx, reply, body); err != nil {
		d.mu.Lock()
		delete(d.settled, reply)
		d.mu.Unlock()
		return fmt.Errorf("jetstream: settling record %s/%s: %w", r.Destination, r.ID, err)
	}
	return nil
}

// parseLease checks that r's lease was issued for r by a store reading the
// same stream with the same replayer.
func (d *driver) parseLease(r *broker.Record) (time.Time, string, error) {
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
	if toks[2] != d.streamName || toks[3] != d.consumerName(r.Destination) || toks[5] != r.ID {
		return bad("lease belongs to another stream, consumer or record")
	}
	return time.Unix(0, nanos), reply, nil
}
