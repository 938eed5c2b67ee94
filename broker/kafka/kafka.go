package kafka

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// Header names the store adds to every record it writes, next to the
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
	// HeaderPublishedAt is when the store published the record, in UTC
	// with nine fractional digits (fixed width). Fetch and List order
	// records of different partitions by it, and Destinations recognises
	// the topics a geodlq store wrote by it.
	HeaderPublishedAt = "dlq-published-at"
	// HeaderHeadersDropped counts the headers left out to keep the record's
	// headers within [Options.HeaderBudget]. Absent when none were.
	HeaderHeadersDropped = "dlq-headers-dropped"
)

// Defaults and limits.
const (
	// topicMaxMessageBytes is Kafka's default max.message.bytes
	// (message.max.bytes on the broker): the largest record batch a topic
	// accepts, key, headers and framing included.
	topicMaxMessageBytes = 1048588
	// defaultHeaderBudget is the default Options.HeaderBudget.
	defaultHeaderBudget = 8 << 10
	// minHeaderBudget is the smallest Options.HeaderBudget.
	minHeaderBudget = 256
	// recordOverhead is the room kept, beyond the envelope and the header
	// budget, for the record key and Kafka's batch and record framing when
	// batches and topics are sized.
	recordOverhead = 1 << 10
	// defaultLeaseTTL is the default LeaseTTL, Kafka's default
	// max.poll.interval.ms.
	defaultLeaseTTL = 5 * time.Minute
	// defaultJoinWait is the default Options.JoinWait.
	defaultJoinWait = 10 * time.Second
	// defaultFetchTimeout is the default Options.FetchTimeout.
	defaultFetchTimeout = 30 * time.Second
	// defaultMaxBufferedBytes is the default Options.MaxBufferedBytes.
	defaultMaxBufferedBytes = 64 << 20
	// maxTopicLen is the longest Kafka topic name.
	maxTopicLen = 249
)

// publishedAtLayout is RFC 3339 with exactly nine fractional digits, so the
// header has the same length on every record.
const publishedAtLayout = "2006-01-02T15:04:05.000000000Z07:00"

// TopicOptions configures the dead-letter topics a store creates (see
// [Options.Topics]).
type TopicOptions struct {
	// Partitions is the partition count of a created topic. Default -1:
	// the broker's num.partitions.
	Partitions int32
	// ReplicationFactor is the replication factor of a created topic.
	// Default -1: the broker's default.replication.factor.
	ReplicationFactor int16
	// Configs are topic configs for a created topic. max.message.bytes
	// defaults to MaxMessageBytes + HeaderBudget + 1024 bytes of record
	// framing, so the topic accepts every record the store does.
	Configs map[string]*string
}

// Options configures [New]. The zero value and nil are valid.
type Options struct {
	// StoreOptions: LeaseTTL is how long a fetched record may stay
	// neither acknowledged nor released, and how long a store may go
	// without fetching from a destination it holds partitions of; past it
	// the store leaves the destination's replay group, as a Java consumer
	// past max.poll.interval.ms does (see the package doc). It also sets
	// the group's rebalance.timeout.ms to LeaseTTL + 30s. Default 5m,
	// Kafka's max.poll.interval.ms.
	//
	// MaxMessageBytes is the largest record value (encoded envelope) the
	// store accepts and reports as its limit, so the envelope builder
	// offloads to stay under it. Kafka applies the topic's
	// max.message.bytes to the whole record batch, so the default is
	// min(1048588, the client's ProducerBatchMaxBytes) - HeaderBudget -
	// 1024 bytes of framing: 1,039,372 bytes with [ProducerOpts], 990,796
	// with kgo's default batch size. New fails when MaxMessageBytes +
	// HeaderBudget + 1024 exceeds the client's ProducerBatchMaxBytes (kgo
	// would refuse such records).
	broker.StoreOptions

	// HeaderBudget bounds the bytes of header keys and values of a record
	// the store writes, and is part of the limit computation above.
	// Headers are kept in priority order — the envelope's dlq-* headers
	// and the dlq-original-* provenance first, then other dlq-* headers,
	// then the rest by name — and whatever does not fit is left out and
	// counted in [HeaderHeadersDropped]. Headers the store computes
	// replace incoming ones of the same name, so re-dead-lettering a
	// record never makes its headers grow. Default 8 KiB; at least 256.
	HeaderBudget int
	// Topics, when set, makes Publish create a missing destination topic
	// once (a CreateTopics request; an existing topic is left as it is),
	// and makes a missing topic an empty destination for Fetch and List.
	// Default nil: nothing is created, and Publish, Fetch and List of a
	// topic that does not exist fail with an error wrapping
	// [broker.ErrNoStore] (unless the client has
	// kgo.AllowAutoTopicCreation, in which case Publish leaves it to the
	// broker's auto.create.topics.enable).
	Topics *TopicOptions

	// ReplayGroup names the consumer group that Fetch, Ack and Release use
	// on a dead-letter topic, and whose committed offsets List and
	// Destinations read to tell pending records from replayed ones. Every
	// store with the same group shares the topic's records the Kafka way:
	// each partition is read by one member at a time. Default
	// "geodlq-replay." + destination.
	ReplayGroup func(destination string) string
	// JoinWait is how long Fetch waits for the group to give this store
	// its partitions — joining, or a rebalance while another member
	// finishes its leases — before it returns no records. Default 10s.
	JoinWait time.Duration
	// FetchTimeout bounds how long Fetch reads to catch up with the end of
	// the partitions it holds; past it Fetch fails rather than return a
	// partial view. Default 30s.
	FetchTimeout time.Duration
	// MaxBufferedBytes bounds the record bytes a store holds per
	// destination for Fetch: everything fetched and not yet acknowledged,
	// including records a filter skipped. When full, Fetch stops reading
	// and serves from what it holds; records further along are read once
	// earlier ones are acknowledged. Default 64 MiB.
	MaxBufferedBytes int
	// ConsumerOpts tune the consumer clients Fetch creates (one per
	// destination, made from the client-level options of the store's
	// client: seed brokers, TLS, SASL, dialer…): for example
	// kgo.SessionTimeout (session.timeout.ms, kgo default 45s),
	// kgo.HeartbeatInterval (heartbeat.interval.ms, default 3s),
	// kgo.FetchMaxWait (fetch.max.wait.ms; here 500ms, so that newly
	// assigned partitions are read soon),
	// kgo.Balancers (default: kgo.CooperativeStickyBalancer; with an eager
	// balancer every rebalance makes every member wait for its leases),
	// kgo.FetchMaxBytes.
	// They must not set the group, topics, commit mode or partition
	// callbacks, which the store owns and applies last.
	ConsumerOpts []kgo.Opt
}

// driver is the Kafka [broker.Driver]: it produces to dead-letter topics
// through the user's client, reads them back through a consumer group per
// topic (reader.go), and lists them with direct fetches (list.go). It is
// safe for concurrent use.
type driver struct {
	cl       *kgo.Client
	adm      *kadm.Client
	base     []kgo.Opt
	decomp   kgo.Decompressor
	limit    int
	budget   int
	topics   *TopicOptions
	group    func(string) string
	lease    time.Duration
	join     time.Duration
	fetchT   time.Duration
	bufMax   int
	copts    []kgo.Opt
	log      *slog.Logger
	autoTop  bool // the client lets the broker auto-create topics
	readOnly bool // opened read-only: lists, never writes
	ownsCl   bool // the client was made by the URL opener: Close closes it

	lastPub atomic.Int64
	known   sync.Map // topic name → struct{}: created or seen to exist

	mu      sync.Mutex
	members map[string]*member
	closed  bool
}

var (
	_ broker.Driver  = (*driver)(nil)
	_ broker.Limiter = (*driver)(nil)
	_ broker.Lister  = (*driver)(nil)
	_ broker.Aser    = (*driver)(nil)
)

// errReadOnly is returned by writes and leases of a store opened read-only.
var errReadOnly = fmt.Errorf("kafka: %w", broker.ErrReadOnly)

// New returns a Kafka dead-letter store that produces with cl. cl must
// write with acks=all and the idempotent producer (kgo's defaults;
// [ProducerOpts] states them) and must not be transactional: New fails
// otherwise, so that Publish returning nil always means the record is on
// every in-sync replica. New does no I/O; the store does not close cl.
func New(cl *kgo.Client, opts *Options) (*broker.Store, error) {
	d, o, err := newDriver(cl, opts)
	if err != nil {
		return nil, err
	}
	return broker.NewStore("kafka", d, &o.StoreOptions), nil
}

func newDriver(cl *kgo.Client, opts *Options) (*driver, Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if cl == nil {
		return nil, o, fmt.Errorf("kafka: New: nil client: %w", broker.ErrInvalidArgument)
	}
	if a, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); ok && a != kgo.AllISRAcks() {
		return nil, o, errors.New("kafka: New: the client must produce with kgo.RequiredAcks(kgo.AllISRAcks()) (acks=all)")
	}
	if off, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		return nil, o, errors.New("kafka: New: the client must use the idempotent producer (remove kgo.DisableIdempotentWrite)")
	}
	if id, _ := cl.OptValue(kgo.TransactionalID).(string); id != "" {
		return nil, o, errors.New("kafka: New: the client must not be transactional")
	}
	if o.HeaderBudget == 0 {
		o.HeaderBudget = defaultHeaderBudget
	}
	if o.HeaderBudget < minHeaderBudget {
		return nil, o, fmt.Errorf("kafka: New: HeaderBudget %d is below the minimum of %d bytes", o.HeaderBudget, minHeaderBudget)
	}
	batch := topicMaxMessageBytes
	if v, ok := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32); ok && v > 0 {
		batch = int(v)
	}
	room := batch - o.HeaderBudget - recordOverhead
	switch {
	case o.MaxMessageBytes < 0:
		return nil, o, errors.New("kafka: New: negative MaxMessageBytes")
	case o.MaxMessageBytes == 0:
		o.MaxMessageBytes = min(topicMaxMessageBytes, batch) - o.HeaderBudget - recordOverhead
		if o.MaxMessageBytes <= 0 {
			return nil, o, fmt.Errorf("kafka: New: the client's ProducerBatchMaxBytes (%d) leaves no room for an envelope next to a %d-byte header budget", batch, o.HeaderBudget)
		}
	case o.MaxMessageBytes > room:
		return nil, o, fmt.Errorf("kafka: New: MaxMessageBytes %d + HeaderBudget %d + %d bytes of record overhead exceed the client's ProducerBatchMaxBytes %d; add kafka.ProducerOpts to the client or lower MaxMessageBytes to %d",
			o.MaxMessageBytes, o.HeaderBudget, recordOverhead, batch, room)
	}
	if o.ReplayGroup == nil {
		o.ReplayGroup = func(d string) string { return "geodlq-replay." + d }
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = defaultLeaseTTL
	}
	if o.JoinWait <= 0 {
		o.JoinWait = defaultJoinWait
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = defaultFetchTimeout
	}
	if o.MaxBufferedBytes <= 0 {
		o.MaxBufferedBytes = defaultMaxBufferedBytes
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The client's own decompressor is bounded by its
	// MaxDecompressBatchBytes (kgo default 1 GiB): List decompresses what
	// it fetches with it.
	decomp, _ := cl.OptValue(kgo.WithDecompressor).(kgo.Decompressor)
	if decomp == nil {
		decomp = kgo.DefaultDecompressor()
	}
	auto, _ := cl.OptValue(kgo.AllowAutoTopicCreation).(bool)
	return &driver{
		cl:      cl,
		adm:     kadm.NewClient(cl),
		base:    clientLevel(cl.Opts()),
		decomp:  decomp,
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
		autoTop: auto,
		members: map[string]*member{},
	}, o, nil
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

// ProducerOpts returns the producer options a store's client should have
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
		budget = defaultHeaderBudget
	}
	batch := topicMaxMessageBytes
	if o.MaxMessageBytes > 0 {
		batch = max(batch, o.MaxMessageBytes+budget+recordOverhead)
	}
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(int32(min(batch, 1<<30))),
	}
}

// Destination names the dead-letter topic of m for route r:
// "<topic>.retry.dlt" or "<topic>.poison.dlt" after m's source topic
// ("geodlq" when m has none), the names [broker.DefaultDestination] gives.
// Use it as [broker.ProcessorOptions].Destination with a Kafka store. A
// name Kafka would refuse — a source topic with characters outside
// [a-zA-Z0-9._-] (a NATS subject, a queue URL), or one so long that the
// suffix takes it past Kafka's 249 bytes — is made valid: those
// characters become '_', the source topic is cut to fit, and 8 hex digits
// of its SHA-256 keep distinct sources apart.
func Destination(m *broker.Message, r classify.Route) string {
	topic := "geodlq"
	if m != nil && m.Source != nil && m.Source.Topic != "" {
		topic = m.Source.Topic
	}
	suffix := "." + r.String() + ".dlt"
	if name := topic + suffix; validTopic(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(topic))
	tag := "-" + hex.EncodeToString(sum[:4])
	var b strings.Builder
	for i := 0; i < len(topic); i++ {
		if c := topic[i]; legalTopicByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	safeSuffix := []byte(suffix)
	for i, c := range safeSuffix {
		if !legalTopicByte(c) {
			safeSuffix[i] = '_'
		}
	}
	base := b.String()
	if room := maxTopicLen - len(tag) - len(safeSuffix); len(base) > room {
		base = base[:max(room, 0)]
	}
	return base + tag + string(safeSuffix)
}

func legalTopicByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// validTopic reports a name Kafka refuses as a topic: empty, "." or "..",
// longer than 249 bytes, or with a byte outside [a-zA-Z0-9._-].
func validTopic(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > maxTopicLen {
		return fmt.Errorf("kafka: %q is not a valid topic name (1 to %d bytes, not \".\" or \"..\"): %w", name, maxTopicLen, broker.ErrInvalidArgument)
	}
	for i := 0; i < len(name); i++ {
		if !legalTopicByte(name[i]) {
			return fmt.Errorf("kafka: %q is not a valid topic name (only [a-zA-Z0-9._-]): %w", name, broker.ErrInvalidArgument)
		}
	}
	return nil
}

// MaxMessageBytes implements [broker.Limiter]: the largest envelope Publish
// accepts, for every destination.
func (d *driver) MaxMessageBytes(string) int { return d.limit }

// As implements [broker.Aser]: it sets *(**kgo.Client) to the client the
// store produces with and *(**kadm.Client) to an admin client over it.
func (d *driver) As(target any) bool {
	switch t := target.(type) {
	case **kgo.Client:
		*t = d.cl
	case **kadm.Client:
		*t = d.adm
	default:
		return false
	}
	return true
}

// createTopic creates topic with Options.Topics (or broker defaults, with
// a max.message.bytes that fits the store's records). An existing topic is
// left as it is.
func (d *driver) createTopic(ctx context.Context, topic string) error {
	partitions, rf := int32(-1), int16(-1)
	configs := map[string]*string{}
	if d.topics != nil {
		if d.topics.Partitions != 0 {
			partitions = d.topics.Partitions
		}
		if d.topics.ReplicationFactor != 0 {
			rf = d.topics.ReplicationFactor
		}
		for k, v := range d.topics.Configs {
			configs[k] = v
		}
	}
	if _, ok := configs["max.message.bytes"]; !ok {
		v := strconv.Itoa(d.limit + d.budget + recordOverhead)
		configs["max.message.bytes"] = &v
	}
	resp, err := d.adm.CreateTopic(ctx, partitions, rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("kafka: creating topic %q: %w", topic, err)
	}
	d.known.Store(topic, struct{}{})
	return nil
}

// ensureTopic makes sure a Publish to topic has somewhere to go: it
// creates the topic with Options.Topics, or checks once that it exists.
func (d *driver) ensureTopic(ctx context.Context, topic string) error {
	if _, ok := d.known.Load(topic); ok {
		return nil
	}
	if d.topics != nil {
		return d.createTopic(ctx, topic)
	}
	if d.autoTop {
		return nil
	}
	ok, err := d.topicExists(ctx, topic)
	if err != nil {
		return err
	}
	if !ok {
		return missingTopic(topic)
	}
	d.known.Store(topic, struct{}{})
	return nil
}

func missingTopic(topic string) error {
	return fmt.Errorf("kafka: topic %q does not exist (create it, or let the store create it: Options.Topics, or the URL opener's Create): %w", topic, broker.ErrNoStore)
}

// Publish produces m to the topic named destination and returns once every
// in-sync replica has it (acks=all). The record's key is m.Key, its value
// m.Body, and its headers m.Headers plus the dlq-original-* provenance
// (from the envelope's source when the body is a dlq.v1 envelope, else from
// m.Source) and [HeaderPublishedAt], within the header budget. A record
// the client or broker finds too large is refused with a
// [*classify.TooLargeError]; nothing is ever truncated. Once the record is
// sent, the idempotent producer does not fail it on ctx: Publish reports
// the broker's answer, or the WriteTimeout the portable store bounds ctx
// with.
func (d *driver) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if d.readOnly {
		return errReadOnly
	}
	if err := validTopic(destination); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.ensureTopic(ctx, destination); err != nil {
		return err
	}
	rec := &kgo.Record{
		Topic:   destination,
		Key:     bytes.Clone(m.Key),
		Value:   bytes.Clone(m.Body),
		Headers: d.recordHeaders(m),
	}
	if err := d.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		switch {
		case errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge):
			size := len(rec.Key) + len(rec.Value) + headerBytes(rec.Headers)
			return fmt.Errorf("kafka: publish to %q: %w: %w", destination,
				&classify.TooLargeError{What: "record", Destination: destination, Size: size, Limit: d.limit + d.budget + recordOverhead}, err)
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			d.known.Delete(destination)
			return fmt.Errorf("%w: %w", missingTopic(destination), err)
		}
		return fmt.Errorf("kafka: publish to %q: %w", destination, err)
	}
	return nil
}

// publishedAt returns the publish time, strictly increasing per store so
// that records this store writes in sequence sort in that sequence.
func (d *driver) publishedAt() time.Time {
	now := time.Now().UnixNano()
	for {
		last := d.lastPub.Load()
		next := max(now, last+1)
		if d.lastPub.CompareAndSwap(last, next) {
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
func (d *driver) recordHeaders(m *broker.Message) []kgo.RecordHeader {
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
	h[HeaderPublishedAt] = d.publishedAt().Format(publishedAtLayout)
	return budgetHeaders(h, d.budget)
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

// headerBytes returns the bytes of header keys and values in hs, the
// quantity Options.HeaderBudget bounds.
func headerBytes(hs []kgo.RecordHeader) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// MessageOf converts a consumed record into a [broker.Message], as the
// consumer [NewConsumer] returns does for every record: key, value and
// headers (the last of repeated header keys wins), and Kafka provenance
// (topic, partition, offset, key, timestamp). DeliveryAttempt is 0
// because Kafka keeps no delivery count. It is for a poll loop of your own
// that hands records to [broker.Processor.Process]; the message shares
// r's key and value.
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

// Close leaves every replay group the store joined, committing what was
// acknowledged; leases still held are lost and their records come back to
// the group. It closes the client only when the URL opener made it.
func (d *driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	ms := make([]*member, 0, len(d.members))
	for _, m := range d.members {
		ms = append(ms, m)
	}
	clear(d.members)
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { m.shutdown("store closed") })
	}
	wg.Wait()
	if d.ownsCl {
		d.cl.Close()
	}
	return nil
}
