package sqs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/offload"
)

// queueName returns a queue name unique to the test (SQS: at most 80
// characters of letters, digits, '-' and '_', plus ".fifo").
func queueName(t *testing.T, suffix string) string {
	t.Helper()
	base := geosqs.QueueName(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	return strings.Trim(base, "-") + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + suffix
}

func newStore(t *testing.T, opts *geosqs.Options) *broker.Store {
	t.Helper()
	o := geosqs.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 2 * time.Second}, CreateQueues: true}
	if opts != nil {
		o = *opts
	}
	s, err := geosqs.New(context.Background(), newClient(t), &o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func drainAll(t *testing.T, s *broker.Store, dest string, f broker.Filter) []*broker.Record {
	t.Helper()
	var all []*broker.Record
	for {
		recs, err := s.Fetch(context.Background(), dest, f, 100)
		require.NoError(t, err)
		if len(recs) == 0 {
			return all
		}
		all = append(all, recs...)
	}
}

func TestMessageMapping(t *testing.T) {
	many := map[string]string{}
	for i := range 14 {
		many["h-"+strconv.Itoa(i)] = "v" + strconv.Itoa(i)
	}
	cases := []struct {
		name     string
		msg      *broker.Message
		wantAttr []string // attribute names SQS must carry
	}{
		{"plain headers as attributes", &broker.Message{Body: []byte(`{"a":1}`), Headers: map[string]string{"dlq-class": "transient", "idempotency-key": "k"}},
			[]string{"dlq-class", "idempotency-key"}},
		{"binary key", &broker.Message{Key: []byte{0, 1, 2, 0xff}, Body: []byte("x")}, []string{geosqs.HeaderKey}},
		{"more than ten headers are packed", &broker.Message{Body: []byte("x"), Headers: many}, []string{geosqs.AttrHeaders}},
		{"header name SQS refuses is packed", &broker.Message{Body: []byte("x"), Headers: map[string]string{"AWS.trace": "t", "a": "b"}}, []string{geosqs.AttrHeaders}},
		{"empty header value is packed", &broker.Message{Body: []byte("x"), Headers: map[string]string{"e": ""}}, []string{geosqs.AttrHeaders}},
		{"invalid UTF-8 body travels base64", &broker.Message{Body: []byte("caf\xe9 \x00"), Headers: map[string]string{"a": "b"}}, []string{geosqs.AttrBodyEncoding, "a"}},
		{"U+FFFF in body travels base64", &broker.Message{Body: []byte("\uffff")}, []string{geosqs.AttrBodyEncoding}},
	}
	s := newStore(t, nil)
	client := newClient(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dest := queueName(t, "")
			require.NoError(t, s.Publish(context.Background(), dest, tc.msg))
			qurl, err := geosqs.QueueURL(context.Background(), s, dest)
			require.NoError(t, err)
			raw, err := client.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: &qurl, MessageAttributeNames: []string{"All"}})
			require.NoError(t, err)
			require.Len(t, raw.Messages, 1)
			_, err = client.ChangeMessageVisibility(context.Background(), &awssqs.ChangeMessageVisibilityInput{QueueUrl: &qurl, ReceiptHandle: raw.Messages[0].ReceiptHandle})
			require.NoError(t, err)
			require.LessOrEqual(t, len(raw.Messages[0].MessageAttributes), geosqs.MaxMessageAttributes)
			for _, a := range tc.wantAttr {
				require.Contains(t, raw.Messages[0].MessageAttributes, a)
			}
			// Made visible again just now: a receive in the same
			// millisecond may not see it yet, so poll for it.
			var recs []*broker.Record
			require.Eventually(t, func() bool {
				recs = append(recs, drainAll(t, s, dest, broker.Filter{})...)
				return len(recs) > 0
			}, 10*time.Second, 50*time.Millisecond)
			require.Len(t, recs, 1)
			got := recs[0].Message
			require.Equal(t, tc.msg.Body, got.Body, "body restored byte for byte")
			require.Equal(t, tc.msg.Key, got.Key)
			for k, v := range tc.msg.Headers {
				require.Equal(t, v, got.Headers[k], "header %q", k)
			}
			require.Equal(t, "sqs", got.Source.System)
			require.NoError(t, s.Ack(context.Background(), recs[0]))
		})
	}
}

func TestSizeLimits(t *testing.T) {
	bigHeaders := map[string]string{"h": strings.Repeat("v", 5000)}
	cases := []struct {
		name    string
		opts    geosqs.Options
		body    int
		headers map[string]string
		// wantLimit is the limit a refusal reports; 0 means accepted.
		wantSize, wantLimit int
	}{
		{"default body budget accepted", geosqs.Options{}, 256<<10 - 4<<10, nil, 0, 0},
		{"one byte over the body budget", geosqs.Options{}, 256<<10 - 4<<10 + 1, nil, 256<<10 - 4<<10 + 1, 256<<10 - 4<<10},
		{"attributes count against the message limit", geosqs.Options{}, 256<<10 - 4<<10, bigHeaders, 256<<10 - 4<<10 + 1 + 6 + 5000, 256 << 10},
		{"1 MiB queues", geosqs.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: 1 << 20}}, 1<<20 - 4<<10, nil, 0, 0},
		{"1 MiB queues refuse more", geosqs.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: 1 << 20}}, 1<<20 - 4<<10 + 1, nil, 1<<20 - 4<<10 + 1, 1<<20 - 4<<10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.LeaseTTL, o.CreateQueues = 2*time.Second, true
			s := newStore(t, &o)
			dest := queueName(t, "")
			m := &broker.Message{Body: bytes.Repeat([]byte("x"), tc.body), Headers: tc.headers}
			err := s.Publish(context.Background(), dest, m)
			if tc.wantLimit == 0 {
				require.NoError(t, err, "SQS accepts what the store accepts")
				recs := drainAll(t, s, dest, broker.Filter{})
				require.Len(t, recs, 1)
				require.Equal(t, sha256.Sum256(m.Body), sha256.Sum256(recs[0].Message.Body))
				require.NoError(t, s.Ack(context.Background(), recs[0]))
				return
			}
			var tl *classify.TooLargeError
			require.ErrorAs(t, err, &tl)
			require.ErrorIs(t, err, classify.ErrTooLarge)
			require.Equal(t, tc.wantLimit, tl.Limit)
			require.Equal(t, tc.wantSize, tl.Size)
			require.Empty(t, drainAll(t, s, dest, broker.Filter{}), "nothing was sent")
		})
	}
	t.Run("options are checked", func(t *testing.T) {
		for _, o := range []geosqs.Options{{StoreOptions: broker.StoreOptions{MaxMessageBytes: 1<<20 + 1}}, {StoreOptions: broker.StoreOptions{MaxMessageBytes: 100}},
			{StoreOptions: broker.StoreOptions{LeaseTTL: 1500 * time.Millisecond}}, {StoreOptions: broker.StoreOptions{LeaseTTL: 13 * time.Hour}}, {WaitTime: 21 * time.Second}, {HeaderBudget: 1 << 20}} {
			_, err := geosqs.New(context.Background(), newClient(t), &o)
			require.ErrorIs(t, err, broker.ErrInvalidArgument, "%+v", o)
		}
	})
}

// TestLargeMultiPolygon sends the 40 MB multipolygon through the Processor,
// the envelope builder and an offloader: the dead-letter message fits
// SQS's 256 KiB, and the payload restores byte for byte.
func TestLargeMultiPolygon(t *testing.T) {
	s := newStore(t, &geosqs.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Minute}, CreateQueues: true})
	payload := corpus.LargeEvent(40 << 20)
	blobs := offload.NewMemStore()
	off, err := offload.New(blobs, nil)
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	dest := queueName(t, "")
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: s, Builder: b,
		Destination: func(*broker.Message, classify.Route) string { return dest }})
	require.NoError(t, err)
	out, err := proc.Process(context.Background(), &broker.Message{Body: payload, Source: &envelope.Source{System: "sqs", Topic: "vector-jobs"}},
		func(context.Context, *broker.Message) error {
			return &classify.Error{Class: classify.ClassResourceExhausted, Stage: classify.StageParse, Err: errors.New("too many vertices")}
		})
	require.NoError(t, err)
	require.True(t, out.DeadLettered)
	recs := drainAll(t, s, dest, broker.Filter{})
	require.Len(t, recs, 1)
	require.LessOrEqual(t, len(recs[0].Message.Body), s.MaxMessageBytes(dest))
	require.LessOrEqual(t, len(recs[0].Message.Body), 256<<10, "the dead-letter message fits SQS's default limit")
	require.NotNil(t, recs[0].Envelope)
	require.NotEmpty(t, recs[0].Envelope.Geometry.OffloadURI, "the geometry was offloaded")
	restored, err := recs[0].Envelope.Restore(context.Background(), off)
	require.NoError(t, err)
	require.Equal(t, sha256.Sum256(payload), sha256.Sum256(restored), "40 MB payload restored byte for byte")
	require.NoError(t, s.Ack(context.Background(), recs[0]))
}

func fifoEnvelope(t *testing.T, src *envelope.Source, key string) *broker.Message {
	t.Helper()
	return brokertest.Message(t, brokertest.Input{
		Payload:        []byte(`{"event_id":"evt-fifo","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`),
		IdempotencyKey: key, Source: src,
		Err: classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")),
	})
}

func TestFIFODeadLetterQueuePreservesGroupAndDedup(t *testing.T) {
	s := newStore(t, nil)
	client := newClient(t)
	dest := queueName(t, ".fifo")
	src := &envelope.Source{System: "sqs", Topic: "vector-jobs.fifo", MessageID: "m-1", GroupID: "parcel-42", DedupID: "upload-7781", DeliveryCount: 4}
	m := fifoEnvelope(t, src, "idem:v1:fifo")
	require.NoError(t, s.Publish(context.Background(), dest, m))
	// The consumer crashed after the dead-letter write and dead-letters the
	// redelivered message again: same source dedup id, one record.
	again := fifoEnvelope(t, &envelope.Source{System: "sqs", Topic: "vector-jobs.fifo", MessageID: "m-1", GroupID: "parcel-42", DedupID: "upload-7781", DeliveryCount: 5}, "idem:v1:fifo")
	require.NotEqual(t, m.Body, again.Body)
	require.NoError(t, s.Publish(context.Background(), dest, again))

	qurl, err := geosqs.QueueURL(context.Background(), s, dest)
	require.NoError(t, err)
	raw, err := client.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: &qurl, MaxNumberOfMessages: 10,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}, VisibilityTimeout: 1})
	require.NoError(t, err)
	require.Len(t, raw.Messages, 1, "the duplicate dead-letter write was deduplicated")
	attrs := raw.Messages[0].Attributes
	require.Equal(t, "parcel-42", attrs["MessageGroupId"], "MessageGroupId preserved")
	require.Equal(t, "upload-7781", attrs["MessageDeduplicationId"], "MessageDeduplicationId preserved")
	require.Equal(t, m.Body, []byte(aws.ToString(raw.Messages[0].Body)))

	t.Run("ids SQS would refuse are hashed, keys become groups", func(t *testing.T) {
		m := &broker.Message{Key: []byte("entity-9"), Body: []byte("replayed"), Headers: map[string]string{broker.HeaderReplayOf: "dlq/" + strings.Repeat("r", 200)}}
		require.Equal(t, "entity-9", geosqs.GroupID(m, nil))
		require.Len(t, geosqs.DeduplicationID(m, nil), 64)
		require.Equal(t, geosqs.DeduplicationID(m, nil), geosqs.DeduplicationID(m.Clone(), nil), "a second replay of the same record has the same id")
		require.Equal(t, "geodlq", geosqs.GroupID(&broker.Message{}, nil))
		require.Len(t, geosqs.GroupID(&broker.Message{Key: []byte{0, 1}}, nil), 64)
		env, err := envelope.Decode(fifoEnvelope(t, &envelope.Source{System: "kafka", Topic: "t", Partition: new(int32), Offset: new(int64)}, "k").Body)
		require.NoError(t, err)
		require.Len(t, geosqs.DeduplicationID(&broker.Message{}, env), 64, "a source without a dedup id is identified by its position")
	})
}

func TestFIFOSourceNeedsFIFODeadLetterQueue(t *testing.T) {
	s := newStore(t, nil)
	dest := queueName(t, "")
	m := fifoEnvelope(t, &envelope.Source{System: "sqs", Topic: "vector-jobs.fifo", GroupID: "g", DedupID: "d"}, "idem:v1:mismatch")
	err := s.Publish(context.Background(), dest, m)
	var mm *geosqs.FIFOMismatchError
	require.ErrorAs(t, err, &mm)
	require.ErrorIs(t, err, geosqs.ErrFIFOMismatch)
	require.True(t, mm.SourceFIFO)
	require.Contains(t, err.Error(), "needs a FIFO dead-letter queue")
	require.Empty(t, drainAll(t, s, dest, broker.Filter{}), "nothing was written")

	// The same envelope into a FIFO queue is fine, and so is a standard
	// source into a standard queue.
	require.NoError(t, s.Publish(context.Background(), queueName(t, ".fifo"), m))
	require.NoError(t, s.Publish(context.Background(), dest, fifoEnvelope(t, &envelope.Source{System: "sqs", Topic: "vector-jobs"}, "idem:v1:std")))
}

// TestFilteredFetchReachesMatchesBehindOthers puts 35 records that do not
// match in front of 3 that do: a filtered Fetch finds the 3, and the 35 are
// visible again at once — held during the scan, never deleted.
func TestFilteredFetchReachesMatchesBehindOthers(t *testing.T) {
	s := newStore(t, nil)
	dest := queueName(t, "")
	in := brokertest.FilterInputs()
	for i := range 35 {
		x := in[5] // transient
		x.IdempotencyKey = "idem:test:other:" + strconv.Itoa(i)
		require.NoError(t, s.Publish(context.Background(), dest, brokertest.Message(t, x)))
	}
	for _, i := range []int{0, 1, 8} { // invalid_geometry
		require.NoError(t, s.Publish(context.Background(), dest, brokertest.Message(t, in[i])))
	}
	f := broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}
	got, err := s.Fetch(context.Background(), dest, f, 10)
	require.NoError(t, err)
	require.Len(t, got, 3, "matches behind 35 others are found in one Fetch")
	for _, r := range got {
		require.Equal(t, classify.ClassInvalidGeometry, r.Envelope.FailureClass)
	}
	rest := drainAll(t, s, dest, broker.Filter{})
	require.Len(t, rest, 35, "the records that did not match were released at once, none lost")
	for _, r := range append(got, rest...) {
		require.NoError(t, s.Ack(context.Background(), r))
	}

	t.Run("the scan limit bounds one Fetch", func(t *testing.T) {
		o := geosqs.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 2 * time.Second}, CreateQueues: true, FilterScanLimit: 10}
		s := newStore(t, &o)
		dest := queueName(t, "")
		for i := range 20 {
			x := in[5]
			x.IdempotencyKey = "idem:test:limit:" + strconv.Itoa(i)
			require.NoError(t, s.Publish(context.Background(), dest, brokertest.Message(t, x)))
		}
		require.NoError(t, s.Publish(context.Background(), dest, brokertest.Message(t, in[0])))
		got, err := s.Fetch(context.Background(), dest, f, 10)
		require.NoError(t, err)
		require.Empty(t, got, "the match lies beyond the 10 messages scanned")
		require.Len(t, drainAll(t, s, dest, broker.Filter{}), 21, "nothing lost")
	})
}

// TestLeaseLostReportedBySQS: on a FIFO queue SQS rejects a superseded
// receipt handle, and the store reports broker.ErrLeaseLost even while
// its own clock says the lease lives.
func TestLeaseLostReportedBySQS(t *testing.T) {
	o := geosqs.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 30 * time.Second}, CreateQueues: true}
	a, b := newStore(t, &o), newStore(t, &o)
	dest := queueName(t, ".fifo")
	require.NoError(t, a.Publish(context.Background(), dest, fifoEnvelope(t, &envelope.Source{System: "sqs", Topic: "jobs.fifo", GroupID: "g", DedupID: "d1"}, "k1")))
	first, err := a.Fetch(context.Background(), dest, broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, first, 1)
	// Someone makes the message visible again and b receives it: a's
	// receipt handle is superseded.
	qurl, err := geosqs.QueueURL(context.Background(), a, dest)
	require.NoError(t, err)
	_, handle, _ := strings.Cut(first[0].Lease, ":")
	_, err = newClient(t).ChangeMessageVisibility(context.Background(), &awssqs.ChangeMessageVisibilityInput{QueueUrl: &qurl, ReceiptHandle: &handle, VisibilityTimeout: 0})
	require.NoError(t, err)
	var second []*broker.Record
	require.Eventually(t, func() bool {
		second, err = b.Fetch(context.Background(), dest, broker.Filter{}, 1)
		return err == nil && len(second) == 1
	}, 60*time.Second, 20*time.Millisecond)
	require.Equal(t, first[0].ID, second[0].ID)
	require.ErrorIs(t, a.Ack(context.Background(), first[0]), broker.ErrLeaseLost)
	require.NoError(t, b.Ack(context.Background(), second[0]))
}

func TestLeaseGuard(t *testing.T) {
	o := geosqs.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Second}, CreateQueues: true}
	s := newStore(t, &o)
	dest := queueName(t, "")
	require.NoError(t, s.Publish(context.Background(), dest, &broker.Message{Body: []byte("x")}))
	recs, err := s.Fetch(context.Background(), dest, broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	time.Sleep(time.Second)
	require.ErrorIs(t, s.Release(context.Background(), recs[0]), broker.ErrLeaseLost, "a lapsed lease is not used")
	require.ErrorIs(t, s.Ack(context.Background(), recs[0]), broker.ErrLeaseLost)
	bad := *recs[0]
	bad.Lease = "garbage"
	require.Error(t, s.Ack(context.Background(), &bad))
	again := drainAll(t, s, dest, broker.Filter{})
	require.Len(t, again, 1, "the record was not deleted")
	require.Equal(t, 2, again[0].Deliveries)
	require.NoError(t, s.Ack(context.Background(), again[0]))
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Publish(context.Background(), dest, &broker.Message{Body: []byte("x")}), broker.ErrClosed)
}

func TestMissingQueue(t *testing.T) {
	o := geosqs.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 2 * time.Second}}
	s := newStore(t, &o)
	err := s.Publish(context.Background(), queueName(t, ""), &broker.Message{Body: []byte("x")})
	require.Error(t, err, "without CreateQueues a missing queue is an error")
	var api smithy.APIError
	require.ErrorAs(t, err, &api)
	require.Contains(t, []string{"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"}, api.ErrorCode())
	_, err = geosqs.QueueURL(context.Background(), s, strings.Repeat("q", 81))
	require.ErrorContains(t, err, "1 to 80 characters")
	require.Equal(t, "spatial-events-poison-dlt", geosqs.QueueName("spatial.events.poison.dlt"))
	require.Equal(t, "jobs-dlq.fifo", geosqs.QueueName("jobs.dlq.fifo"))
}

// countingAPI counts batch requests and their entries.
type countingAPI struct {
	geosqs.API
	mu      sync.Mutex
	batches []int
}

func (c *countingAPI) SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, o ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	c.mu.Lock()
	c.batches = append(c.batches, len(in.Entries))
	c.mu.Unlock()
	return c.API.SendMessageBatch(ctx, in, o...)
}

// TestConcurrentPublishesCoalesce: concurrent Publish calls to one queue
// leave in SendMessageBatch requests of up to 10, every one stored once.
func TestConcurrentPublishesCoalesce(t *testing.T) {
	api := &countingAPI{API: newClient(t)}
	s, err := geosqs.New(context.Background(), api, &geosqs.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 5 * time.Second}, CreateQueues: true, MaxConcurrentBatches: 1})
	require.NoError(t, err)
	dest := queueName(t, "")
	require.NoError(t, s.Publish(context.Background(), dest, &broker.Message{Body: []byte("first")}))
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			require.NoError(t, s.Publish(context.Background(), dest, &broker.Message{Body: []byte("m" + strconv.Itoa(i))}))
		})
	}
	wg.Wait()
	api.mu.Lock()
	batched := 0
	for _, b := range api.batches {
		require.LessOrEqual(t, b, 10)
		batched += b
	}
	api.mu.Unlock()
	require.NotEmpty(t, api.batches, "concurrent publishes were batched")
	recs := drainAll(t, s, dest, broker.Filter{})
	require.Len(t, recs, n+1)
	seen := map[string]bool{}
	for _, r := range recs {
		require.False(t, seen[string(r.Message.Body)])
		seen[string(r.Message.Body)] = true
		require.NoError(t, s.Ack(context.Background(), r))
	}
	t.Logf("%d batch requests carried %d of %d messages", len(api.batches), batched, n+1)
}
