package kafka_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/kafka"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

var errSelfIntersection = errors.New("Self-intersection[0.5 0.5]")

const bowtie = `{"event_id":"evt-bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`

func TestNewChecksTheClient(t *testing.T) {
	c := newCluster(t)
	tests := []struct {
		name    string
		client  []kgo.Opt
		opts    *kafka.Options
		wantErr string
		limit   int
	}{
		{name: "kgo defaults", limit: 990_796}, // kgo's 1,000,012-byte batches - 8 KiB headers - 1 KiB framing
		{name: "ProducerOpts", client: kafka.ProducerOpts(nil), limit: 1_039_372},
		{name: "ProducerOpts sized for a limit", client: kafka.ProducerOpts(limitOpts(4 << 20)), opts: limitOpts(4 << 20), limit: 4 << 20},
		{name: "explicit limit", opts: limitOpts(100 << 10), limit: 100 << 10},
		{name: "header budget counts", opts: &kafka.Options{HeaderBudget: 64 << 10}, client: kafka.ProducerOpts(nil), limit: 1048588 - 64<<10 - 1024},
		{name: "limit over the batch size", opts: limitOpts(1 << 20), wantErr: "exceed the client's ProducerBatchMaxBytes"},
		{name: "leader acks", client: []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}, wantErr: "acks=all"},
		{name: "no idempotence", client: []kgo.Opt{kgo.DisableIdempotentWrite()}, wantErr: "idempotent"},
		{name: "transactional", client: []kgo.Opt{kgo.TransactionalID("tx")}, wantErr: "transactional"},
		{name: "tiny header budget", opts: &kafka.Options{HeaderBudget: 100}, wantErr: "HeaderBudget"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := kafka.New(c.client(tc.client...), tc.opts)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.limit, s.MaxMessageBytes("any.topic"), "the Limiter reports the configured (or derived) limit")
		})
	}
	_, err := kafka.New(nil, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
}

func limitOpts(n int) *kafka.Options {
	return &kafka.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: n}}
}

func TestDestination(t *testing.T) {
	from := func(topic string) *broker.Message {
		return &broker.Message{Source: &envelope.Source{System: "kafka", Topic: topic}}
	}
	long := strings.Repeat("t", 245)
	tests := []struct {
		name string
		m    *broker.Message
		r    classify.Route
		want string
	}{
		{"poison", from("spatial.events"), classify.RoutePoison, "spatial.events.poison.dlt"},
		{"retry", from("spatial.events"), classify.RouteRetry, "spatial.events.retry.dlt"},
		{"no source", &broker.Message{}, classify.RouteRetry, "geodlq.retry.dlt"},
		{"nil message", nil, classify.RoutePoison, "geodlq.poison.dlt"},
		{"NATS subject", from("geo.events.>"), classify.RoutePoison, "geo.events._-"},
		{"queue URL", from("https://sqs.eu-west-1.amazonaws.com/1/parcels"), classify.RouteRetry, "https___sqs.eu-west-1.amazonaws.com_1_parcels-"},
		{"too long", from(long), classify.RoutePoison, strings.Repeat("t", 249-len("-01234567.poison.dlt")) + "-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := kafka.Destination(tc.m, tc.r)
			require.True(t, strings.HasPrefix(got, tc.want), "%q does not start with %q", got, tc.want)
			require.LessOrEqual(t, len(got), 249, "a Kafka topic name is at most 249 bytes")
			require.Regexp(t, `^[a-zA-Z0-9._-]+$`, got)
			require.True(t, strings.HasSuffix(got, "."+tc.r.String()+".dlt"), "%q keeps the route suffix", got)
		})
	}
	// Made-valid names keep distinct sources apart.
	require.NotEqual(t, kafka.Destination(from("a/b"), classify.RoutePoison), kafka.Destination(from("a_b"), classify.RoutePoison))
	require.NotEqual(t, kafka.Destination(from("a/b"), classify.RoutePoison), kafka.Destination(from("a:b"), classify.RoutePoison))
	require.Equal(t, broker.DefaultDestination(from("spatial.events"), classify.RouteRetry), kafka.Destination(from("spatial.events"), classify.RouteRetry),
		"valid names are the Processor's default names")

	// As the Processor's Destination, on a Kafka store.
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(&kafka.Options{Topics: &kafka.TopicOptions{Partitions: 2}})
	src := unique("parcels")
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{
		Publisher: s, Destination: kafka.Destination, Policy: classify.Policy{MaxAttempts: 1},
	})
	require.NoError(t, err)
	for _, tc := range []struct {
		err  error
		dest string
	}{
		{poison, src + ".poison.dlt"},
		{classify.Transient(errors.New("503")), src + ".retry.dlt"},
	} {
		out, err := proc.Process(ctx, &broker.Message{Body: []byte(bowtie), Source: &envelope.Source{System: "kafka", Topic: src}},
			func(context.Context, *broker.Message) error { return tc.err })
		require.NoError(t, err)
		require.Equal(t, tc.dest, out.Destination)
		recs := c.consumeAll(tc.dest, 1)
		require.Len(t, recs, 1)
		require.Equal(t, tc.dest, recs[0].Topic, "the envelope is in the topic Destination chose")
	}
}

// Topic names Kafka refuses are refused before anything is sent, and a
// topic that does not exist is "no store here" for a store that does not
// create topics.
func TestTopics(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s, err := kafka.New(c.client(), nil) // creates nothing
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	m := &broker.Message{Body: []byte(bowtie)}
	for _, bad := range []string{"a/b", "..", strings.Repeat("x", 250), "geo.events.>"} {
		require.ErrorIs(t, s.Publish(ctx, bad, m), broker.ErrInvalidArgument, "%q", bad)
		_, err := s.Fetch(ctx, bad, broker.Filter{}, 1)
		require.ErrorIs(t, err, broker.ErrInvalidArgument, "%q", bad)
	}
	missing := unique("missing")
	start := time.Now()
	require.ErrorIs(t, s.Publish(ctx, missing, m), broker.ErrNoStore)
	require.Less(t, time.Since(start), 5*time.Second, "refused at once, not after the producer's retries")
	_, err = s.Fetch(ctx, missing, broker.Filter{}, 1)
	require.ErrorIs(t, err, broker.ErrNoStore)
	_, err = s.List(ctx, broker.ListOptions{Destination: missing})
	require.ErrorIs(t, err, broker.ErrNoStore)
	ok, err := topicExists(c, missing)
	require.NoError(t, err)
	require.False(t, ok, "nothing created")

	existing := unique("existing")
	c.createTopic(existing, 1)
	require.NoError(t, s.Publish(ctx, existing, m))
	require.Len(t, drain(t, s, existing), 1)

	var kc *kgo.Client
	require.True(t, s.As(&kc))
	require.NotNil(t, kc)
	var adm *kadm.Client
	require.True(t, s.As(&adm))
	require.NotNil(t, adm)
	var other *int
	require.False(t, s.As(&other))
}

// A record dead-lettered from a Kafka source carries the source key and
// the original topic, partition, offset and timestamp.
func TestDeadLetterRecord(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(nil)
	src := unique("spatial.events")
	ts := time.Date(2026, 3, 4, 5, 6, 7, 891_000_000, time.UTC)
	in := &kgo.Record{Topic: src, Partition: 2, Offset: 4711, Key: []byte("parcel-7"), Value: []byte(bowtie), Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: broker.HeaderIdempotencyKey, Value: []byte("idem:v1:abc")}, {Key: "traceparent", Value: []byte("00-abc-01")}}}
	msg := kafka.MessageOf(in)
	require.Zero(t, msg.DeliveryAttempt, "Kafka keeps no delivery count")
	require.Equal(t, "kafka", msg.Source.System)
	require.Equal(t, int64(4711), *msg.Source.Offset)

	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: s, Destination: kafka.Destination})
	require.NoError(t, err)
	out, err := proc.Process(ctx, msg, func(context.Context, *broker.Message) error { return poison })
	require.NoError(t, err)
	require.True(t, out.DeadLettered)
	require.Equal(t, 1, out.Attempts)

	recs := c.consumeAll(src+".poison.dlt", 1)
	r := recs[0]
	require.Equal(t, []byte("parcel-7"), r.Key, "record key = source key")
	env, err := envelope.Decode(r.Value)
	require.NoError(t, err, "record value = the envelope")
	require.Equal(t, "idem:v1:abc", env.IdempotencyKey)
	h := headers(t, r.Headers)
	for k, v := range broker.Headers(env) {
		require.Equal(t, v, h[k], "envelope header %q", k)
	}
	require.Equal(t, src, h[kafka.HeaderOriginalTopic])
	require.Equal(t, "2", h[kafka.HeaderOriginalPartition])
	require.Equal(t, "4711", h[kafka.HeaderOriginalOffset])
	require.Equal(t, strconv.FormatInt(ts.UnixMilli(), 10), h[kafka.HeaderOriginalTimestamp])
	pub, err := time.Parse(time.RFC3339Nano, h[kafka.HeaderPublishedAt])
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), pub, time.Minute)
	require.Len(t, h[kafka.HeaderPublishedAt], len("2006-01-02T15:04:05.000000000Z"), "fixed width")
	require.NotContains(t, h, kafka.HeaderHeadersDropped)
	require.LessOrEqual(t, headerBytes(r.Headers), 8<<10, "the default header budget")
}

// Headers stay within the budget, the envelope's and provenance headers
// first; and re-dead-lettering a record (say, from the retry topic to the
// poison topic) replaces its dlq-* headers instead of appending to them, so
// its headers never grow.
func TestHeaderBudget(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	const budget = 1024
	o := kafka.Options{Topics: &kafka.TopicOptions{Partitions: 1}, HeaderBudget: budget, StoreOptions: broker.StoreOptions{LeaseTTL: 3 * time.Second}}
	s := c.store(&o)

	m := brokertest.Message(t, brokertest.SampleInputs()[0]) // Kafka provenance: spatial.events/3/42
	m.Headers["x-small"] = "kept"
	for i := range 10 {
		m.Headers["x-big-"+strconv.Itoa(i)] = strings.Repeat("v", 200)
	}
	// Stale provenance and a forged counter from an earlier hop are replaced.
	m.Headers[kafka.HeaderOriginalTopic] = "somewhere.else"
	m.Headers[kafka.HeaderHeadersDropped] = "99"

	retry, poisonT := unique("budget")+".retry.dlt", unique("budget")+".poison.dlt"
	require.NoError(t, s.Publish(ctx, retry, m))
	first := c.consumeAll(retry, 1)[0]
	h := headers(t, first.Headers)
	require.LessOrEqual(t, headerBytes(first.Headers), budget)
	for k, v := range m.Headers {
		if strings.HasPrefix(k, "dlq-") || k == broker.HeaderIdempotencyKey {
			if k == kafka.HeaderOriginalTopic || k == kafka.HeaderHeadersDropped {
				continue
			}
			require.Equal(t, v, h[k], "core header %q kept", k)
		}
	}
	require.Equal(t, "spatial.events", h[kafka.HeaderOriginalTopic], "provenance comes from the envelope")
	require.Equal(t, "3", h[kafka.HeaderOriginalPartition])
	require.Equal(t, "42", h[kafka.HeaderOriginalOffset])
	require.Equal(t, "kept", h["x-small"])
	dropped, err := strconv.Atoi(h[kafka.HeaderHeadersDropped])
	require.NoError(t, err)
	require.Positive(t, dropped)
	require.Less(t, dropped, 10)

	// Re-dead-letter what the reader returns, several hops.
	size := headerBytes(first.Headers)
	from := retry
	for hop := range 4 {
		recs := drain(t, s, from)
		require.Len(t, recs, 1)
		to := poisonT + "." + strconv.Itoa(hop)
		require.NoError(t, s.Publish(ctx, to, recs[0].Message))
		next := c.consumeAll(to, 1)[0]
		nh := headers(t, next.Headers)
		require.LessOrEqual(t, headerBytes(next.Headers), size, "hop %d: headers never grow", hop)
		require.Equal(t, "spatial.events", nh[kafka.HeaderOriginalTopic], "hop %d: the original stays the original", hop)
		require.Equal(t, "42", nh[kafka.HeaderOriginalOffset])
		require.Equal(t, h[broker.HeaderIdempotencyKey], nh[broker.HeaderIdempotencyKey])
		require.Equal(t, first.Value, next.Value)
		size = headerBytes(next.Headers)
		from = to
	}
}

func TestTooLarge(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(&kafka.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: 32 << 10}, Topics: &kafka.TopicOptions{Partitions: 1}})
	topic := unique("toolarge")

	// Over the Store's limit: refused before producing.
	err := s.Publish(ctx, topic, &broker.Message{Body: make([]byte, 32<<10+1)})
	var tl *classify.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, 32<<10+1, tl.Size)
	require.Equal(t, 32<<10, tl.Limit)
	ok, err := topicExists(c, topic)
	require.NoError(t, err)
	require.False(t, ok, "nothing was produced, not even the topic")

	// Under the Store's limit but over the topic's: the broker refuses, and
	// the error is typed the same way.
	small := unique("smalltopic")
	v := "2048"
	resp, err := c.admin().CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &v}, small)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	body := make([]byte, 8<<10)
	_, _ = rand.Read(body) // incompressible: the broker checks the compressed batch
	err = s.Publish(ctx, small, &broker.Message{Body: body})
	require.ErrorIs(t, err, classify.ErrTooLarge)
	require.ErrorAs(t, err, &tl)
	require.Empty(t, drain(t, s, small))
}

func topicExists(c *cluster, topic string) (bool, error) {
	td, err := c.admin().ListTopics(context.Background(), topic)
	if err != nil {
		return false, err
	}
	d, ok := td[topic]
	return ok && d.Err == nil, nil
}

// Records of one key come back from the dead-letter topic in the order
// they were dead-lettered, and share a partition.
func TestKeyOrderAcrossPartitions(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(&kafka.Options{Topics: &kafka.TopicOptions{Partitions: 5}, JoinWait: 2 * time.Second})
	d := unique("order") + ".poison.dlt"
	for i := range 60 {
		in := brokertest.SampleInputs()[0]
		in.IdempotencyKey = "idem:order:" + strconv.Itoa(i)
		in.Key = []byte("entity-" + strconv.Itoa(i%7))
		require.NoError(t, s.Publish(ctx, d, brokertest.Message(t, in)))
	}
	got := drain(t, s, d)
	require.Len(t, got, 60)
	seq := map[string][]int{}
	part := map[string]string{}
	for i, r := range got {
		env, err := envelope.Decode(r.Message.Body)
		require.NoError(t, err)
		n, _ := strconv.Atoi(strings.TrimPrefix(env.IdempotencyKey, "idem:order:"))
		require.Equal(t, i, n, "across partitions, oldest first by publish time")
		k := string(r.Message.Key)
		seq[k] = append(seq[k], n)
		p, _, _ := strings.Cut(r.ID, "/")
		if part[k] == "" {
			part[k] = p
		}
		require.Equal(t, part[k], p, "key %s stays in one partition", k)
	}
	require.Len(t, seq, 7)
}
