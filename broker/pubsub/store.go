package pubsub

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/clocklease"
)

// Limits and defaults.
const (
	// DefaultMaxMessageBytes is Pub/Sub's message size limit: 10 MB
	// (10,000,000 bytes) of data, attributes and ordering key.
	DefaultMaxMessageBytes = 10_000_000
	// DefaultAttributeBudget is the part of MaxMessageBytes kept for
	// attributes and the ordering key: 64 KiB.
	DefaultAttributeBudget = 64 << 10
	// DefaultLease is the ack deadline of fetched records: 60 s.
	DefaultLease = 60 * time.Second
	// MaxLease is the largest ack deadline Pub/Sub accepts: 600 s.
	MaxLease = 600 * time.Second
	// DefaultFilterScanLimit is how many messages a filtered Fetch looks
	// at, at most.
	DefaultFilterScanLimit = 10_000
	// MaxAttributes, MaxAttributeKeyBytes and MaxAttributeValueBytes are
	// Pub/Sub's limits on message attributes.
	MaxAttributes, MaxAttributeKeyBytes, MaxAttributeValueBytes = 100, 256, 1024
	// pullBatch is how many messages one Pull asks for.
	pullBatch = 100
)

// Attributes the adapter sets besides the message's own headers.
const (
	// AttrKey carries the message's ordering key, base64 (standard
	// encoding), when it has one.
	AttrKey = "geodlq-key"
	// AttrHeaders carries all headers as one JSON object when they cannot
	// travel as individual attributes (too many, or a key Pub/Sub refuses).
	AttrHeaders = "geodlq-headers"
)

// Attributes Pub/Sub adds to a message its dead-letter policy forwards.
const (
	// AttrDeadLetterDeliveryCount is the number of delivery attempts.
	AttrDeadLetterDeliveryCount = "CloudPubSubDeadLetterSourceDeliveryCount"
	// AttrDeadLetterSubscription is the source subscription's id.
	AttrDeadLetterSubscription = "CloudPubSubDeadLetterSourceSubscription"
	// AttrDeadLetterSubscriptionProject is the source subscription's project.
	AttrDeadLetterSubscriptionProject = "CloudPubSubDeadLetterSourceSubscriptionProject"
	// AttrDeadLetterTopicPublishTime is when the message was first
	// published (RFC 3339).
	AttrDeadLetterTopicPublishTime = "CloudPubSubDeadLetterSourceTopicPublishTime"
	// AttrDeadLetterErrorMessage is the delivery error (push subscriptions).
	AttrDeadLetterErrorMessage = "CloudPubSubDeadLetterSourceDeliveryErrorMessage"
)

// Options configures a [Store]. The zero value (and nil) uses the defaults.
type Options struct {
	// MaxMessageBytes is the most a message (data, attribute keys and
	// values, ordering key) may weigh. Default [DefaultMaxMessageBytes]
	// (Pub/Sub's 10 MB).
	MaxMessageBytes int
	// AttributeBudget is the part of MaxMessageBytes kept for attributes:
	// the data may use MaxMessageBytes − AttributeBudget, the limit the
	// store reports through broker.Limiter. Default [DefaultAttributeBudget].
	AttributeBudget int
	// Lease is the ack deadline Fetch gives the records it returns
	// (ModifyAckDeadline right after Pull): whole seconds, 1 s to 600 s.
	// Default [DefaultLease].
	Lease time.Duration
	// Subscription names the subscription Fetch reads for a destination
	// topic. Default [Subscription]: the topic id + "-geodlq".
	Subscription func(destination string) string
	// CreateTopics creates a missing destination topic and its Fetch
	// subscription (retaining messages for 7 days, Pub/Sub's maximum)
	// before the first write. Default false: they are infrastructure.
	CreateTopics bool
	// FilterScanLimit bounds how many messages a Fetch with a non-zero
	// filter pulls while looking for matches. Default
	// [DefaultFilterScanLimit].
	FilterScanLimit int
	// PublishSettings are the Publisher's batching settings. Nil means
	// pubsub.DefaultPublishSettings (batches close after 10 ms or 100
	// messages); Publish waits for its batch either way.
	PublishSettings *pubsub.PublishSettings
	// Logger receives warnings. Nil discards.
	Logger *slog.Logger
}

// Subscription is the default subscription of a destination topic: its id
// followed by "-geodlq" (a full topic name's id part).
func Subscription(destination string) string {
	return topicID(destination) + "-geodlq"
}

func topicID(name string) string {
	if i := strings.LastIndex(name, "/topics/"); i >= 0 {
		return name[i+len("/topics/"):]
	}
	return name
}

// Store is a dead-letter store on Pub/Sub: a [broker.Publisher],
// [broker.Limiter] and [broker.DeadLetterSource]. Destinations are topics;
// records are read from one subscription per topic. It is safe for
// concurrent use.
type Store struct {
	client *pubsub.Client
	opts   Options
	log    *slog.Logger
	margin time.Duration
	closed atomic.Bool

	mu         sync.Mutex
	publishers map[string]*pubsub.Publisher
	ready      map[string]bool // destinations whose topic has a subscription
}

// New returns a store over client. nil opts means the defaults. New makes
// no request; the client stays the caller's.
func New(ctx context.Context, client *pubsub.Client, opts *Options) (*Store, error) {
	_ = ctx
	if client == nil {
		return nil, errors.New("pubsub: nil client")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.AttributeBudget == 0 {
		o.AttributeBudget = DefaultAttributeBudget
	}
	if o.MaxMessageBytes < 0 || o.AttributeBudget < 0 || o.AttributeBudget >= o.MaxMessageBytes {
		return nil, fmt.Errorf("pubsub: AttributeBudget %d must be below MaxMessageBytes %d", o.AttributeBudget, o.MaxMessageBytes)
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Lease < time.Second || o.Lease > MaxLease || o.Lease%time.Second != 0 {
		return nil, fmt.Errorf("pubsub: Lease %v must be whole seconds from 1s to 600s (an ack deadline)", o.Lease)
	}
	if o.Subscription == nil {
		o.Subscription = Subscription
	}
	if o.FilterScanLimit == 0 {
		o.FilterScanLimit = DefaultFilterScanLimit
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{client: client, opts: o, log: log, margin: clocklease.Margin(o.Lease),
		publishers: map[string]*pubsub.Publisher{}, ready: map[string]bool{}}, nil
}

// Close stops the store's publishers (flushing what they hold); later
// calls fail with broker.ErrClosed. The client stays open.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.publishers {
		p.Stop()
	}
	return nil
}

// Client returns the Pub/Sub client the store uses.
func (s *Store) Client() *pubsub.Client { return s.client }

func (s *Store) topicName(dest string) string {
	if strings.HasPrefix(dest, "projects/") {
		return dest
	}
	return "projects/" + s.client.Project() + "/topics/" + dest
}

func (s *Store) subName(dest string) string {
	sub := s.opts.Subscription(dest)
	if strings.HasPrefix(sub, "projects/") {
		return sub
	}
	return "projects/" + s.client.Project() + "/subscriptions/" + sub
}

// MaxMessageBytes implements broker.Limiter: Options.MaxMessageBytes −
// Options.AttributeBudget (9,934,464 bytes by default).
func (s *Store) MaxMessageBytes(string) int { return s.opts.MaxMessageBytes - s.opts.AttributeBudget }

// ErrNoSubscription is wrapped by [*NoSubscriptionError].
var ErrNoSubscription = errors.New("pubsub: topic has no subscription")

// NoSubscriptionError reports a topic without a subscription: Pub/Sub
// keeps a message only for the subscriptions that exist when it is
// published, so anything published there — a dead-letter envelope, or a
// message a dead-letter policy forwards — would be lost.
type NoSubscriptionError struct{ Topic string }

func (e *NoSubscriptionError) Error() string {
	return fmt.Sprintf("pubsub: topic %s has no subscription: messages published to it would be lost; create one before dead-lettering there", e.Topic)
}

// Unwrap returns [ErrNoSubscription].
func (e *NoSubscriptionError) Unwrap() error { return ErrNoSubscription }

// ensure checks, once per destination, that its topic has a subscription,
// creating topic and Fetch subscription when Options.CreateTopics is set.
func (s *Store) ensure(ctx context.Context, dest string) error {
	s.mu.Lock()
	ok := s.ready[dest]
	s.mu.Unlock()
	if ok {
		return nil
	}
	topic := s.topicName(dest)
	_, err := s.client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	if status.Code(err) == codes.NotFound && s.opts.CreateTopics {
		_, err = s.client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic})
		if status.Code(err) == codes.AlreadyExists {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("pubsub: topic %s: %w", topic, err)
	}
	n, err := countSubscriptions(ctx, s.client, topic)
	if err != nil {
		return fmt.Errorf("pubsub: subscriptions of %s: %w", topic, err)
	}
	if n == 0 {
		if !s.opts.CreateTopics {
			return &NoSubscriptionError{Topic: topic}
		}
		_, err := s.client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
			Name: s.subName(dest), Topic: topic, AckDeadlineSeconds: int32(s.opts.Lease / time.Second),
		})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("pubsub: create subscription %s: %w", s.subName(dest), err)
		}
	}
	s.mu.Lock()
	s.ready[dest] = true
	s.mu.Unlock()
	return nil
}

func countSubscriptions(ctx context.Context, client *pubsub.Client, topic string) (int, error) {
	it := client.TopicAdminClient.ListTopicSubscriptions(ctx, &pubsubpb.ListTopicSubscriptionsRequest{Topic: topic})
	n := 0
	for {
		_, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

func (s *Store) publisher(dest string) *pubsub.Publisher {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.publishers[dest]; ok {
		return p
	}
	p := s.client.Publisher(s.topicName(dest))
	if s.opts.PublishSettings != nil {
		p.PublishSettings = *s.opts.PublishSettings
	}
	s.publishers[dest] = p
	return p
}

// encode maps m onto Pub/Sub attributes.
func encode(m *broker.Message) (map[string]string, int, error) {
	attrs := map[string]string{}
	if len(m.Key) > 0 {
		attrs[AttrKey] = base64.StdEncoding.EncodeToString(m.Key)
	}
	individual := len(attrs)+len(m.Headers) <= MaxAttributes
	for k, v := range m.Headers {
		if k == AttrKey || k == AttrHeaders {
			return nil, 0, fmt.Errorf("pubsub: header %q uses a name the adapter reserves", k)
		}
		if k == "" || len(k) > MaxAttributeKeyBytes || strings.HasPrefix(k, "goog") || !utf8.ValidString(k) ||
			len(v) > MaxAttributeValueBytes || !utf8.ValidString(v) {
			individual = false
		}
	}
	if individual {
		maps.Copy(attrs, m.Headers)
	} else if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return nil, 0, fmt.Errorf("pubsub: packing headers: %w", err)
		}
		if len(b) > MaxAttributeValueBytes {
			return nil, 0, fmt.Errorf("pubsub: headers do not fit Pub/Sub's attributes (%d values, %d bytes packed; at most %d attributes of %d-byte values)",
				len(m.Headers), len(b), MaxAttributes, MaxAttributeValueBytes)
		}
		attrs[AttrHeaders] = string(b)
	}
	size := 0
	for k, v := range attrs {
		size += len(k) + len(v)
	}
	return attrs, size, nil
}

// Publish publishes m to the destination topic and returns once Pub/Sub
// has acknowledged the publish (the message is stored for every
// subscription of the topic).
//
// The data is m.Body exactly. Headers become attributes (or one
// [AttrHeaders] attribute when they do not fit Pub/Sub's rules), the key
// [AttrKey]. Before the first write to a destination the store checks that
// its topic has a subscription, and refuses with a *[NoSubscriptionError]
// when it has none (with Options.CreateTopics it creates one instead). A
// message over the limits is refused with a *classify.TooLargeError.
func (s *Store) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if s.closed.Load() {
		return broker.ErrClosed
	}
	if m == nil {
		return errors.New("pubsub: nil message")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if limit := s.MaxMessageBytes(destination); len(m.Body) > limit {
		return &classify.TooLargeError{Destination: destination, Size: len(m.Body), Limit: limit}
	}
	attrs, asize, err := encode(m)
	if err != nil {
		return err
	}
	if total := len(m.Body) + asize; total > s.opts.MaxMessageBytes {
		return &classify.TooLargeError{Destination: destination, Size: total, Limit: s.opts.MaxMessageBytes}
	}
	if err := s.ensure(ctx, destination); err != nil {
		return err
	}
	if _, err := s.publisher(destination).Publish(ctx, &pubsub.Message{Data: m.Body, Attributes: attrs}).Get(ctx); err != nil {
		return fmt.Errorf("pubsub: publish to %s: %w", destination, err)
	}
	return nil
}

// leases is the content of Record.Lease: the ack deadline by the local
// clock, a space, and the ack id.
var leases = clocklease.Codec{Prefix: "pubsub", Sep: " ", Expired: "ack deadline passed"}

// Fetch pulls up to max records of destination's subscription that match
// f, and gives each an ack deadline of Options.Lease. The messages of each
// Pull (up to 100) are sorted by publish time; a Fetch that pulls several
// times does not order across pulls, and since the Store sets no ordering
// key, Pub/Sub's message ordering never applies to its records.
//
// With a non-zero filter, Fetch keeps pulling until it has max matches,
// the subscription returns nothing more, Options.FilterScanLimit messages
// were seen, or half the lease has passed. Messages that do not match are
// held until the scan ends — so matching messages behind them are reached
// — and then released at once (ModifyAckDeadline 0). They are never
// acknowledged; if the release fails their deadline brings them back.
//
// Pull is made with ReturnImmediately, so an empty Fetch does not prove
// the subscription empty on the real service.
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
	if s.opts.CreateTopics {
		if err := s.ensure(ctx, destination); err != nil {
			return nil, err
		}
	}
	sub := s.subName(destination)
	filtered := !f.IsZero()
	var out []*broker.Record
	var held []string
	start, scanned := time.Now(), 0
	for len(out) < max {
		n := min(pullBatch, max-len(out))
		if filtered {
			n = pullBatch
		}
		t0 := time.Now()
		resp, err := s.client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: int32(n), ReturnImmediately: true}) //nolint:staticcheck // ReturnImmediately: Fetch must not block
		if err != nil {
			for _, r := range out {
				_, id, _ := leases.Decode(r.Lease)
				held = append(held, id)
			}
			s.release(ctx, sub, held)
			return nil, fmt.Errorf("pubsub: fetch from %s: %w", sub, err)
		}
		msgs := resp.GetReceivedMessages()
		if len(msgs) == 0 {
			break
		}
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.GetAckId()
		}
		if err := s.modAck(ctx, sub, ids, s.opts.Lease); err != nil {
			s.release(ctx, sub, append(held, ids...))
			return nil, fmt.Errorf("pubsub: setting the lease on %s: %w", sub, err)
		}
		slices.SortStableFunc(msgs, func(a, b *pubsubpb.ReceivedMessage) int {
			if c := a.GetMessage().GetPublishTime().AsTime().Compare(b.GetMessage().GetPublishTime().AsTime()); c != 0 {
				return c
			}
			ai, bi := a.GetMessage().GetMessageId(), b.GetMessage().GetMessageId()
			if len(ai) != len(bi) {
				return len(ai) - len(bi)
			}
			return strings.Compare(ai, bi)
		})
		scanned += len(msgs)
		deadline := t0.Add(s.opts.Lease)
		for _, m := range msgs {
			rec := s.record(destination, m, deadline)
			if len(out) >= max || filtered && !f.Match(rec.Envelope) {
				held = append(held, m.GetAckId())
				continue
			}
			out = append(out, rec)
		}
		if filtered && (scanned >= s.opts.FilterScanLimit || time.Since(start) >= s.opts.Lease/2) {
			break
		}
	}
	s.release(ctx, sub, held)
	return out, nil
}

func (s *Store) modAck(ctx context.Context, sub string, ids []string, d time.Duration) error {
	for len(ids) > 0 {
		n := min(len(ids), 1000)
		if err := s.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{
			Subscription: sub, AckIds: ids[:n], AckDeadlineSeconds: int32(d / time.Second)}); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

func (s *Store) release(ctx context.Context, sub string, ids []string) {
	if len(ids) == 0 {
		return
	}
	if err := s.modAck(context.WithoutCancel(ctx), sub, ids, 0); err != nil {
		s.log.WarnContext(ctx, "geodlq: pubsub: could not release messages a filtered fetch held; their ack deadline brings them back",
			slog.String("subscription", sub), slog.Int("messages", len(ids)), slog.Any("error", err))
	}
}

func (s *Store) record(destination string, rm *pubsubpb.ReceivedMessage, deadline time.Time) *broker.Record {
	pm := rm.GetMessage()
	m := &broker.Message{Body: pm.GetData()}
	m.Key, m.Headers = decodeAttributes(pm.GetAttributes())
	m.DeliveryAttempt = int(rm.GetDeliveryAttempt())
	pt := pm.GetPublishTime().AsTime()
	m.Source = SourceOf(pm.GetAttributes(), &envelope.Source{System: "pubsub", Topic: s.topicName(destination), MessageID: pm.GetMessageId(), Key: m.Key, Timestamp: &pt})
	rec := &broker.Record{ID: pm.GetMessageId(), Destination: destination, Message: m, Deliveries: m.DeliveryAttempt,
		Lease: leases.Encode(deadline, rm.GetAckId())}
	if env, err := envelope.Decode(m.Body); err == nil {
		rec.Envelope = env
	}
	return rec
}

// decodeAttributes reverses encode: the key, and the headers (every
// attribute but the adapter's own; packed headers unpacked).
func decodeAttributes(attrs map[string]string) (key []byte, headers map[string]string) {
	for k, v := range attrs {
		switch k {
		case AttrKey:
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				key = b
			}
		case AttrHeaders:
			var h map[string]string
			if json.Unmarshal([]byte(v), &h) == nil {
				if headers == nil {
					headers = map[string]string{}
				}
				maps.Copy(headers, h)
			}
		default:
			if headers == nil {
				headers = map[string]string{}
			}
			headers[k] = v
		}
	}
	return key, headers
}

// SourceOf returns the provenance of a message, given its attributes and
// the provenance it has where it was read (def). When Pub/Sub's dead-letter
// policy forwarded the message, its CloudPubSubDeadLetterSource*
// attributes name the real source, and they win: the topic becomes the
// source subscription ("projects/<project>/subscriptions/<subscription>"),
// the delivery count is CloudPubSubDeadLetterSourceDeliveryCount, and the
// timestamp the original publish time. Attributes that do not parse are
// ignored (they stay in the headers). def is returned otherwise, and may be
// nil.
func SourceOf(attrs map[string]string, def *envelope.Source) *envelope.Source {
	sub, ok := attrs[AttrDeadLetterSubscription]
	if !ok {
		return def
	}
	src := &envelope.Source{System: "pubsub"}
	if def != nil {
		*src = *def
		src.System = "pubsub"
	}
	if !strings.HasPrefix(sub, "projects/") {
		if p := attrs[AttrDeadLetterSubscriptionProject]; p != "" {
			sub = "projects/" + p + "/subscriptions/" + sub
		}
	}
	src.Topic = sub
	if n, err := strconv.Atoi(attrs[AttrDeadLetterDeliveryCount]); err == nil && n > 0 {
		src.DeliveryCount = n
	}
	if t, err := time.Parse(time.RFC3339Nano, attrs[AttrDeadLetterTopicPublishTime]); err == nil {
		t = t.UTC()
		src.Timestamp = &t
	}
	return src
}

// lease checks r's lease by the local clock: Pub/Sub (without exactly-once
// delivery) silently ignores an expired ack id, so the store refuses, with
// broker.ErrLeaseLost, an ack id whose deadline has run out (less a tenth
// of the lease, at most 1 s).
func (s *Store) lease(r *broker.Record, op string) (sub, ackID string, err error) {
	if s.closed.Load() {
		return "", "", broker.ErrClosed
	}
	if ackID, err = leases.Check(r, op, s.margin); err != nil {
		return "", "", err
	}
	return s.subName(r.Destination), ackID, nil
}

// isLeaseLost reports whether err is Pub/Sub rejecting an ack id (with
// exactly-once delivery it reports invalid or expired ack ids).
func isLeaseLost(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	return (st.Code() == codes.InvalidArgument || st.Code() == codes.FailedPrecondition) &&
		strings.Contains(strings.ToLower(st.Message()), "ack")
}

// Ack acknowledges the record (Acknowledge).
func (s *Store) Ack(ctx context.Context, r *broker.Record) error {
	sub, id, err := s.lease(r, "ack")
	if err != nil {
		return err
	}
	if err := s.client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: []string{id}}); err != nil {
		if isLeaseLost(err) {
			return fmt.Errorf("pubsub: ack %s: %w: %w", r.ID, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("pubsub: ack %s: %w", r.ID, err)
	}
	return nil
}

// Release makes the record available again at once (ModifyAckDeadline 0,
// a nack).
func (s *Store) Release(ctx context.Context, r *broker.Record) error {
	sub, id, err := s.lease(r, "release")
	if err != nil {
		return err
	}
	if err := s.modAck(ctx, sub, []string{id}, 0); err != nil {
		if isLeaseLost(err) {
			return fmt.Errorf("pubsub: release %s: %w: %w", r.ID, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("pubsub: release %s: %w", r.ID, err)
	}
	return nil
}

var (
	_ broker.Publisher        = (*Store)(nil)
	_ broker.Limiter          = (*Store)(nil)
	_ broker.DeadLetterSource = (*Store)(nil)
)
