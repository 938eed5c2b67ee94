package kafka

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// Header names the Store adds to every record it writes, next to the
// [broker.Headers] of the envelope. Like Spring Kafka's
// kafka_dlt-original-* headers they say where the dead-lettered record came
// from, but as decimal text rather than big-endian binary.
const (
	// HeaderOriginalTopic is the source record's topic.
	HeaderOriginalTopic = "dlq-original-topic"
	// HeaderOriginalPartition is the source record's partition.
	HeaderOriginalPartition = "dlq-original-partition"
	// HeaderOriginalOffset is the source record's offset.
	HeaderOriginalOffset = "dlq-original-offset"
	// HeaderOriginalTimestamp is the source record's timestamp, in
	// milliseconds since the Unix epoch (Kafka's record timestamp unit).
	HeaderOriginalTimestamp = "dlq-original-timestamp"
	// HeaderPublishedAt is when the Store published the record, in UTC with
	// nine fractional digits (fixed width). Fetch orders records of
	// different partitions by it.
	HeaderPublishedAt = "dlq-published-at"
	// HeaderHeadersDropped counts the headers left out to keep the record's
	// headers within [Options.HeaderBudget]. Absent when none were.
	HeaderHeadersDropped = "dlq-headers-dropped"
)

// Defaults.
const (
	// TopicMaxMessageBytes is Kafka's default max.message.bytes
	// (message.max.bytes on the broker): the largest record batch a topic
	// accepts, key, headers and framing included.
	TopicMaxMessageBytes = 1048588
	// DefaultHeaderBudget is the default [Options.HeaderBudget].
	DefaultHeaderBudget = 8 << 10
	// RecordOverhead is the room the Store keeps, beyond the envelope and
	// the header budget, for the record key and Kafka's batch and record
	// framing when it sizes batches and topics.
	RecordOverhead = 1 << 10
	// DefaultLeaseTTL is the default [Options.LeaseTTL], Kafka's default
	// max.poll.interval.ms.
	DefaultLeaseTTL = 5 * time.Minute
	// DefaultJoinWait is the default [Options.JoinWait].
	DefaultJoinWait = 10 * time.Second
	// DefaultFetchTimeout is the default [Options.FetchTimeout].
	DefaultFetchTimeout = 30 * time.Second
	// DefaultMaxBufferedBytes is the default [Options.MaxBufferedBytes].
	DefaultMaxBufferedBytes = 64 << 20
)

// publishedAtLayout is RFC 3339 with exactly nine fractional digits, so the
// header has the same length on every record.
const publishedAtLayout = "2006-01-02T15:04:05.000000000Z07:00"

// TopicOptions configures the dead-letter topics a [Store] creates.
type TopicOptions struct {
	// Partitions is the partition count of a created topic. Default -1:
	// the broker's num.partitions.
	Partitions int32
	// ReplicationFactor is the replication factor of a created topic.
	// Default -1: the broker's default.replication.factor.
	ReplicationFactor int16
	// Configs are topic configs for a created topic. max.message.bytes
	// defaults to MaxMessageBytes + HeaderBudget + [RecordOverhead], so the
	// topic accepts every record the Store does.
	Configs map[string]*string
}

// Options configures a [Store]. The zero value and nil are valid.
type Options struct {
	// Naming names the dead-letter topic of a source topic. Default
	// [DefaultNaming]: "<topic>.retry.dlt" and "<topic>.poison.dlt" (Spring
	// Kafka's DeadLetterPublishingRecoverer uses "<topic>-dlt").
	Naming func(sourceTopic string, d classify.Route) string

	// MaxMessageBytes is the largest record value (encoded envelope)
	// Publish accepts; larger ones are refused with [*classify.TooLargeError]
	// before anything is produced, and [Store.MaxMessageBytes] reports it
	// so the envelope builder offloads to stay under it. It mirrors the
	// topic's max.message.bytes, which Kafka applies to the whole record
	// batch: so the default is min(1048588, the client's
	// ProducerBatchMaxBytes) - HeaderBudget - [RecordOverhead], 1,039,372
	// bytes with [ProducerOpts] and 990,796 with kgo's default batch size.
	// New fails when MaxMessageBytes + HeaderBudget + RecordOverhead exceeds
	// the client's ProducerBatchMaxBytes (kgo would refuse such records).
	MaxMessageBytes int
	// HeaderBudget bounds the bytes of header keys and values of a record
	// the Store writes. Headers are kept in priority order — the envelope's
	// dlq-* headers and the dlq-original-* provenance first, then other
	// dlq-* headers, then the rest by name — and whatever does not fit is
	// left out and counted in [HeaderHeadersDropped]. Headers the Store
	// computes replace incoming ones of the same name, so re-dead-lettering
	// a record never makes its headers grow. Default 8 KiB; at least 256.
	HeaderBudget int
	// Topics, when set, makes Publish create a missing destination topic
	// once (a CreateTopics request; an existing topic is left as it is).
	// Default nil: Publish creates nothing, and topics must exist or be
	// auto-created by the broker (auto.create.topics.enable with
	// kgo.AllowAutoTopicCreation on the client).
	Topics *TopicOptions

	// ReplayGroup names the consumer group that Fetch, Ack and Release use
	// on a dead-letter topic. Every Store with the same group shares the
	// topic's records the Kafka way: each partition is read by one member
	// at a time. Default "geodlq-replay." + destination.
	ReplayGroup func(destination string) string
	// LeaseTTL is how long a fetched record may stay neither acknowledged
	// nor released, and how long a Store may go without fetching from a
	// destination it holds partitions of. Past it the Store leaves the
	// destination's group, as a Java consumer that exceeds
	// max.poll.interval.ms does: every lease it holds there is lost, and
	// the unacknowledged records go to the group's other members (or to
	// this Store's next Fetch, which rejoins). It also sets the group's
	// rebalance.timeout.ms to LeaseTTL + 30s, so a member finishing its
	// leases during a rebalance is not evicted. Default 5m, Kafka's
	// max.poll.interval.ms.
	LeaseTTL time.Duration
	// JoinWait is how long Fetch waits for the group to give this Store
	// its partitions — joining, or a rebalance while another member
	// finishes its leases — before it returns no records. Default 10s.
	JoinWait time.Duration
	// FetchTimeout bounds how long Fetch reads to catch up with the end of
	// the partitions it holds; past it Fetch fails rather than return a
	// partial view. Default 30s.
	FetchTimeout time.Duration
	// MaxBufferedBytes bounds the record bytes a Store holds per
	// destination: everything fetched and not yet acknowledged, including
	// records a filter skipped. When full, Fetch stops reading and serves
	// from what it holds; records further along are read once earlier ones
	// are acknowledged. Default 64 MiB.
	MaxBufferedBytes int
	// ConsumerOpts tune the consumer clients Fetch creates (one per
	// destination, made from the client-level options of the Store's
	// client: seed brokers, TLS, SASL, dialer…): for example
	// kgo.SessionTimeout (session.timeout.ms, kgo default 45s),
	// kgo.HeartbeatInterval (heartbeat.interval.ms, default 3s),
	// kgo.Balancers (default: the eager kgo.StickyBalancer), kgo.FetchMaxBytes.
	// They must not set the group, topics, commit mode or partition
	// callbacks, which the Store owns and applies last.
	ConsumerOpts []kgo.Opt

	// Logger receives a record per failed commit, lost lease and left
	// group. Nil discards.
	Logger *slog.Logger
}

// DefaultNaming names dead-letter topics "<topic>.retry.dlt" and
// "<topic>.poison.dlt", as [broker.DefaultDestination] does.
func DefaultNaming(sourceTopic string, d classify.Route) string {
	return sourceTopic + "." + d.String() + ".dlt"
}

// Store is a Kafka dead-letter store: a [broker.Publisher] and
// [broker.Limiter] that produces to dead-letter topics through the user's
// client, and a [broker.DeadLetterSource] that reads them back through a
// consumer group. It is safe for concurrent use.
type Store struct {
	cl     *kgo.Client
	adm    *kadm.Client
	base   []kgo.Opt
	naming func(string, classify.Route) string
	limit  int
	budget int
	topics *TopicOptions
	group  func(string) string
	lease  time.Duration
	join   time.Duration
	fetchT time.Duration
	bufMax int
	copts  []kgo.Opt
	log    *slog.Logger

	lastPub atomic.Int64
	created sync.Map // topic name → struct{}

	mu      sync.Mutex
	members map[string]*member
	closed  bool
}

var (
	_ broker.Publisher        = (*Store)(nil)
	_ broker.Limiter          = (*Store)(nil)
	_ broker.DeadLetterSource = (*Store)(nil)
)

// New returns a Store that produces with cl. cl must write with acks=all and
// the idempotent producer (kgo's defaults; [ProducerOpts] states them) and
// must not be transactional: New fails otherwise, so that Publish returning
// nil always means the record is on every in-sync replica. New does no I/O;
// the Store does not close cl.
func New(cl *kgo.Client, opts *Options) (*Store, error) {
	if cl == nil {
		return nil, errors.New("kafka: New: nil client")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if a, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); ok && a != kgo.AllISRAcks() {
		return nil, errors.New("kafka: New: the client must produce with kgo.RequiredAcks(kgo.AllISRAcks()) (acks=all)")
	}
	if off, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		return nil, errors.New("kafka: New: the client must use the idempotent producer (remove kgo.DisableIdempotentWrite)")
	}
	if id, _ := cl.OptValue(kgo.TransactionalID).(string); id != "" {
		return nil, errors.New("kafka: New: the client must not be transactional")
	}
	if o.HeaderBudget == 0 {
		o.HeaderBudget = DefaultHeaderBudget
	}
	if o.HeaderBudget < 256 {
		return nil, fmt.Errorf("kafka: New: HeaderBudget %d is below the minimum of 256 bytes", o.HeaderBudget)
	}
	batch := TopicMaxMessageBytes
	if v, ok := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32); ok && v > 0 {
		batch = int(v)
	}
	room := batch - o.HeaderBudget - RecordOverhead
	switch {
	case o.MaxMessageBytes < 0:
		return nil, errors.New("kafka: New: negative MaxMessageBytes")
	case o.MaxMessageBytes == 0:
		o.MaxMessageBytes = min(TopicMaxMessageBytes, batch) - o.HeaderBudget - RecordOverhead
		if o.MaxMessageBytes <= 0 {
			return nil, fmt.Errorf("kafka: New: the client's ProducerBatchMaxBytes (%d) leaves no room for an envelope next to a %d-byte header budget", batch, o.HeaderBudget)
		}
	case o.MaxMessageBytes > room:
		return nil, fmt.Errorf("kafka: New: MaxMessageBytes %d + HeaderBudget %d + %d bytes of record overhead exceed the client's ProducerBatchMaxBytes %d; add kafka.ProducerOpts to the client or lower MaxMessageBytes to %d",
			o.MaxMessageBytes, o.HeaderBudget, RecordOverhead, batch, room)
	}
	if o.Naming == nil {
		o.Naming = DefaultNaming
	}
	if o.ReplayGroup == nil {
		o.ReplayGroup = func(d string) string { return "geodlq-replay." + d }
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.JoinWait <= 0 {
		o.JoinWait = DefaultJoinWait
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = DefaultFetchTimeout
	}
	if o.MaxBufferedBytes <= 0 {
		o.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{
		cl:      cl,
		adm:     kadm.NewClient(cl),
		base:    clientLevel(cl.Opts()),
		naming:  o.Naming,
		limit:   o.MaxMessageBytes,
		budget:  o.HeaderBudget,
		topics:  o.Topics,
		group:   o.ReplayGroup,
		lease:   o.LeaseTTL,
		join:    o.JoinWait,
		fetchT:  o.FetchTimeout,
		bufMax:  o.MaxBufferedBytes,
		copts:   slices.Clone(o.ConsumerOpts),
		log:     log,
		members: map[string]*member{},
	}, nil
}

// clientLevel keeps the options that configure the connection (seed
// brokers, TLS, SASL, dialer, client id, logger, …) and drops producer,
// consumer and group options.
func clientLevel(opts []kgo.Opt) []kgo.Opt {
	var out []kgo.Opt
	for _, o := range opts {
		switch o.(type) {
		case kgo.ProducerOpt, kgo.ConsumerOpt, kgo.GroupOpt:
			continue
		}
		out = append(out, o)
	}
	return out
}

// ProducerOpts returns the producer options a Store's client should have
// for opts (nil: the defaults): acks=all (kgo's default, stated so that it
// survives edits) and a batch size that fits an envelope of MaxMessageBytes
// with a full header budget (Kafka's 1048588 bytes when MaxMessageBytes is
// unset). Idempotent writes are kgo's default too: do not add
// kgo.DisableIdempotentWrite.
func ProducerOpts(opts *Options) []kgo.Opt {
	var o Options
	if opts != nil {
		o = *opts
	}
	budget := o.HeaderBudget
	if budget == 0 {
		budget = DefaultHeaderBudget
	}
	batch := TopicMaxMessageBytes
	if o.MaxMessageBytes > 0 {
		batch = max(batch, o.MaxMessageBytes+budget+RecordOverhead)
	}
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(int32(batch)),
	}
}

// MaxMessageBytes implements [broker.Limiter]: the largest envelope Publish
// accepts, for every destination.
func (s *Store) MaxMessageBytes(string) int { return s.limit }

// HeaderBudget returns the configured [Options.HeaderBudget].
func (s *Store) HeaderBudget() int { return s.budget }

// Topic returns the dead-letter topic for events of sourceTopic that go to
// d, by [Options.Naming].
func (s *Store) Topic(sourceTopic string, d classify.Route) string {
	return s.naming(sourceTopic, d)
}

// Destination names the dead-letter topic for m by [Options.Naming]; it
// fits [broker.ProcessorOptions].Destination. A message without a source
// topic goes to the topics named after "geodlq".
func (s *Store) Destination(m *broker.Message, d classify.Route) string {
	topic := "geodlq"
	if m != nil && m.Source != nil && m.Source.Topic != "" {
		topic = m.Source.Topic
	}
	return s.naming(topic, d)
}

// Client returns the client the Store produces with.
func (s *Store) Client() *kgo.Client { return s.cl }

// As gives access to the underlying client: it sets *(**kgo.Client) and
// *(**kadm.Client) targets and reports whether it did.
func (s *Store) As(target any) bool {
	switch t := target.(type) {
	case **kgo.Client:
		*t = s.cl
	case **kadm.Client:
		*t = s.adm
	default:
		return false
	}
	return true
}

// CreateTopics creates the named topics with [Options.Topics] (or broker
// defaults when it is nil, with a max.message.bytes that fits the Store's
// records). Topics that already exist are left as they are.
func (s *Store) CreateTopics(ctx context.Context, topics ...string) error {
	for _, t := range topics {
		if err := s.createTopic(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) createTopic(ctx context.Context, topic string) error {
	partitions, rf := int32(-1), int16(-1)
	configs := map[string]*string{}
	if s.topics != nil {
		if s.topics.Partitions != 0 {
			partitions = s.topics.Partitions
		}
		if s.topics.ReplicationFactor != 0 {
			rf = s.topics.ReplicationFactor
		}
		for k, v := range s.topics.Configs {
			configs[k] = v
		}
	}
	if _, ok := configs["max.message.bytes"]; !ok {
		v := strconv.Itoa(s.limit + s.budget + RecordOverhead)
		configs["max.message.bytes"] = &v
	}
	resp, err := s.adm.CreateTopic(ctx, partitions, rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("kafka: creating topic %q: %w", topic, err)
	}
	s.created.Store(topic, struct{}{})
	return nil
}

// Publish produces m to the topic named destination and returns once every
// in-sync replica has it (acks=all). The record's key is m.Key, its value
// m.Body, and its headers m.Headers plus the dlq-original-* provenance
// (from the envelope's source when the body is a dlq.v1 envelope, else from
// m.Source) and [HeaderPublishedAt], within the header budget. A body over
// MaxMessageBytes is refused with [*classify.TooLargeError] before anything
// is produced, and so is a record the client or broker finds too large;
// nothing is ever truncated.
//
// If ctx ends after the record was sent, Publish returns an error although
// the record may yet be written: a dead-letter write may then happen twice,
// and the idempotency key in the envelope makes the duplicate harmless.
func (s *Store) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m == nil {
		return errors.New("kafka: Publish: nil message")
	}
	if destination == "" {
		return errors.New("kafka: Publish: empty destination")
	}
	if s.isClosed() {
		return broker.ErrClosed
	}
	if len(m.Body) > s.limit {
		return &classify.TooLargeError{Destination: destination, Size: len(m.Body), Limit: s.limit}
	}
	if s.topics != nil {
		if _, ok := s.created.Load(destination); !ok {
			if err := s.createTopic(ctx, destination); err != nil {
				return err
			}
		}
	}
	rec := &kgo.Record{
		Topic:   destination,
		Key:     bytes.Clone(m.Key),
		Value:   bytes.Clone(m.Body),
		Headers: s.recordHeaders(m),
	}
	if err := s.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) {
			size := len(rec.Key) + len(rec.Value)
			for _, h := range rec.Headers {
				size += len(h.Key) + len(h.Value)
			}
			return fmt.Errorf("kafka: publish to %q: %w: %w", destination,
				&classify.TooLargeError{Destination: destination, Size: size, Limit: s.limit + s.budget + RecordOverhead}, err)
		}
		if errors.Is(err, kgo.ErrClientClosed) {
			return fmt.Errorf("kafka: publish to %q: %w: %w", destination, broker.ErrClosed, err)
		}
		return fmt.Errorf("kafka: publish to %q: %w", destination, err)
	}
	return nil
}

// publishedAt returns the publish time, strictly increasing per Store so
// that records this Store writes in sequence sort in that sequence.
func (s *Store) publishedAt() time.Time {
	now := time.Now().UnixNano()
	for {
		last := s.lastPub.Load()
		next := max(now, last+1)
		if s.lastPub.CompareAndSwap(last, next) {
			return time.Unix(0, next).UTC()
		}
	}
}

// envelopeSource returns the source recorded in body when body is a dlq.v1
// envelope.
func envelopeSource(body []byte) *envelope.Source {
	if len(body) == 0 || body[0] != '{' {
		return nil
	}
	var probe struct {
		Schema string           `json:"schema_version"`
		Source *envelope.Source `json:"source"`
	}
	if json.Unmarshal(body, &probe) != nil || probe.Schema != envelope.SchemaVersion {
		return nil
	}
	return probe.Source
}

// core lists the headers kept first, in order.
var core = []string{
	broker.HeaderIdempotencyKey, broker.HeaderEventID, broker.HeaderClass, broker.HeaderStage,
	broker.HeaderRoute, broker.HeaderSchema, broker.HeaderEPSG,
	HeaderOriginalTopic, HeaderOriginalPartition, HeaderOriginalOffset, HeaderOriginalTimestamp,
	HeaderPublishedAt,
}

// recordHeaders builds a record's headers from m within the header budget.
func (s *Store) recordHeaders(m *broker.Message) []kgo.RecordHeader {
	h := make(map[string]string, len(m.Headers)+6)
	for k, v := range m.Headers {
		if k == HeaderHeadersDropped || k == HeaderPublishedAt {
			continue
		}
		h[k] = v
	}
	var src *envelope.Source
	if m.Envelope != nil {
		src = m.Envelope.Source
	} else {
		src = envelopeSource(m.Body)
	}
	if src == nil {
		src = m.Source
	}
	if src != nil {
		for _, k := range []string{HeaderOriginalTopic, HeaderOriginalPartition, HeaderOriginalOffset, HeaderOriginalTimestamp} {
			delete(h, k)
		}
		if src.Topic != "" {
			h[HeaderOriginalTopic] = src.Topic
		}
		if src.Partition != nil {
			h[HeaderOriginalPartition] = strconv.FormatInt(int64(*src.Partition), 10)
		}
		if src.Offset != nil {
			h[HeaderOriginalOffset] = strconv.FormatInt(*src.Offset, 10)
		}
		if src.Timestamp != nil && !src.Timestamp.IsZero() {
			h[HeaderOriginalTimestamp] = strconv.FormatInt(src.Timestamp.UnixMilli(), 10)
		}
	}
	h[HeaderPublishedAt] = s.publishedAt().Format(publishedAtLayout)
	return budgetHeaders(h, s.budget)
}

// budgetHeaders orders h — core headers, then other dlq-* headers, then
// the rest, each group by name — and keeps those that fit budget, counting
// the others in HeaderHeadersDropped.
func budgetHeaders(h map[string]string, budget int) []kgo.RecordHeader {
	order := make([]string, 0, len(h))
	for _, k := range core {
		if _, ok := h[k]; ok {
			order = append(order, k)
		}
	}
	var dlq, rest []string
	for k := range h {
		switch {
		case slices.Contains(core, k):
		case strings.HasPrefix(k, "dlq-"):
			dlq = append(dlq, k)
		default:
			rest = append(rest, k)
		}
	}
	slices.Sort(dlq)
	slices.Sort(rest)
	order = append(append(order, dlq...), rest...)

	// Room for the dropped counter, should it be needed.
	avail := budget - len(HeaderHeadersDropped) - 10
	out := make([]kgo.RecordHeader, 0, len(order)+1)
	used, dropped := 0, 0
	for _, k := range order {
		v := h[k]
		if n := len(k) + len(v); used+n <= avail {
			used += n
			out = append(out, kgo.RecordHeader{Key: k, Value: []byte(v)})
			continue
		}
		dropped++
	}
	if dropped > 0 {
		out = append(out, kgo.RecordHeader{Key: HeaderHeadersDropped, Value: []byte(strconv.Itoa(dropped))})
	}
	return out
}

// HeaderBytes returns the bytes of header keys and values in hs, the
// quantity [Options.HeaderBudget] bounds.
func HeaderBytes(hs []kgo.RecordHeader) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// MessageOf converts a consumed record into a [broker.Message] for
// [broker.Processor.Process]: key, value and headers (the last of repeated
// header keys wins), and Kafka provenance (topic, partition, offset, key,
// timestamp). DeliveryAttempt is 0 because Kafka keeps no delivery count:
// the Processor counts attempts from 1 on every consumption.
func MessageOf(r *kgo.Record) *broker.Message {
	m := &broker.Message{Key: r.Key, Body: r.Value}
	if len(r.Headers) > 0 {
		m.Headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			m.Headers[h.Key] = string(h.Value)
		}
	}
	part, off := r.Partition, r.Offset
	src := &envelope.Source{System: "kafka", Topic: r.Topic, Partition: &part, Offset: &off, Key: r.Key}
	if !r.Timestamp.IsZero() {
		ts := r.Timestamp.UTC()
		src.Timestamp = &ts
	}
	m.Source = src
	return m
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close leaves every replay group the Store joined, committing what was
// acknowledged; leases still held are lost and their records come back to
// the group. Later calls fail with [broker.ErrClosed]. Close does not close
// the client passed to New.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ms := make([]*member, 0, len(s.members))
	for _, m := range s.members {
		ms = append(ms, m)
	}
	clear(s.members)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { m.shutdown("store closed") })
	}
	wg.Wait()
	return nil
}
