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

// Limits and defaults (documented in numbers on the options).
const (
	defaultMaxMessageBytes = 10_000_000 // Pub/Sub's 10 MB
	defaultHeaderBudget    = 64 << 10
	defaultLease           = 60 * time.Second
	maxLease               = 600 * time.Second // Pub/Sub's largest ack deadline
	defaultFilterScanLimit = 10_000
	// Pub/Sub's limits on message attributes.
	maxAttributes, maxAttributeKeyBytes, maxAttributeValueBytes = 100, 256, 1024
	// pullBatch is how many messages one Pull asks for.
	pullBatch = 100
)

// HeaderKey is the attribute that carries a message's ordering key,
// base64 (standard encoding), when it has one.
const HeaderKey = "geodlq-key"

// attrHeaders carries all headers as one JSON object when they cannot
// travel as individual attributes (too many, or a key Pub/Sub refuses).
const attrHeaders = "geodlq-headers"

// Attributes Pub/Sub adds to a message its dead-letter policy forwards.
const (
	attrDLDeliveryCount       = "CloudPubSubDeadLetterSourceDeliveryCount"
	attrDLSubscription        = "CloudPubSubDeadLetterSourceSubscription"
	attrDLSubscriptionProject = "CloudPubSubDeadLetterSourceSubscriptionProject"
	attrDLTopicPublishTime    = "CloudPubSubDeadLetterSourceTopicPublishTime"
)

// Options configures [New]. The zero value and nil are valid.
type Options struct {
	// StoreOptions: LeaseTTL is the ack deadline Fetch gives the records
	// it returns (ModifyAckDeadline right after Pull), whole seconds from
	// 1s to 600s; default 60s. MaxMessageBytes is the most a message
	// (data, attribute keys and values, ordering key) may weigh; default
	// 10,000,000 (Pub/Sub's 10 MB).
	broker.StoreOptions
	// HeaderBudget is the part of MaxMessageBytes kept for attributes:
	// the data may use MaxMessageBytes − HeaderBudget, the limit the store
	// reports (broker.Limiter). Default 65,536 bytes.
	HeaderBudget int
	// Subscription names the subscription Fetch reads for a destination
	// topic. Default [Subscription]: the topic id + "-geodlq".
	Subscription func(destination string) string
	// CreateTopics creates a missing destination topic and its Fetch
	// subscription before the first write. Default false: they are
	// infrastructure.
	CreateTopics bool
	// FilterScanLimit bounds how many messages a Fetch with a non-zero
	// filter pulls while looking for matches. Default 10,000.
	FilterScanLimit int
	// PublishSettings are the Publisher's batching settings. Nil means
	// pubsub.DefaultPublishSettings (batches close after 10 ms or 100
	// messages); Publish waits for its batch either way.
	PublishSettings *pubsub.PublishSettings
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

// driver is the Pub/Sub [broker.Driver]. It is safe for concurrent use.
type driver struct {
	client *pubsub.Client
	opts   Options
	log    *slog.Logger
	margin time.Duration
	// settled holds the ack ids this handle acknowledged or released:
	// Pub/Sub silently accepts a stale one.
	settled clocklease.Settled

	mu         sync.Mutex
	publishers map[string]*pubsub.Publisher
	ready      map[string]bool // destinations whose topic has a subscription
}

var (
	_ broker.Driver  = (*driver)(nil)
	_ broker.Limiter = (*driver)(nil)
	_ broker.Aser    = (*driver)(nil)
)

// New returns a dead-letter store on the Pub/Sub topics of client's
// project. New makes no request; closing the store stops its publishers
// (flushing what they hold) and leaves client open. Options are checked:
// a value Pub/Sub would refuse is an error wrapping
// broker.ErrInvalidArgument.
func New(ctx context.Context, client *pubsub.Client, opts *Options) (*broker.Store, error) {
	if client == nil {
		return nil, fmt.Errorf("pubsub: New: nil client: %w", broker.ErrInvalidArgument)
	}
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
		return nil, fmt.Errorf("pubsub: HeaderBudget %d must be below MaxMessageBytes %d: %w", o.HeaderBudget, o.MaxMessageBytes, broker.ErrInvalidArgument)
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = defaultLease
	}
	if o.LeaseTTL < time.Second || o.LeaseTTL > maxLease || o.LeaseTTL%time.Second != 0 {
		return nil, fmt.Errorf("pubsub: LeaseTTL %v must be whole seconds from 1s to 600s (an ack deadline): %w", o.LeaseTTL, broker.ErrInvalidArgument)
	}
	if o.Subscription == nil {
		o.Subscription = Subscription
	}
	if o.FilterScanLimit <= 0 {
		o.FilterScanLimit = defaultFilterScanLimit
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &driver{client: client, opts: o, log: log, margin: clocklease.Margin(o.LeaseTTL),
		publishers: map[string]*pubsub.Publisher{}, ready: map[string]bool{}}
	return broker.NewStore("pubsub", d, &o.StoreOptions), nil
}

// Close stops the store's publishers, flushing what they hold. The client
// stays open.
func (s *driver) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.publishers {
		p.Stop()
	}
	return nil
}

// As implements [broker.Aser]: target may be a **pubsub.Client.
func (s *driver) As(target any) bool {
	if t, ok := target.(**pubsub.Client); ok {
		*t = s.client
		return true
	}
	return false
}

func (s *driver) topicName(dest string) string {
	if strings.HasPrefix(dest, "projects/") {
		return dest
	}
	return "projects/" + s.client.Project() + "/topics/" + dest
}

func (s *driver) subName(dest string) string {
	sub := s.opts.Subscription(dest)
	if strings.HasPrefix(sub, "projects/") {
		return sub
	}
	return "projects/" + s.client.Project() + "/subscriptions/" + sub
}

// MaxMessageBytes implements broker.Limiter: Options.MaxMessageBytes −
// Options.HeaderBudget (9,934,464 bytes by default).
func (s *driver) MaxMessageBytes(string) int { return s.opts.MaxMessageBytes - s.opts.HeaderBudget }

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
func (s *driver) ensure(ctx context.Context, dest string) error {
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
			Name: s.subName(dest), Topic: topic, AckDeadlineSeconds: int32(s.opts.LeaseTTL / time.Second),
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

func (s *driver) publisher(dest string) *pubsub.Publisher {
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
		attrs[HeaderKey] = base64.StdEncoding.EncodeToString(m.Key)
	}
	individual := len(attrs)+len(m.Headers) <= maxAttributes
	for k, v := range m.Headers {
		if k == HeaderKey || k == attrHeaders {
			return nil, 0, fmt.Errorf("pubsub: header %q uses a name the adapter reserves", k)
		}
		if k == "" || len(k) > maxAttributeKeyBytes || strings.HasPrefix(k, "goog") || !utf8.ValidString(k) ||
			len(v) > maxAttributeValueBytes || !utf8.ValidString(v) {
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
		if len(b) > maxAttributeValueBytes {
			return nil, 0, fmt.Errorf("pubsub: headers do not fit Pub/Sub's attributes (%d values, %d bytes packed; at most %d attributes of %d-byte values)",
				len(m.Headers), len(b), maxAttributes, maxAttributeValueBytes)
		}
		attrs[attrHeaders] = string(b)
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
// [attrHeaders] attribute when they do not fit Pub/Sub's rules), the key
// [HeaderKey]. Before the first write to a destination the store checks that
// its topic has a subscription, and refuses with a *[NoSubscriptionError]
// when it has none (with Options.CreateTopics it creates one instead). A
// message over the limits is refused with a *classify.TooLargeError.
func (s *driver) Publish(ctx context.Context, destination string, m *broker.Message) error {
	attrs, asize, err := encode(m)
	if err != nil {
		return err
	}
	if total := len(m.Body) + asize; total > s.opts.MaxMessageBytes {
		return &classify.TooLargeError{What: "message with its attributes", Destination: destination, Size: total, Limit: s.opts.MaxMessageBytes}
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
func (s *driver) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
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
		if err := s.modAck(ctx, sub, ids, s.opts.LeaseTTL); err != nil {
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
		deadline := t0.Add(s.opts.LeaseTTL)
		for _, m := range msgs {
			rec := s.record(destination, m, deadline)
			if len(out) >= max || filtered && !f.Match(rec.Envelope) {
				held = append(held, m.GetAckId())
				continue
			}
			out = append(out, rec)
		}
		if filtered && (scanned >= s.opts.FilterScanLimit || time.Since(start) >= s.opts.LeaseTTL/2) {
			break
		}
	}
	s.release(ctx, sub, held)
	return out, nil
}

func (s *driver) modAck(ctx context.Context, sub string, ids []string, d time.Duration) error {
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

func (s *driver) release(ctx context.Context, sub string, ids []string) {
	if len(ids) == 0 {
		return
	}
	if err := s.modAck(context.WithoutCancel(ctx), sub, ids, 0); err != nil {
		s.log.WarnContext(ctx, "geodlq: pubsub: could not release messages a filtered fetch held; their ack deadline brings them back",
			slog.String("subscription", sub), slog.Int("messages", len(ids)), slog.Any("error", err))
	}
}

func (s *driver) record(destination string, rm *pubsubpb.ReceivedMessage, deadline time.Time) *broker.Record {
	pm := rm.GetMessage()
	m := &broker.Message{Body: pm.GetData()}
	m.Key, m.Headers = decodeAttributes(pm.GetAttributes())
	m.DeliveryAttempt = int(rm.GetDeliveryAttempt())
	pt := pm.GetPublishTime().AsTime()
	m.Source = sourceOf(pm.GetAttributes(), &envelope.Source{System: "pubsub", Topic: s.topicName(destination), MessageID: pm.GetMessageId(), Key: m.Key, Timestamp: &pt})
	rec := &broker.Record{ID: pm.GetMessageId(), Destination: destination, Message: m, Deliveries: m.DeliveryAttempt,
		Lease: leases.Encode(deadline, rm.GetAckId()), LeaseExpires: deadline}
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
		case HeaderKey:
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				key = b
			}
		case attrHeaders:
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

// sourceOf returns the provenance of a message, given its attributes and
// the provenance it has where it was read (def). When Pub/Sub's dead-letter
// policy forwarded the message, its CloudPubSubDeadLetterSource*
// attributes name the real source, and they win: the topic becomes the
// source subscription ("projects/<project>/subscriptions/<subscription>"),
// the delivery count is CloudPubSubDeadLetterSourceDeliveryCount, and the
// timestamp the original publish time. Attributes that do not parse are
// ignored (they stay in the headers). def is returned otherwise, and may be
// nil.
func sourceOf(attrs map[string]string, def *envelope.Source) *envelope.Source {
	sub, ok := attrs[attrDLSubscription]
	if !ok {
		return def
	}
	src := &envelope.Source{System: "pubsub"}
	if def != nil {
		*src = *def
		src.System = "pubsub"
	}
	if !strings.HasPrefix(sub, "projects/") {
		if p := attrs[attrDLSubscriptionProject]; p != "" {
			sub = "projects/" + p + "/subscriptions/" + sub
		}
	}
	src.Topic = sub
	if n, err := strconv.Atoi(attrs[attrDLDeliveryCount]); err == nil && n > 0 {
		src.DeliveryCount = n
	}
	if t, err := time.Parse(time.RFC3339Nano, attrs[attrDLTopicPublishTime]); err == nil {
		t = t.UTC()
		src.Timestamp = &t
	}
	return src
}

// lease checks r's lease by the local clock: Pub/Sub (without exactly-once
// delivery) silently ignores an expired ack id, so the store refuses, with
// broker.ErrLeaseLost, an ack id whose deadline has run out (less a tenth
// of the lease, at most 1 s).
func (s *driver) lease(r *broker.Record, op string) (sub, ackID string, err error) {
	if ackID, err = leases.Check(r, op, s.margin); err != nil {
		return "", "", err
	}
	if s.settled.Has(ackID) {
		return "", "", fmt.Errorf("pubsub: %s %s: already acknowledged or released by this store: %w", op, r.ID, broker.ErrLeaseLost)
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
func (s *driver) Ack(ctx context.Context, r *broker.Record) error {
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
	s.markSettled(r, id)
	return nil
}

// markSettled remembers r's ack id as settled while its lease could still
// pass the local check.
func (s *driver) markSettled(r *broker.Record, ackID string) {
	if deadline, _, err := leases.Decode(r.Lease); err == nil {
		s.settled.Mark(ackID, deadline)
	}
}

// Renew extends r's ack deadline to LeaseTTL from now (ModifyAckDeadline):
// Pub/Sub's own lease extension. Like Ack, it refuses with
// broker.ErrLeaseLost, without calling Pub/Sub, an ack id whose deadline
// has run out by the local clock (less the margin) — Pub/Sub without
// exactly-once delivery would silently accept it — or one this store
// settled.
func (s *driver) Renew(ctx context.Context, r *broker.Record) error {
	sub, id, err := s.lease(r, "renew")
	if err != nil {
		return err
	}
	sent := time.Now()
	if err := s.modAck(ctx, sub, []string{id}, s.opts.LeaseTTL); err != nil {
		if isLeaseLost(err) {
			return fmt.Errorf("pubsub: renew %s: %w: %w", r.ID, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("pubsub: renew %s: %w", r.ID, err)
	}
	until := sent.Add(s.opts.LeaseTTL)
	r.Lease = leases.Encode(until, id)
	r.LeaseExpires = until
	return nil
}

// Release makes the record available again at once (ModifyAckDeadline 0,
// a nack).
func (s *driver) Release(ctx context.Context, r *broker.Record) error {
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
	s.markSettled(r, id)
	return nil
}
