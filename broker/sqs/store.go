package sqs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/clocklease"
)

// API is the part of *sqs.Client (aws-sdk-go-v2 service/sqs) the adapter
// calls. Pass the client itself; the interface exists so tests can wrap it.
type API interface {
	SendMessage(ctx context.Context, in *awssqs.SendMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, optFns ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error)
	ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *awssqs.DeleteMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.DeleteMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *awssqs.DeleteMessageBatchInput, optFns ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *awssqs.ChangeMessageVisibilityInput, optFns ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, optFns ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueUrl(ctx context.Context, in *awssqs.GetQueueUrlInput, optFns ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error)
	GetQueueAttributes(ctx context.Context, in *awssqs.GetQueueAttributesInput, optFns ...func(*awssqs.Options)) (*awssqs.GetQueueAttributesOutput, error)
	CreateQueue(ctx context.Context, in *awssqs.CreateQueueInput, optFns ...func(*awssqs.Options)) (*awssqs.CreateQueueOutput, error)
}

var _ API = (*awssqs.Client)(nil)

// Limits and defaults.
const (
	// DefaultMaxMessageBytes is SQS's default MaximumMessageSize: 256 KiB.
	DefaultMaxMessageBytes = 256 << 10
	// MaxMessageBytesLimit is the largest MaximumMessageSize SQS allows:
	// 1 MiB.
	MaxMessageBytesLimit = 1 << 20
	// DefaultAttributeBudget is the part of the message size kept for
	// message attributes: 4 KiB.
	DefaultAttributeBudget = 4 << 10
	// DefaultLease is the default visibility timeout of a Fetch: 30 s,
	// SQS's default VisibilityTimeout.
	DefaultLease = 30 * time.Second
	// MaxVisibilityTimeout is SQS's largest visibility timeout: 12 h.
	MaxVisibilityTimeout = 12 * time.Hour
	// DefaultFilterScanLimit is how many messages a filtered Fetch looks
	// at, at most.
	DefaultFilterScanLimit = 10_000
	// DefaultMaxConcurrentBatches is how many batch requests per queue and
	// kind run at once.
	DefaultMaxConcurrentBatches = 2
	// DefaultRetentionPeriod is the MessageRetentionPeriod of queues the
	// store creates: 14 days, SQS's maximum.
	DefaultRetentionPeriod = 14 * 24 * time.Hour
)

// Options configures a [Store]. The zero value (and nil) uses the defaults.
type Options struct {
	// MaxMessageBytes is the queues' MaximumMessageSize: the most a message
	// (body plus attributes, counted as SQS counts them) may weigh.
	// Default [DefaultMaxMessageBytes] (256 KiB); at most
	// [MaxMessageBytesLimit] (1 MiB), which the queues must then be
	// configured with too.
	MaxMessageBytes int
	// AttributeBudget is the part of MaxMessageBytes kept for message
	// attributes: the body may use MaxMessageBytes − AttributeBudget, the
	// limit the store reports through broker.Limiter, so the envelope
	// builder leaves room for the headers. Default [DefaultAttributeBudget].
	AttributeBudget int
	// Lease is the visibility timeout Fetch passes to ReceiveMessage:
	// how long a fetched record stays invisible to other fetchers. Whole
	// seconds, from 1 s to 12 h. Default [DefaultLease] (30 s).
	Lease time.Duration
	// WaitTime is ReceiveMessage's WaitTimeSeconds (long polling), up to
	// 20 s. Default 0: the queue's ReceiveMessageWaitTimeSeconds. With
	// short polling SQS samples a subset of its servers, so an empty Fetch
	// does not prove the queue empty; set 1 s or more for a complete view.
	WaitTime time.Duration
	// FilterScanLimit bounds how many messages a Fetch with a non-zero
	// filter receives while looking for matches. Default
	// [DefaultFilterScanLimit].
	FilterScanLimit int
	// MaxConcurrentBatches is how many SendMessageBatch (and, separately,
	// DeleteMessageBatch and ChangeMessageVisibilityBatch) requests run at
	// once per queue. Concurrent Publish, Ack and Release calls beyond it
	// wait and are coalesced, up to 10 per request. Default
	// [DefaultMaxConcurrentBatches].
	MaxConcurrentBatches int
	// CreateQueues creates a destination queue that does not exist, with
	// MaximumMessageSize = MaxMessageBytes, MessageRetentionPeriod =
	// [DefaultRetentionPeriod] and, for names ending in ".fifo", FifoQueue.
	// Default false: queues are infrastructure, and a missing one is an
	// error.
	CreateQueues bool
	// QueueName maps a destination to a queue name. Default [QueueName].
	// A destination that is a queue URL (http:// or https://) is used as
	// is.
	QueueName func(destination string) string
	// DeduplicationID returns the MessageDeduplicationId of a message
	// published to a FIFO queue; env is its decoded envelope, or nil when
	// the body is not a dlq.v1 envelope. Default [DeduplicationID].
	DeduplicationID func(m *broker.Message, env *envelope.Envelope) string
	// AllowFIFOToStandard lets Publish write an envelope whose source is a
	// FIFO SQS queue into a standard queue, dropping its FIFO ordering and
	// deduplication. Default false: such a write is refused with a
	// *[FIFOMismatchError] (SQS's own redrive refuses the pairing too).
	AllowFIFOToStandard bool
	// Logger receives warnings (messages released late after a filtered
	// scan). Nil discards.
	Logger *slog.Logger
}

// Store is a dead-letter store on Amazon SQS queues: a [broker.Publisher],
// [broker.Limiter] and [broker.DeadLetterSource]. Destinations are queues.
// It is safe for concurrent use.
type Store struct {
	client API
	opts   Options
	log    *slog.Logger
	margin time.Duration
	closed atomic.Bool

	mu       sync.Mutex
	urls     map[string]string
	batchers map[string]*queueBatchers
}

type sendItem struct {
	enc          encoded
	group, dedup string
}

type queueBatchers struct {
	send *batcher[sendItem]
	del  *batcher[string]
	vis  *batcher[string]
}

// New returns a store over client. nil opts means the defaults. New makes
// no request.
func New(ctx context.Context, client API, opts *Options) (*Store, error) {
	_ = ctx
	if client == nil {
		return nil, errors.New("sqs: nil client")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.MaxMessageBytes < 1024 || o.MaxMessageBytes > MaxMessageBytesLimit {
		return nil, fmt.Errorf("sqs: MaxMessageBytes %d outside SQS's 1024..%d", o.MaxMessageBytes, MaxMessageBytesLimit)
	}
	if o.AttributeBudget == 0 {
		o.AttributeBudget = DefaultAttributeBudget
	}
	if o.AttributeBudget < 0 || o.AttributeBudget >= o.MaxMessageBytes {
		return nil, fmt.Errorf("sqs: AttributeBudget %d must be in 0..MaxMessageBytes", o.AttributeBudget)
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Lease < time.Second || o.Lease > MaxVisibilityTimeout || o.Lease%time.Second != 0 {
		return nil, fmt.Errorf("sqs: Lease %v must be whole seconds from 1s to 12h (SQS VisibilityTimeout)", o.Lease)
	}
	if o.WaitTime < 0 || o.WaitTime > 20*time.Second {
		return nil, fmt.Errorf("sqs: WaitTime %v outside 0..20s", o.WaitTime)
	}
	if o.FilterScanLimit == 0 {
		o.FilterScanLimit = DefaultFilterScanLimit
	}
	if o.MaxConcurrentBatches == 0 {
		o.MaxConcurrentBatches = DefaultMaxConcurrentBatches
	}
	if o.QueueName == nil {
		o.QueueName = QueueName
	}
	if o.DeduplicationID == nil {
		o.DeduplicationID = DeduplicationID
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{
		client:   client,
		opts:     o,
		log:      log,
		margin:   clocklease.Margin(o.Lease),
		urls:     map[string]string{},
		batchers: map[string]*queueBatchers{},
	}, nil
}

// Close stops the store: later calls fail with broker.ErrClosed. Requests
// in flight complete. The client is the caller's and stays open.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// Client returns the SQS client the store uses.
func (s *Store) Client() API { return s.client }

// QueueName is the default mapping from destination to queue name: every
// character SQS does not allow in a queue name (letters, digits, '-' and
// '_') becomes '-', keeping a ".fifo" suffix, so
// "spatial.events.poison.dlt" names the queue "spatial-events-poison-dlt".
// Distinct destinations that differ only in such characters share a queue;
// pass Options.QueueName to map them otherwise.
func QueueName(destination string) string {
	base, fifo := strings.CutSuffix(destination, ".fifo")
	b := []byte(base)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	if fifo {
		return string(b) + ".fifo"
	}
	return string(b)
}

// IsFIFO reports whether a queue name, URL or ARN names a FIFO queue: SQS
// requires FIFO queue names to end in ".fifo", and forbids it for standard
// queues.
func IsFIFO(queue string) bool { return strings.HasSuffix(queue, ".fifo") }

func isURL(s string) bool { return strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://") }

// queueNameOf returns the queue name of a name, URL or ARN.
func queueNameOf(q string) string {
	if isURL(q) {
		if u, err := url.Parse(q); err == nil {
			q = u.Path
		}
		return q[strings.LastIndexByte(q, '/')+1:]
	}
	if strings.HasPrefix(q, "arn:") {
		return q[strings.LastIndexByte(q, ':')+1:]
	}
	return q
}

// QueueURL resolves destination to its queue URL (GetQueueUrl, or
// CreateQueue when Options.CreateQueues is set), once per destination.
func (s *Store) QueueURL(ctx context.Context, destination string) (string, error) {
	if isURL(destination) {
		return destination, nil
	}
	s.mu.Lock()
	u, ok := s.urls[destination]
	s.mu.Unlock()
	if ok {
		return u, nil
	}
	name := s.opts.QueueName(destination)
	if name == "" || len(name) > 80 {
		return "", fmt.Errorf("sqs: destination %q maps to queue name %q, which SQS does not allow (1 to 80 characters)", destination, name)
	}
	out, err := s.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil && s.opts.CreateQueues && isQueueMissing(err) {
		attrs := map[string]string{
			string(types.QueueAttributeNameMaximumMessageSize):     strconv.Itoa(s.opts.MaxMessageBytes),
			string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(int(DefaultRetentionPeriod / time.Second)),
		}
		if IsFIFO(name) {
			attrs[string(types.QueueAttributeNameFifoQueue)] = "true"
		}
		var c *awssqs.CreateQueueOutput
		c, err = s.client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err == nil {
			out = &awssqs.GetQueueUrlOutput{QueueUrl: c.QueueUrl}
		}
	}
	if err != nil {
		return "", fmt.Errorf("sqs: queue %q for destination %q: %w", name, destination, err)
	}
	u = aws.ToString(out.QueueUrl)
	s.mu.Lock()
	s.urls[destination] = u
	s.mu.Unlock()
	return u, nil
}

// MaxMessageBytes implements broker.Limiter: the largest body a message may
// have, Options.MaxMessageBytes − Options.AttributeBudget (258,048 bytes by
// default).
func (s *Store) MaxMessageBytes(string) int { return s.opts.MaxMessageBytes - s.opts.AttributeBudget }

// Publish sends m to the destination queue (SendMessage, or
// SendMessageBatch when concurrent calls coalesce) and returns once SQS
// has accepted it — SQS stores a message redundantly before it answers.
//
// The body is sent as is when SQS accepts its characters, else
// base64-encoded (see [AttrBodyEncoding]). Headers become String message
// attributes, or one [AttrHeaders] attribute when they do not fit SQS's
// 10; the key becomes [AttrKey]. A body over [Store.MaxMessageBytes], or a
// message whose body and attributes exceed Options.MaxMessageBytes, is
// refused with a *classify.TooLargeError.
//
// On a FIFO queue (name ending in ".fifo") the MessageGroupId and
// MessageDeduplicationId of a dlq.v1 envelope's source are preserved (see
// [GroupID] and [DeduplicationID]). An envelope whose source is a FIFO SQS
// queue is refused with a *[FIFOMismatchError] when the destination is a
// standard queue, unless Options.AllowFIFOToStandard is set.
func (s *Store) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if s.closed.Load() {
		return broker.ErrClosed
	}
	if m == nil {
		return errors.New("sqs: nil message")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	enc, err := encodeMessage(m)
	if err != nil {
		return err
	}
	if limit := s.MaxMessageBytes(destination); enc.bodyLen > limit {
		return &classify.TooLargeError{Destination: destination, Size: enc.bodyLen, Limit: limit}
	}
	if enc.size > s.opts.MaxMessageBytes {
		return &classify.TooLargeError{Destination: destination, Size: enc.size, Limit: s.opts.MaxMessageBytes}
	}
	qurl, err := s.QueueURL(ctx, destination)
	if err != nil {
		return err
	}
	env := m.Envelope
	if env == nil {
		env = decodeEnvelope(m.Body)
	}
	item := sendItem{enc: enc}
	fifo := IsFIFO(queueNameOf(qurl))
	if !fifo && !s.opts.AllowFIFOToStandard && env != nil && env.Source != nil && env.Source.System == "sqs" && IsFIFO(env.Source.Topic) {
		return &FIFOMismatchError{Source: env.Source.Topic, DeadLetter: queueNameOf(qurl), SourceFIFO: true}
	}
	if fifo {
		item.group = GroupID(m, env)
		item.dedup = s.opts.DeduplicationID(m, env)
		if !validFIFOID(item.dedup) {
			item.dedup = hashID(item.dedup)
		}
	}
	if err := s.queue(qurl).send.do(ctx, item, enc.size); err != nil {
		return fmt.Errorf("sqs: publish to %q: %w", destination, err)
	}
	return nil
}

// decodeEnvelope decodes body when it is a dlq.v1 envelope.
func decodeEnvelope(body []byte) *envelope.Envelope {
	if !bytes.HasPrefix(body, []byte(`{"schema_version":"dlq.v1"`)) {
		return nil
	}
	env, err := envelope.Decode(body)
	if err != nil {
		return nil
	}
	return env
}

// validFIFOID reports whether s is a MessageGroupId or
// MessageDeduplicationId SQS accepts: 1 to 128 alphanumeric or punctuation
// characters.
func validFIFOID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

func hashID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// GroupID returns the MessageGroupId a message is published with on a FIFO
// queue: the envelope source's group id (the FIFO source's
// MessageGroupId, preserved), else the message key when it is a valid
// group id, else the key's SHA-256 in hex, else "geodlq".
func GroupID(m *broker.Message, env *envelope.Envelope) string {
	if env != nil && env.Source != nil && validFIFOID(env.Source.GroupID) {
		return env.Source.GroupID
	}
	if validFIFOID(string(m.Key)) {
		return string(m.Key)
	}
	if len(m.Key) > 0 {
		return hashID(string(m.Key))
	}
	return "geodlq"
}

// DeduplicationID is the default MessageDeduplicationId on FIFO queues. It
// is the same for the same source message, so a consumer that crashes
// after the dead-letter write and before deleting the source, and
// dead-letters the redelivered message again within SQS's 5-minute
// deduplication interval, leaves one record, not two:
//
//   - an envelope whose source has a dedup id: that id, verbatim (the
//     FIFO source's MessageDeduplicationId, preserved);
//   - another envelope: a hash of its source's system, topic, partition,
//     offset and message id, when it has any of them, else of the body;
//   - a message that is not an envelope (a replay re-injecting): a hash of
//     its dlq-replay-of header (a second replay of the same record is
//     dropped as a duplicate), else of its idempotency key, else of the
//     body.
//
// Preserving a source's dedup id means two different source messages that
// reused one id (allowed after 5 minutes) and are dead-lettered within 5
// minutes of each other collapse into one record; producers that reuse
// ids should pass their own Options.DeduplicationID.
func DeduplicationID(m *broker.Message, env *envelope.Envelope) string {
	if env != nil {
		if src := env.Source; src != nil {
			if src.DedupID != "" {
				return src.DedupID
			}
			var part, off string
			if src.Partition != nil {
				part = strconv.Itoa(int(*src.Partition))
			}
			if src.Offset != nil {
				off = strconv.FormatInt(*src.Offset, 10)
			}
			if part != "" || off != "" || src.MessageID != "" {
				return hashID("source", src.System, src.Topic, part, off, src.MessageID)
			}
		}
		return hashID("body", string(m.Body))
	}
	if v := m.Header(broker.HeaderReplayOf); v != "" {
		return hashID("replay", v)
	}
	if v := m.Header(broker.HeaderIdempotencyKey); v != "" {
		return hashID("key", v)
	}
	return hashID("body", string(m.Body))
}

func (s *Store) queue(qurl string) *queueBatchers {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q, ok := s.batchers[qurl]; ok {
		return q
	}
	n := s.opts.MaxConcurrentBatches
	q := &queueBatchers{
		send: &batcher[sendItem]{maxItems: maxBatchEntries, maxBytes: maxBatchBytes, maxInflight: n,
			send: func(ctx context.Context, b []*entry[sendItem]) { s.sendBatch(ctx, qurl, b) }},
		del: &batcher[string]{maxItems: maxBatchEntries, maxBytes: maxBatchBytes, maxInflight: n,
			send: func(ctx context.Context, b []*entry[string]) { s.deleteBatch(ctx, qurl, b) }},
		vis: &batcher[string]{maxItems: maxBatchEntries, maxBytes: maxBatchBytes, maxInflight: n,
			send: func(ctx context.Context, b []*entry[string]) { s.releaseBatch(ctx, qurl, b) }},
	}
	s.batchers[qurl] = q
	return q
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

func (s *Store) sendBatch(ctx context.Context, qurl string, b []*entry[sendItem]) {
	if len(b) == 1 {
		it := b[0].item
		_, b[0].err = s.client.SendMessage(ctx, &awssqs.SendMessageInput{
			QueueUrl: aws.String(qurl), MessageBody: aws.String(it.enc.body), MessageAttributes: it.enc.attrs,
			MessageGroupId: optString(it.group), MessageDeduplicationId: optString(it.dedup),
		})
		return
	}
	in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(qurl), Entries: make([]types.SendMessageBatchRequestEntry, len(b))}
	for i, e := range b {
		in.Entries[i] = types.SendMessageBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(e.item.enc.body), MessageAttributes: e.item.enc.attrs,
			MessageGroupId: optString(e.item.group), MessageDeduplicationId: optString(e.item.dedup),
		}
	}
	out, err := s.client.SendMessageBatch(ctx, in)
	settle(b, err, "SendMessageBatch", func() (ok []string, failed []types.BatchResultErrorEntry) {
		for _, r := range out.Successful {
			ok = append(ok, aws.ToString(r.Id))
		}
		return ok, out.Failed
	})
}

func (s *Store) deleteBatch(ctx context.Context, qurl string, b []*entry[string]) {
	if len(b) == 1 {
		_, b[0].err = s.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(qurl), ReceiptHandle: aws.String(b[0].item)})
		return
	}
	in := &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(qurl), Entries: make([]types.DeleteMessageBatchRequestEntry, len(b))}
	for i, e := range b {
		in.Entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(e.item)}
	}
	out, err := s.client.DeleteMessageBatch(ctx, in)
	settle(b, err, "DeleteMessageBatch", func() (ok []string, failed []types.BatchResultErrorEntry) {
		for _, r := range out.Successful {
			ok = append(ok, aws.ToString(r.Id))
		}
		return ok, out.Failed
	})
}

func (s *Store) releaseBatch(ctx context.Context, qurl string, b []*entry[string]) {
	handles := make([]string, len(b))
	for i, e := range b {
		handles[i] = e.item
	}
	errs := s.changeVisibility(ctx, qurl, handles, 0)
	for i, e := range b {
		e.err = errs[i]
	}
}

// changeVisibility sets the visibility timeout of up to 10 receipt handles
// and returns one error per handle.
func (s *Store) changeVisibility(ctx context.Context, qurl string, handles []string, timeout time.Duration) []error {
	errs := make([]error, len(handles))
	if len(handles) == 1 {
		_, errs[0] = s.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(qurl), ReceiptHandle: aws.String(handles[0]), VisibilityTimeout: int32(timeout / time.Second)})
		return errs
	}
	in := &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(qurl), Entries: make([]types.ChangeMessageVisibilityBatchRequestEntry, len(handles))}
	for i, h := range handles {
		in.Entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h), VisibilityTimeout: int32(timeout / time.Second)}
	}
	out, err := s.client.ChangeMessageVisibilityBatch(ctx, in)
	es := make([]*entry[string], len(handles))
	for i := range es {
		es[i] = &entry[string]{}
	}
	settle(es, err, "ChangeMessageVisibilityBatch", func() (ok []string, failed []types.BatchResultErrorEntry) {
		for _, r := range out.Successful {
			ok = append(ok, aws.ToString(r.Id))
		}
		return ok, out.Failed
	})
	for i, e := range es {
		errs[i] = e.err
	}
	return errs
}

// settle sets each entry's error from a batch response whose entry ids are
// the entries' indexes.
func settle[T any](b []*entry[T], err error, op string, results func() ([]string, []types.BatchResultErrorEntry)) {
	if err != nil {
		for _, e := range b {
			e.err = err
		}
		return
	}
	seen := make([]bool, len(b))
	ok, failed := results()
	for _, id := range ok {
		if i, err := strconv.Atoi(id); err == nil && i >= 0 && i < len(b) {
			seen[i] = true
		}
	}
	for _, f := range failed {
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(b) {
			seen[i] = true
			b[i].err = &EntryError{Op: op, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
		}
	}
	for i, e := range b {
		if !seen[i] {
			e.err = fmt.Errorf("sqs: %s: no result for entry %d", op, i)
		}
	}
}

// leases is the content of Record.Lease: when the visibility timeout
// ends, by the local clock, a colon, and the receipt handle.
var leases = clocklease.Codec{Prefix: "sqs", Sep: ":", Expired: "visibility timeout ended"}

// receiveAttrs asks ReceiveMessage for every system attribute. The
// deprecated AttributeNames parameter is sent too: SQS honours both, and
// some SQS emulators (local-aws-sqs among them) only the older one.
var (
	receiveAttrs       = []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}
	receiveAttrsLegacy = []types.QueueAttributeName{types.QueueAttributeNameAll}
)

// Fetch receives up to max records of destination matching f
// (ReceiveMessage, 10 at a time, with VisibilityTimeout = Options.Lease).
//
// With a non-zero filter, Fetch keeps receiving until it has max matches,
// the queue returns nothing more, Options.FilterScanLimit messages were
// seen, or half the lease has passed. Messages that do not match are held
// invisible until the scan ends — so the scan does not see them twice and
// the matching messages behind them are reached — and then released at
// once (ChangeMessageVisibility 0). They are never deleted; if the release
// fails, their visibility timeout brings them back.
func (s *Store) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	if s.closed.Load() {
		return nil, broker.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	qurl, err := s.QueueURL(ctx, destination)
	if err != nil {
		return nil, err
	}
	qname := queueNameOf(qurl)
	filtered := !f.IsZero()
	var out []*broker.Record
	var held []string
	index := map[string]int{} // message id → position in out
	start := time.Now()
	scanned := 0
	for len(out) < max {
		n := min(maxBatchEntries, max-len(out))
		if filtered {
			n = maxBatchEntries
		}
		t0 := time.Now()
		resp, err := s.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(qurl),
			MaxNumberOfMessages:         int32(n),
			VisibilityTimeout:           int32(s.opts.Lease / time.Second),
			WaitTimeSeconds:             int32(s.opts.WaitTime / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: receiveAttrs,
			AttributeNames:              receiveAttrsLegacy,
		})
		if err != nil {
			for _, r := range out {
				_, h, _ := leases.Decode(r.Lease)
				held = append(held, h)
			}
			s.releaseHeld(ctx, qurl, held)
			return nil, fmt.Errorf("sqs: fetch from %q: %w", destination, err)
		}
		if len(resp.Messages) == 0 {
			break
		}
		scanned += len(resp.Messages)
		deadline := t0.Add(s.opts.Lease)
		for _, msg := range resp.Messages {
			rec := s.record(destination, qname, msg, deadline)
			if rec.Envelope == nil && filtered {
				held = append(held, aws.ToString(msg.ReceiptHandle))
				continue
			}
			if filtered && !f.Match(rec.Envelope) || len(out) >= max {
				held = append(held, aws.ToString(msg.ReceiptHandle))
				continue
			}
			if i, dup := index[rec.ID]; dup {
				out[i] = rec // seen again in this scan: its newest receipt handle counts
				continue
			}
			index[rec.ID] = len(out)
			out = append(out, rec)
		}
		if filtered && (scanned >= s.opts.FilterScanLimit || time.Since(start) >= s.opts.Lease/2) {
			break
		}
	}
	s.releaseHeld(ctx, qurl, held)
	return out, nil
}

// releaseHeld makes messages a filtered scan held visible again.
func (s *Store) releaseHeld(ctx context.Context, qurl string, handles []string) {
	ctx = context.WithoutCancel(ctx)
	for len(handles) > 0 {
		n := min(maxBatchEntries, len(handles))
		for i, err := range s.changeVisibility(ctx, qurl, handles[:n], 0) {
			if err != nil && !isLeaseLost(err) {
				s.log.WarnContext(ctx, "geodlq: sqs: could not release a message a filtered fetch held; it returns when its visibility timeout ends",
					slog.String("queue", qurl), slog.String("receipt_handle", handles[i]), slog.Any("error", err))
			}
		}
		handles = handles[n:]
	}
}

// record turns a received message into a record. A body that is not a
// dlq.v1 envelope gives a record without Envelope.
func (s *Store) record(destination, qname string, msg types.Message, deadline time.Time) *broker.Record {
	body, key, headers, err := decodeMessage(msg)
	if err != nil {
		s.log.Warn("geodlq: sqs: undecodable attributes; record passed on raw", slog.Any("error", err))
		body = []byte(aws.ToString(msg.Body))
	}
	m := &broker.Message{Key: key, Body: body, Headers: headers}
	m.Source, m.DeliveryAttempt = sourceOf(qname, msg, key)
	rec := &broker.Record{
		ID:          aws.ToString(msg.MessageId),
		Destination: destination,
		Message:     m,
		Deliveries:  m.DeliveryAttempt,
		Lease:       leases.Encode(deadline, aws.ToString(msg.ReceiptHandle)),
	}
	if env, err := envelope.Decode(body); err == nil {
		rec.Envelope = env
	}
	return rec
}

// sourceOf returns a received message's provenance and receive count.
func sourceOf(qname string, msg types.Message, key []byte) (*envelope.Source, int) {
	src := &envelope.Source{System: "sqs", Topic: qname, MessageID: aws.ToString(msg.MessageId), Key: key}
	a := msg.Attributes
	src.GroupID = a[string(types.MessageSystemAttributeNameMessageGroupId)]
	src.DedupID = a[string(types.MessageSystemAttributeNameMessageDeduplicationId)]
	count, _ := strconv.Atoi(a[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	src.DeliveryCount = count
	if ms, err := strconv.ParseInt(a[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil && ms > 0 {
		t := time.UnixMilli(ms).UTC()
		src.Timestamp = &t
	}
	return src, count
}

// lease checks r's lease against the local clock: SQS standard queues do
// not reject a superseded receipt handle (DeleteMessage answers success),
// so the store refuses to use a handle whose visibility timeout has run
// out, less a safety margin of a tenth of the lease (at most 1 s).
func (s *Store) lease(ctx context.Context, r *broker.Record, op string) (qurl, handle string, err error) {
	if s.closed.Load() {
		return "", "", broker.ErrClosed
	}
	if handle, err = leases.Check(r, op, s.margin); err != nil {
		return "", "", err
	}
	qurl, err = s.QueueURL(ctx, r.Destination)
	return qurl, handle, err
}

// Ack deletes the record (DeleteMessage, batched with concurrent Acks).
// A lease that ran out, or a receipt handle SQS rejects, gives an error
// wrapping broker.ErrLeaseLost.
func (s *Store) Ack(ctx context.Context, r *broker.Record) error {
	qurl, handle, err := s.lease(ctx, r, "ack")
	if err != nil {
		return err
	}
	if err := s.queue(qurl).del.do(ctx, handle, len(handle)); err != nil {
		if isLeaseLost(err) {
			return fmt.Errorf("sqs: ack %s: %w: %w", r.ID, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("sqs: ack %s: %w", r.ID, err)
	}
	return nil
}

// Release makes the record visible again at once (ChangeMessageVisibility
// with VisibilityTimeout 0, batched with concurrent Releases).
func (s *Store) Release(ctx context.Context, r *broker.Record) error {
	qurl, handle, err := s.lease(ctx, r, "release")
	if err != nil {
		return err
	}
	if err := s.queue(qurl).vis.do(ctx, handle, len(handle)); err != nil {
		if isLeaseLost(err) {
			return fmt.Errorf("sqs: release %s: %w: %w", r.ID, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("sqs: release %s: %w", r.ID, err)
	}
	return nil
}

var (
	_ broker.Publisher        = (*Store)(nil)
	_ broker.Limiter          = (*Store)(nil)
	_ broker.DeadLetterSource = (*Store)(nil)
)
