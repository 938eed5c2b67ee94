package sqs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
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

// Limits and defaults (documented in numbers on the options).
const (
	defaultMaxMessageBytes = 256 << 10 // SQS's default MaximumMessageSize
	maxMessageBytesLimit   = 1 << 20   // SQS's largest MaximumMessageSize
	defaultHeaderBudget    = 4 << 10
	defaultLease           = 30 * time.Second // SQS's default VisibilityTimeout
	maxVisibilityTimeout   = 12 * time.Hour
	defaultFilterScanLimit = 10_000
	defaultMaxBatches      = 2
	retentionPeriod        = 14 * 24 * time.Hour // SQS's maximum
)

// Options configures [New]. The zero value and nil are valid.
type Options struct {
	// StoreOptions: LeaseTTL is the visibility timeout Fetch passes to
	// ReceiveMessage, whole seconds from 1s to 12h; default 30s (SQS's
	// default VisibilityTimeout). MaxMessageBytes is the queues'
	// MaximumMessageSize: the most a message (body plus attributes,
	// counted as SQS counts them) may weigh; default 262,144 (256 KiB),
	// from 1,024 to 1,048,576 (1 MiB, which the queues must then be
	// configured with too).
	broker.StoreOptions
	// HeaderBudget is the part of MaxMessageBytes kept for message
	// attributes: the body may use MaxMessageBytes − HeaderBudget, the
	// limit the store reports (broker.Limiter), so that the envelope
	// builder leaves room for the headers. Default 4,096 bytes.
	HeaderBudget int
	// WaitTime is ReceiveMessage's WaitTimeSeconds (long polling), up to
	// 20s. Default 0: the queue's ReceiveMessageWaitTimeSeconds. With
	// short polling SQS samples a subset of its servers, so an empty Fetch
	// does not prove the queue empty; set 1s or more for a complete view.
	WaitTime time.Duration
	// FilterScanLimit bounds how many messages a Fetch with a non-zero
	// filter receives while looking for matches. Default 10,000.
	FilterScanLimit int
	// MaxConcurrentBatches is how many SendMessageBatch (and, separately,
	// DeleteMessageBatch and ChangeMessageVisibilityBatch) requests run at
	// once per queue. Concurrent Publish, Ack and Release calls beyond it
	// wait and are coalesced, up to 10 per request. Default 2.
	MaxConcurrentBatches int
	// CreateQueues creates a destination queue that does not exist, with
	// MaximumMessageSize = MaxMessageBytes, MessageRetentionPeriod = 14
	// days (SQS's maximum) and, for names ending in ".fifo", FifoQueue.
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
	// FIFO SQS queue to a standard queue, dropping its MessageGroupId and
	// MessageDeduplicationId. Default false: refused with a
	// *[FIFOMismatchError] (SQS's own redrive refuses the pairing too).
	AllowFIFOToStandard bool
}

// driver is the SQS [broker.Driver]. It is safe for concurrent use.
type driver struct {
	client API
	opts   Options
	log    *slog.Logger
	margin time.Duration
	// settled holds the receipt handles this handle acknowledged or
	// released: SQS may accept such a handle again.
	settled clocklease.Settled

	mu       sync.Mutex
	urls     map[string]string
	batchers map[string]*queueBatchers
}

var (
	_ broker.Driver  = (*driver)(nil)
	_ broker.Limiter = (*driver)(nil)
	_ broker.Aser    = (*driver)(nil)
)

type sendItem struct {
	enc          encoded
	group, dedup string
}

type queueBatchers struct {
	send *batcher[sendItem]
	del  *batcher[string]
	vis  *batcher[string]
}

// New returns a dead-letter store on the SQS queues client reaches (pass
// an *sqs.Client). New makes no request; closing the store leaves client
// open. Options are checked: a value SQS would refuse is an error wrapping
// broker.ErrInvalidArgument.
func New(ctx context.Context, client API, opts *Options) (*broker.Store, error) {
	d, err := newDriver(client, opts)
	if err != nil {
		return nil, err
	}
	return broker.NewStore("sqs", d, &d.opts.StoreOptions), nil
}

func newDriver(client API, opts *Options) (*driver, error) {
	if client == nil {
		return nil, fmt.Errorf("sqs: New: nil client: %w", broker.ErrInvalidArgument)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	invalid := func(format string, args ...any) (*driver, error) {
		return nil, fmt.Errorf("sqs: "+format+": %w", append(args, broker.ErrInvalidArgument)...)
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = defaultMaxMessageBytes
	}
	if o.MaxMessageBytes < 1024 || o.MaxMessageBytes > maxMessageBytesLimit {
		return invalid("MaxMessageBytes %d outside SQS's 1024..%d", o.MaxMessageBytes, maxMessageBytesLimit)
	}
	if o.HeaderBudget == 0 {
		o.HeaderBudget = defaultHeaderBudget
	}
	if o.HeaderBudget < 0 || o.HeaderBudget >= o.MaxMessageBytes {
		return invalid("HeaderBudget %d must be in 0..MaxMessageBytes", o.HeaderBudget)
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = defaultLease
	}
	if o.LeaseTTL < time.Second || o.LeaseTTL > maxVisibilityTimeout || o.LeaseTTL%time.Second != 0 {
		return invalid("LeaseTTL %v must be whole seconds from 1s to 12h (an SQS VisibilityTimeout)", o.LeaseTTL)
	}
	if o.WaitTime < 0 || o.WaitTime > 20*time.Second {
		return invalid("WaitTime %v outside 0..20s", o.WaitTime)
	}
	if o.FilterScanLimit <= 0 {
		o.FilterScanLimit = defaultFilterScanLimit
	}
	if o.MaxConcurrentBatches <= 0 {
		o.MaxConcurrentBatches = defaultMaxBatches
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
	return &driver{
		client:   client,
		opts:     o,
		log:      log,
		margin:   clocklease.Margin(o.LeaseTTL),
		urls:     map[string]string{},
		batchers: map[string]*queueBatchers{},
	}, nil
}

// Close does nothing: requests in flight complete (the portable store
// waits for them), and the client is the caller's.
func (s *driver) Close() error { return nil }

// As implements [broker.Aser]: target may be a *API or a **sqs.Client
// (when the store was made with one).
func (s *driver) As(target any) bool {
	switch t := target.(type) {
	case *API:
		*t = s.client
		return true
	case **awssqs.Client:
		c, ok := s.client.(*awssqs.Client)
		if ok {
			*t = c
		}
		return ok
	}
	return false
}

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

// isFIFO reports whether a queue name, URL or ARN names a FIFO queue: SQS
// requires FIFO queue names to end in ".fifo", and forbids it for standard
// queues.
func isFIFO(queue string) bool { return strings.HasSuffix(queue, ".fifo") }

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

// queueURL resolves destination to its queue URL (GetQueueUrl, or
// CreateQueue when Options.CreateQueues is set), once per destination.
func (s *driver) queueURL(ctx context.Context, destination string) (string, error) {
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
			string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(int(retentionPeriod / time.Second)),
		}
		if isFIFO(name) {
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
// have, Options.MaxMessageBytes − Options.HeaderBudget (258,048 bytes by
// default).
func (s *driver) MaxMessageBytes(string) int { return s.opts.MaxMessageBytes - s.opts.HeaderBudget }

// Publish sends m to the destination queue (SendMessage, or
// SendMessageBatch when concurrent calls coalesce) and returns once SQS
// has accepted it — SQS stores a message redundantly before it answers.
//
// The body is sent as is when SQS accepts its characters, else
// base64-encoded (attribute geodlq-body-encoding). Headers become String
// message attributes, or one geodlq-headers attribute when they do not fit
// SQS's 10; the key becomes [HeaderKey]. A message whose body and
// attributes exceed Options.MaxMessageBytes is refused with a
// *classify.TooLargeError (the portable store refuses a body over
// MaxMessageBytes − HeaderBudget before).
//
// On a FIFO queue (name ending in ".fifo") the MessageGroupId and
// MessageDeduplicationId of a dlq.v1 envelope's source are preserved (see
// groupID and [DeduplicationID]). An envelope whose source is a FIFO SQS
// queue is refused with a *[FIFOMismatchError] when the destination is a
// standard queue, unless Options.AllowFIFOToStandard is set.
func (s *driver) Publish(ctx context.Context, destination string, m *broker.Message) error {
	enc, err := encodeMessage(m)
	if err != nil {
		return err
	}
	if limit := s.MaxMessageBytes(destination); enc.bodyLen > limit {
		return &classify.TooLargeError{What: "message body", Destination: destination, Size: enc.bodyLen, Limit: limit}
	}
	if enc.size > s.opts.MaxMessageBytes {
		return &classify.TooLargeError{What: "message with its attributes", Destination: destination, Size: enc.size, Limit: s.opts.MaxMessageBytes}
	}
	qurl, err := s.queueURL(ctx, destination)
	if err != nil {
		return err
	}
	env := m.Envelope
	if env == nil {
		env = decodeEnvelope(m.Body)
	}
	item := sendItem{enc: enc}
	fifo := isFIFO(queueNameOf(qurl))
	if !fifo && !s.opts.AllowFIFOToStandard && env != nil && env.Source != nil && env.Source.System == "sqs" && isFIFO(env.Source.Topic) {
		return &FIFOMismatchError{Source: env.Source.Topic, DeadLetter: queueNameOf(qurl), SourceFIFO: true}
	}
	if fifo {
		item.group = groupID(m, env)
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

// groupID returns the MessageGroupId a message is published with on a FIFO
// queue: the envelope source's group id (the FIFO source's
// MessageGroupId, preserved), else the message key when it is a valid
// group id, else the key's SHA-256 in hex, else "geodlq".
func groupID(m *broker.Message, env *envelope.Envelope) string {
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

func (s *driver) queue(qurl string) *queueBatchers {
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

func (s *driver) sendBatch(ctx context.Context, qurl string, b []*entry[sendItem]) {
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

func (s *driver) deleteBatch(ctx context.Context, qurl string, b []*entry[string]) {
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

func (s *driver) releaseBatch(ctx context.Context, qurl string, b []*entry[string]) {
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
func (s *driver) changeVisibility(ctx context.Context, qurl string, handles []string, timeout time.Duration) []error {
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
			b[i].err = &entryError{Op: op, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
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
// (ReceiveMessage, 10 at a time, with VisibilityTimeout = Options.LeaseTTL).
//
// With a non-zero filter, Fetch keeps receiving until it has max matches,
// the queue returns nothing more, Options.FilterScanLimit messages were
// seen, or half the lease has passed. Messages that do not match are held
// invisible until the scan ends — so the scan does not see them twice and
// the matching messages behind them are reached — and then released at
// once (ChangeMessageVisibility 0). They are never deleted; if the release
// fails, their visibility timeout brings them back.
func (s *driver) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	qurl, err := s.queueURL(ctx, destination)
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
			VisibilityTimeout:           int32(s.opts.LeaseTTL / time.Second),
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
		deadline := t0.Add(s.opts.LeaseTTL)
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
		if filtered && (scanned >= s.opts.FilterScanLimit || time.Since(start) >= s.opts.LeaseTTL/2) {
			break
		}
	}
	s.releaseHeld(ctx, qurl, held)
	return out, nil
}

// releaseHeld makes messages a filtered scan held visible again.
func (s *driver) releaseHeld(ctx context.Context, qurl string, handles []string) {
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
func (s *driver) record(destination, qname string, msg types.Message, deadline time.Time) *broker.Record {
	body, key, headers, err := decodeMessage(msg)
	if err != nil {
		s.log.Warn("geodlq: sqs: undecodable attributes; record passed on raw", slog.Any("error", err))
		body = []byte(aws.ToString(msg.Body))
	}
	m := &broker.Message{Key: key, Body: body, Headers: headers}
	m.Source, m.DeliveryAttempt = sourceOf(qname, msg, key)
	rec := &broker.Record{
		ID:           aws.ToString(msg.MessageId),
		Destination:  destination,
		Message:      m,
		Deliveries:   m.DeliveryAttempt,
		Lease:        leases.Encode(deadline, aws.ToString(msg.ReceiptHandle)),
		LeaseExpires: deadline,
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
func (s *driver) lease(ctx context.Context, r *broker.Record, op string) (qurl, handle string, err error) {
	if handle, err = leases.Check(r, op, s.margin); err != nil {
		return "", "", err
	}
	if s.settled.Has(handle) {
		return "", "", fmt.Errorf("sqs: %s %s: already acknowledged or released by this store: %w", op, r.ID, broker.ErrLeaseLost)
	}
	qurl, err = s.queueURL(ctx, r.Destination)
	return qurl, handle, err
}

// Ack deletes the record (DeleteMessage, batched with concurrent Acks).
// A lease that ran out, or a receipt handle SQS rejects, gives an error
// wrapping broker.ErrLeaseLost.
func (s *driver) Ack(ctx context.Context, r *broker.Record) error {
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
	s.markSettled(r, handle)
	return nil
}

// markSettled remembers r's handle as settled while its lease could
// still pass the local check.
func (s *driver) markSettled(r *broker.Record, handle string) {
	if deadline, _, err := leases.Decode(r.Lease); err == nil {
		s.settled.Mark(handle, deadline)
	}
}

// Renew extends r's visibility timeout to LeaseTTL from now
// (ChangeMessageVisibility): SQS's own lease renewal. Like Ack, it
// refuses with broker.ErrLeaseLost, without calling SQS, a lease whose
// visibility timeout has run out by the local clock (less the margin) or
// a handle this store settled, and maps a receipt handle SQS rejects to
// broker.ErrLeaseLost. SQS holds a message at most 12 hours after its
// receipt; a renewal past that fails.
func (s *driver) Renew(ctx context.Context, r *broker.Record) error {
	qurl, handle, err := s.lease(ctx, r, "renew")
	if err != nil {
		return err
	}
	sent := time.Now()
	if err := s.changeVisibility(ctx, qurl, []string{handle}, s.opts.LeaseTTL)[0]; err != nil {
		if isLeaseLost(err) {
			return fmt.Errorf("sqs: renew %s: %w: %w", r.ID, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("sqs: renew %s: %w", r.ID, err)
	}
	until := sent.Add(s.opts.LeaseTTL)
	r.Lease = leases.Encode(until, handle)
	r.LeaseExpires = until
	return nil
}

// Release makes the record visible again at once (ChangeMessageVisibility
// with VisibilityTimeout 0, batched with concurrent Releases).
func (s *driver) Release(ctx context.Context, r *broker.Record) error {
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
	s.markSettled(r, handle)
	return nil
}
