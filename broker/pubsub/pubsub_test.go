package pubsub_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/geodlq/geodlq/broker"
	geopubsub "github.com/geodlq/geodlq/broker/pubsub"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/offload"
)

var fastPublish = &pubsub.PublishSettings{DelayThreshold: time.Millisecond, CountThreshold: 100, ByteThreshold: 1 << 20, Timeout: time.Minute}

func newStore(t *testing.T, c *pubsub.Client, o geopubsub.Options) *broker.Store {
	t.Helper()
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 10 * time.Second
	}
	o.PublishSettings = fastPublish
	s, err := geopubsub.New(context.Background(), c, &o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func topic(t *testing.T, c *pubsub.Client, id string, subs ...*pubsubpb.Subscription) string {
	t.Helper()
	name := "projects/" + project + "/topics/" + id
	_, err := c.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: name})
	require.NoError(t, err)
	for _, s := range subs {
		s.Topic = name
		if !strings.HasPrefix(s.Name, "projects/") {
			s.Name = "projects/" + project + "/subscriptions/" + s.Name
		}
		_, err := c.SubscriptionAdminClient.CreateSubscription(context.Background(), s)
		require.NoError(t, err)
	}
	return name
}

func drain(t *testing.T, s *broker.Store, dest string) []*broker.Record {
	t.Helper()
	var all []*broker.Record
	for {
		recs, err := s.Fetch(context.Background(), dest, broker.Filter{}, 100)
		require.NoError(t, err)
		if len(recs) == 0 {
			return all
		}
		all = append(all, recs...)
	}
}

func processor(t *testing.T, pub broker.Publisher, dest string) *broker.Processor {
	t.Helper()
	p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: pub,
		Destination: func(*broker.Message, classify.Route) string { return dest },
		Sleep:       func(context.Context, time.Duration) error { return nil }})
	require.NoError(t, err)
	return p
}

const bowtie = `{"event_id":"evt-bowtie","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}}`

func poison(context.Context, *broker.Message) error {
	return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
}

// TestConsumerAcksAfterDeadLetterPublish: a poison message is published to
// the dead-letter topic, and only then acknowledged.
func TestConsumerAcksAfterDeadLetterPublish(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv)
	src := topic(t, c, "vector-jobs", &pubsubpb.Subscription{Name: "vector-jobs-sub", AckDeadlineSeconds: 10})
	store := newStore(t, c, geopubsub.Options{CreateTopics: true})
	cons, err := geopubsub.NewConsumer(context.Background(), c, "vector-jobs-sub", processor(t, store, "vector-dlq"), nil)
	require.NoError(t, err)
	id, err := c.Publisher(src).Publish(context.Background(), &pubsub.Message{Data: []byte(bowtie), Attributes: map[string]string{"idempotency-key": "idem:v1:bowtie"}}).Get(context.Background())
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- cons.Run(ctx, func(ctx context.Context, m *broker.Message) error {
			require.Equal(t, "idem:v1:bowtie", m.Header(broker.HeaderIdempotencyKey))
			return poison(ctx, m)
		})
	}()
	var recs []*broker.Record
	require.Eventually(t, func() bool {
		recs = append(recs, drain(t, store, "vector-dlq")...)
		return len(recs) == 1
	}, 60*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return srv.Message(id).Acks == 1 }, 60*time.Second, 10*time.Millisecond, "source acknowledged after the dead-letter write")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, cons.Close())
	env := recs[0].Envelope
	require.Equal(t, classify.ClassInvalidGeometry, env.FailureClass)
	require.Equal(t, "pubsub", env.Source.System)
	require.Equal(t, "projects/"+project+"/subscriptions/vector-jobs-sub", env.Source.Topic)
	require.Equal(t, id, env.Source.MessageID)
	require.Equal(t, "idem:v1:bowtie", env.IdempotencyKey)
	restored, err := env.Restore(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, bowtie, string(restored))
}

type failingPublisher struct{ calls atomic.Int32 }

func (f *failingPublisher) Publish(context.Context, string, *broker.Message) error {
	f.calls.Add(1)
	return errors.New("pubsub: publish: rpc error: code = Unavailable")
}

// TestConsumerNacksWhenDeadLetterPublishFails: the dead-letter publish
// fails every time; each delivery is nacked (never acknowledged), attempts
// follow Pub/Sub's delivery attempt, and after maxDeliveryAttempts
// Pub/Sub's own dead-letter policy (honoured by pstest) forwards the
// message: nothing is lost.
func TestConsumerNacksWhenDeadLetterPublishFails(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv)
	topic(t, c, "native-dlt", &pubsubpb.Subscription{Name: "native-dlt-sub"})
	src := topic(t, c, "jobs", &pubsubpb.Subscription{Name: "jobs-sub", AckDeadlineSeconds: 10})
	require.NoError(t, geopubsub.DeadLetterConfig{DeadLetterTopic: "native-dlt", MaxDeliveryAttempts: 5}.Apply(context.Background(), c, "jobs-sub"))
	pub := &failingPublisher{}
	var mu sync.Mutex
	var attempts []int
	var errs []error
	cons, err := geopubsub.NewConsumer(context.Background(), c, "jobs-sub", processor(t, pub, "unused"), &geopubsub.ConsumerOptions{
		ConsumerOptions: broker.ConsumerOptions{OnResult: func(_ *broker.Delivery, _ broker.Result, err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}}})
	require.NoError(t, err)
	id, err := c.Publisher(src).Publish(context.Background(), &pubsub.Message{Data: []byte(bowtie)}).Get(context.Background())
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- cons.Run(ctx, func(ctx context.Context, bm *broker.Message) error {
			mu.Lock()
			attempts = append(attempts, bm.DeliveryAttempt)
			mu.Unlock()
			return poison(ctx, bm)
		})
	}()
	dlq := newStore(t, c, geopubsub.Options{Subscription: func(string) string { return "native-dlt-sub" }})
	// Pub/Sub forwards to the dead-letter topic at least once, not exactly
	// once (and pstest, which acks the forwarded message by message id
	// rather than ack id, can forward it again on every delivery tick), so
	// the test waits for a first copy and checks every copy.
	var forwarded []*broker.Record
	require.Eventually(t, func() bool {
		forwarded = append(forwarded, drain(t, dlq, "native-dlt")...)
		return len(forwarded) >= 1
	}, 90*time.Second, 50*time.Millisecond, "Pub/Sub forwarded the message after 5 nacked deliveries")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, cons.Close())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2, 3, 4, 5}, attempts, "attempts follow the delivery attempt")
	require.Equal(t, int32(5), pub.calls.Load())
	for _, err := range errs {
		var dl *broker.DeadLetterError
		require.ErrorAs(t, err, &dl)
		require.ErrorIs(t, err, broker.ErrNotAcked)
	}
	require.Zero(t, srv.Message(id).Acks, "never acknowledged by the consumer")
	for _, rec := range forwarded {
		require.Equal(t, []byte(bowtie), rec.Message.Body, "every forwarded copy is the exact source message")
	}
}

// Attribute sets as Pub/Sub's dead-letter policy writes them (pstest
// writes none), with the provenance they map to.
func TestSourceOfRecordedAttributes(t *testing.T) {
	ts := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		v = v.UTC()
		return &v
	}
	def := &envelope.Source{System: "pubsub", Topic: "projects/p/topics/vector-dlq", MessageID: "m-9"}
	cases := []struct {
		name  string
		attrs map[string]string
		want  *envelope.Source
	}{
		{"pull subscription", map[string]string{
			"CloudPubSubDeadLetterSourceDeliveryCount":       "5",
			"CloudPubSubDeadLetterSourceSubscription":        "geo-vector-sub",
			"CloudPubSubDeadLetterSourceSubscriptionProject": "geo-prod",
			"CloudPubSubDeadLetterSourceTopicPublishTime":    "2022-08-12T15:56:29.732+00:00",
			"source_uri": "s3://my-bucket/test.geojson",
		}, &envelope.Source{System: "pubsub", Topic: "projects/geo-prod/subscriptions/geo-vector-sub", MessageID: "m-9", DeliveryCount: 5, Timestamp: ts("2022-08-12T15:56:29.732Z")}},
		{"push subscription with an error message", map[string]string{
			"CloudPubSubDeadLetterSourceDeliveryCount":        "12",
			"CloudPubSubDeadLetterSourceDeliveryErrorMessage": "Push endpoint returned HTTP 500",
			"CloudPubSubDeadLetterSourceSubscription":         "geo-push",
			"CloudPubSubDeadLetterSourceSubscriptionProject":  "geo-prod",
			"CloudPubSubDeadLetterSourceTopicPublishTime":     "2023-12-01T20:30:00.000+00:00",
		}, &envelope.Source{System: "pubsub", Topic: "projects/geo-prod/subscriptions/geo-push", MessageID: "m-9", DeliveryCount: 12, Timestamp: ts("2023-12-01T20:30:00Z")}},
		{"full subscription name, offset time", map[string]string{
			"CloudPubSubDeadLetterSourceDeliveryCount":    "7",
			"CloudPubSubDeadLetterSourceSubscription":     "projects/other/subscriptions/s",
			"CloudPubSubDeadLetterSourceTopicPublishTime": "2026-07-12T02:00:00+02:00",
		}, &envelope.Source{System: "pubsub", Topic: "projects/other/subscriptions/s", MessageID: "m-9", DeliveryCount: 7, Timestamp: ts("2026-07-12T00:00:00Z")}},
		{"unparseable values are ignored", map[string]string{
			"CloudPubSubDeadLetterSourceDeliveryCount":    "five",
			"CloudPubSubDeadLetterSourceSubscription":     "s",
			"CloudPubSubDeadLetterSourceTopicPublishTime": "yesterday",
		}, &envelope.Source{System: "pubsub", Topic: "s", MessageID: "m-9"}},
		{"not forwarded by Pub/Sub", map[string]string{"a": "b"}, def},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, geopubsub.SourceOf(tc.attrs, def))
		})
	}

	t.Run("through Fetch and the consumer", func(t *testing.T) {
		srv := newServer(t)
		c := newClient(t, srv)
		s := newStore(t, c, geopubsub.Options{CreateTopics: true})
		require.NoError(t, s.Publish(context.Background(), "vector-dlq", &broker.Message{Body: []byte(bowtie), Headers: cases[0].attrs}))
		recs := drain(t, s, "vector-dlq")
		require.Len(t, recs, 1)
		require.Equal(t, "projects/geo-prod/subscriptions/geo-vector-sub", recs[0].Message.Source.Topic)
		require.Equal(t, 5, recs[0].Message.Source.DeliveryCount)
		require.Equal(t, "s3://my-bucket/test.geojson", recs[0].Message.Header("source_uri"))
		m := geopubsub.MessageOf("projects/p/subscriptions/replay", &pubsub.Message{ID: "x", Data: []byte(bowtie), Attributes: cases[1].attrs})
		require.Equal(t, "projects/geo-prod/subscriptions/geo-push", m.Source.Topic)
		require.Equal(t, 12, m.Source.DeliveryCount)
	})
}

func TestDeadLetterPolicy(t *testing.T) {
	for _, tc := range []struct {
		n       int
		want    int32
		invalid bool
	}{{0, 5, false}, {3, 0, true}, {4, 0, true}, {5, 5, false}, {42, 42, false}, {100, 100, false}, {101, 0, true}, {-5, 0, true}} {
		t.Run(strconv.Itoa(tc.n), func(t *testing.T) {
			p, err := geopubsub.DeadLetterConfig{DeadLetterTopic: "vector-dlq", MaxDeliveryAttempts: tc.n}.Policy("geo")
			if tc.invalid {
				var mde *geopubsub.MaxDeliveryAttemptsError
				require.ErrorAs(t, err, &mde)
				require.ErrorIs(t, err, geopubsub.ErrInvalidDeadLetterPolicy)
				require.Equal(t, tc.n, mde.Value)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, p.MaxDeliveryAttempts)
			require.Equal(t, "projects/geo/topics/vector-dlq", p.DeadLetterTopic)
		})
	}
	_, err := geopubsub.DeadLetterConfig{}.Policy("geo")
	require.ErrorIs(t, err, geopubsub.ErrInvalidDeadLetterPolicy)

	t.Run("against pstest", func(t *testing.T) {
		srv := newServer(t)
		c := newClient(t, srv)
		topic(t, c, "unread-dlt")
		topic(t, c, "read-dlt", &pubsubpb.Subscription{Name: "read-dlt-sub"})
		topic(t, c, "jobs", &pubsubpb.Subscription{Name: "jobs-sub"})
		_, err := geopubsub.CheckDeadLetterPolicy(context.Background(), c, "jobs-sub")
		require.ErrorIs(t, err, geopubsub.ErrInvalidDeadLetterPolicy, "no policy yet")

		err = geopubsub.DeadLetterConfig{DeadLetterTopic: "unread-dlt"}.Apply(context.Background(), c, "jobs-sub")
		var nse *geopubsub.NoSubscriptionError
		require.ErrorAs(t, err, &nse, "a dead-letter topic nobody reads is refused")
		require.ErrorIs(t, err, geopubsub.ErrNoSubscription)
		require.Equal(t, "projects/"+project+"/topics/unread-dlt", nse.Topic)
		require.Error(t, geopubsub.DeadLetterConfig{DeadLetterTopic: "missing-dlt"}.Apply(context.Background(), c, "jobs-sub"))

		require.NoError(t, geopubsub.DeadLetterConfig{DeadLetterTopic: "read-dlt", MaxDeliveryAttempts: 7}.Apply(context.Background(), c, "jobs-sub"))
		p, err := geopubsub.CheckDeadLetterPolicy(context.Background(), c, "jobs-sub")
		require.NoError(t, err)
		require.Equal(t, int32(7), p.MaxDeliveryAttempts)

		// The dead-letter topic loses its only subscription: reported.
		require.NoError(t, c.SubscriptionAdminClient.DeleteSubscription(context.Background(), &pubsubpb.DeleteSubscriptionRequest{Subscription: "projects/" + project + "/subscriptions/read-dlt-sub"}))
		_, err = geopubsub.CheckDeadLetterPolicy(context.Background(), c, "jobs-sub")
		require.ErrorIs(t, err, geopubsub.ErrNoSubscription)

		// A policy set behind the helper's back with too few attempts.
		_, err = c.SubscriptionAdminClient.UpdateSubscription(context.Background(), &pubsubpb.UpdateSubscriptionRequest{
			Subscription: &pubsubpb.Subscription{Name: "projects/" + project + "/subscriptions/jobs-sub",
				DeadLetterPolicy: &pubsubpb.DeadLetterPolicy{DeadLetterTopic: "projects/" + project + "/topics/read-dlt", MaxDeliveryAttempts: 3}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"dead_letter_policy"}}})
		require.NoError(t, err)
		_, err = geopubsub.CheckDeadLetterPolicy(context.Background(), c, "jobs-sub")
		var mde *geopubsub.MaxDeliveryAttemptsError
		require.ErrorAs(t, err, &mde)
		cmd, err := geopubsub.DeadLetterConfig{DeadLetterTopic: "vector-dlq"}.Gcloud("geo", "geo-vector-sub")
		require.NoError(t, err)
		require.Contains(t, cmd, "--max-delivery-attempts=5")
	})
}

func TestStoreRefusesTopicWithoutSubscription(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv)
	topic(t, c, "orphan-dlt")
	s := newStore(t, c, geopubsub.Options{})
	err := s.Publish(context.Background(), "orphan-dlt", &broker.Message{Body: []byte(bowtie)})
	require.ErrorIs(t, err, geopubsub.ErrNoSubscription)
	require.Empty(t, srv.Messages(), "nothing was published into the void")
	require.Error(t, s.Publish(context.Background(), "no-such-topic", &broker.Message{Body: []byte(bowtie)}))
}

func TestAttributes(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv)
	s := newStore(t, c, geopubsub.Options{CreateTopics: true})
	many := map[string]string{}
	for i := range 120 {
		many["h"+strconv.Itoa(i)] = "v"
	}
	for _, tc := range []struct {
		name string
		m    *broker.Message
		ok   bool
	}{
		{"headers and binary key", &broker.Message{Key: []byte{0, 0xff}, Body: []byte("not json \x00"), Headers: map[string]string{"dlq-class": "transient"}}, true},
		{"more than 100 headers are packed", &broker.Message{Body: []byte("x"), Headers: many}, false},
		{"goog-prefixed key is packed", &broker.Message{Body: []byte("x"), Headers: map[string]string{"googclient_x": "y"}}, true},
		{"long value is packed when it fits", &broker.Message{Body: []byte("x"), Headers: map[string]string{"k": strings.Repeat("v", 1000)}}, true},
		{"headers too big for Pub/Sub are refused", &broker.Message{Body: []byte("x"), Headers: map[string]string{"k": strings.Repeat("v", 1100)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := "attrs-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			err := s.Publish(context.Background(), dest, tc.m)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			recs := drain(t, s, dest)
			require.Len(t, recs, 1)
			require.Equal(t, tc.m.Body, recs[0].Message.Body)
			require.Equal(t, tc.m.Key, recs[0].Message.Key)
			require.Equal(t, tc.m.Headers, recs[0].Message.Headers)
			require.NoError(t, s.Ack(context.Background(), recs[0]))
		})
	}
}

// TestLargeMultiPolygon: the 40 MB multipolygon through the Processor, the
// envelope builder and an offloader fits Pub/Sub's 10 MB.
func TestLargeMultiPolygon(t *testing.T) {
	srv := newServer(t)
	c := newClient(t, srv)
	s := newStore(t, c, geopubsub.Options{CreateTopics: true, StoreOptions: broker.StoreOptions{LeaseTTL: time.Minute}})
	off, err := offload.New(offload.NewMemStore(), nil)
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: s, Builder: b,
		Destination: func(*broker.Message, classify.Route) string { return "large-dlq" }})
	require.NoError(t, err)
	payload := corpus.LargeEvent(40 << 20)
	out, err := p.Process(context.Background(), &broker.Message{Body: payload}, func(context.Context, *broker.Message) error {
		return &classify.Error{Class: classify.ClassResourceExhausted, Stage: classify.StageParse, Err: errors.New("too many vertices")}
	})
	require.NoError(t, err)
	require.True(t, out.DeadLettered)
	recs := drain(t, s, "large-dlq")
	require.Len(t, recs, 1)
	require.LessOrEqual(t, len(recs[0].Message.Body), s.MaxMessageBytes("large-dlq"))
	require.NotEmpty(t, recs[0].Envelope.Geometry.OffloadURI)
	restored, err := recs[0].Envelope.Restore(context.Background(), off)
	require.NoError(t, err)
	require.Equal(t, sha256.Sum256(payload), sha256.Sum256(restored))

	big := &broker.Message{Body: make([]byte, s.MaxMessageBytes("x")+1)}
	require.ErrorIs(t, s.Publish(context.Background(), "large-dlq", big), classify.ErrTooLarge)
}
