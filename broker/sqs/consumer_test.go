package sqs_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/spatial"
)

// createQueue creates a queue with attributes and returns its URL and ARN.
func createQueue(t *testing.T, client *awssqs.Client, name string, attrs map[string]string) (url, arn string) {
	t.Helper()
	if geosqs.IsFIFO(name) {
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs["FifoQueue"] = "true"
	}
	out, err := client.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	require.NoError(t, err)
	a, err := client.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	return aws.ToString(out.QueueUrl), a.Attributes["QueueArn"]
}

// depth returns a queue's ApproximateNumberOfMessages and
// ApproximateNumberOfMessagesNotVisible. (local-aws-sqs counts in-flight
// messages in the first too; SQS does not.)
func depth(t *testing.T, client *awssqs.Client, url string) (visible, inflight string) {
	t.Helper()
	a, err := client.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: &url,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(t, err)
	return a.Attributes["ApproximateNumberOfMessages"], a.Attributes["ApproximateNumberOfMessagesNotVisible"]
}

func processor(t *testing.T, pub broker.Publisher, dest string, policy classify.Policy) *broker.Processor {
	t.Helper()
	p, err := broker.NewProcessor(&broker.ProcessorOptions{
		Publisher: pub, Policy: policy,
		Destination: func(*broker.Message, classify.Route) string { return dest },
		Sleep:       func(context.Context, time.Duration) error { return nil },
	})
	require.NoError(t, err)
	return p
}

// awscli returns Debian's aws CLI (/usr/bin/aws, package awscli), called by
// its full path: another aws may come first on PATH.
func awscli(t *testing.T) string {
	t.Helper()
	const path = "/usr/bin/aws"
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("GEODLQ_REQUIRE_SERVICES") != "" {
			t.Fatalf("%s is missing (apt-get install awscli): %v", path, err)
		}
		t.Skipf("SKIPPING: %s is missing (apt-get install awscli): %v", path, err)
	}
	return path
}

func runAWS(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(awscli(t), append([]string{"--endpoint-url", endpoint(t), "--region", "us-east-1", "--output", "json"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "AWS_ACCESS_KEY_ID=geodlq", "AWS_SECRET_ACCESS_KEY=geodlq",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=", "AWS_EC2_METADATA_DISABLED=true")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "aws %s: %s", strings.Join(args, " "), out)
	return out
}

const bowtie = `{
    "source_uri": "s3://my-bucket/test.geojson",
    "crs": "EPSG:4326",
    "processing_mode": "vector",
    "geometry": {
      "type": "Polygon",
      "coordinates": [[[0,0],[1,1],[0,1],[1,0],[0,0]]]
    }
  }`

// results collects a consumer's results (ConsumerOptions.OnResult).
type results struct {
	mu   sync.Mutex
	list []broker.Result
	errs []error
}

func (r *results) on(_ *broker.Delivery, res broker.Result, err error) {
	r.mu.Lock()
	r.list = append(r.list, res)
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

func (r *results) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.list)
}

// consume runs c with h until cond holds (or a minute passed), then stops
// it and waits for Run to return.
func consume(t *testing.T, c *broker.Consumer, h broker.Handler, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, h) }()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && !cond() {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.True(t, cond(), "condition not met within a minute")
}

func consumerOpts(r *results, o geosqs.ConsumerOptions) *geosqs.ConsumerOptions {
	o.OnResult = r.on
	if o.WaitTime == 0 {
		o.WaitTime = time.Second
	}
	return &o
}

// TestSeedVerification reproduces the seed's verification step: a bowtie
// sent to the primary queue (with Debian's aws CLI), one consumer pass
// (GEOS finds the self-intersection), and the CLI reads
// ApproximateNumberOfMessages = 1 on the dead-letter queue and 0 on the
// primary.
func TestSeedVerification(t *testing.T) {
	client := newClient(t)
	dlqURL, dlqARN := createQueue(t, client, queueName(t, "-dlq"), nil)
	settings, err := geosqs.RedriveConfig{SourceQueue: "vector-jobs", DeadLetterTargetARN: dlqARN, MaxReceiveCount: 4, LongestOperation: 12 * time.Second}.Settings()
	require.NoError(t, err)
	primaryURL, _ := createQueue(t, client, queueName(t, "-primary"), settings.Attributes())

	runAWS(t, "sqs", "send-message", "--queue-url", primaryURL, "--message-body", bowtie)

	checker, err := spatial.NewChecker(&spatial.Options{ExpectedEPSG: 4326})
	require.NoError(t, err)
	defer checker.Close()
	store := newStore(t, nil)
	var r results
	c, err := geosqs.NewConsumer(context.Background(), client, primaryURL, processor(t, store, dlqURL, classify.Policy{}), consumerOpts(&r, geosqs.ConsumerOptions{}))
	require.NoError(t, err)
	consume(t, c, func(ctx context.Context, m *broker.Message) error {
		_, err := checker.CheckEvent(m.Body)
		return err
	}, func() bool { return r.len() >= 1 })
	require.True(t, r.list[0].DeadLettered)

	for _, q := range []struct{ url, want string }{{dlqURL, "1"}, {primaryURL, "0"}} {
		var out struct{ Attributes map[string]string }
		require.NoError(t, json.Unmarshal(runAWS(t, "sqs", "get-queue-attributes", "--queue-url", q.url, "--attribute-names", "ApproximateNumberOfMessages"), &out))
		require.Equal(t, q.want, out.Attributes["ApproximateNumberOfMessages"], "ApproximateNumberOfMessages of %s", q.url)
	}
	recs := drainAll(t, store, dlqURL, broker.Filter{})
	require.Len(t, recs, 1)
	env := recs[0].Envelope
	require.Equal(t, classify.ClassInvalidGeometry, env.FailureClass)
	require.Equal(t, classify.StageTopologyValidation, env.FailedStage)
	require.Contains(t, env.GeometryError.Reason, "Self-intersection")
	require.Equal(t, "sqs", env.Source.System)
	require.Equal(t, 1, env.Source.DeliveryCount)
	restored, err := env.Restore(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, bowtie, string(restored), "the bowtie restores byte for byte")
}

// recorder wraps the client and records the order of dead-letter writes
// and deletes.
type recorder struct {
	geosqs.API
	mu    sync.Mutex
	calls []string
}

func (r *recorder) note(s string) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
}

func (r *recorder) DeleteMessage(ctx context.Context, in *awssqs.DeleteMessageInput, o ...func(*awssqs.Options)) (*awssqs.DeleteMessageOutput, error) {
	r.note("delete")
	return r.API.DeleteMessage(ctx, in, o...)
}

type recordingStore struct {
	*broker.Store
	r *recorder
}

func (s recordingStore) Publish(ctx context.Context, d string, m *broker.Message) error {
	err := s.Store.Publish(ctx, d, m)
	if err == nil {
		s.r.note("dead-letter")
	}
	return err
}

func TestConsumerDeletesOnlyAfterDeadLetterWrite(t *testing.T) {
	client := newClient(t)
	src, _ := createQueue(t, client, queueName(t, "-src"), nil)
	dlq, _ := createQueue(t, client, queueName(t, "-dlq"), nil)
	rec := &recorder{API: client}
	store := recordingStore{Store: newStore(t, nil), r: rec}
	var r results
	c, err := geosqs.NewConsumer(context.Background(), rec, src, processor(t, store, dlq, classify.Policy{}), consumerOpts(&r, geosqs.ConsumerOptions{}))
	require.NoError(t, err)
	_, err = client.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: &src, MessageBody: aws.String(`{"geometry":null}`)})
	require.NoError(t, err)
	consume(t, c, func(context.Context, *broker.Message) error {
		return classify.InvalidGeometry(errors.New("geometry is null"))
	}, func() bool { return r.len() >= 1 })
	require.NoError(t, r.errs[0])
	require.Equal(t, []string{"dead-letter", "delete"}, rec.calls, "the envelope is durable before the source is deleted")
	v, inflight := depth(t, client, src)
	require.Equal(t, []string{"0", "0"}, []string{v, inflight})
}

// TestConsumerNeverDeletesWhenSQSFails: the dead-letter write fails with an
// SQS error (the seed's ClientError: here the dead-letter queue does not
// exist). The message is given back, never deleted; SQS delivers it again
// with a higher receive count, and after maxReceiveCount receives SQS's
// own redrive moves it to the source's dead-letter queue. Nothing is lost.
func TestConsumerNeverDeletesWhenSQSFails(t *testing.T) {
	client := newClient(t)
	nativeURL, nativeARN := createQueue(t, client, queueName(t, "-native"), nil)
	settings, err := geosqs.RedriveConfig{DeadLetterTargetARN: nativeARN, MaxReceiveCount: 2}.Settings()
	require.NoError(t, err)
	attrs := settings.Attributes()
	attrs["VisibilityTimeout"] = "1"
	src, _ := createQueue(t, client, queueName(t, "-src"), attrs)
	store := newStore(t, &geosqs.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 2 * time.Second}}) // no CreateQueues: the dead-letter queue is missing
	var r results
	c, err := geosqs.NewConsumer(context.Background(), client, src, processor(t, store, queueName(t, "-missing"), classify.Policy{}),
		consumerOpts(&r, geosqs.ConsumerOptions{ExtendEvery: -1}))
	require.NoError(t, err)
	_, err = client.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: &src, MessageBody: aws.String(bowtie)})
	require.NoError(t, err)
	var mu sync.Mutex
	var attempts []int
	h := func(_ context.Context, m *broker.Message) error {
		mu.Lock()
		attempts = append(attempts, m.DeliveryAttempt)
		mu.Unlock()
		return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
	}
	consume(t, c, h, func() bool {
		v, _ := depth(t, client, nativeURL)
		return v == "1"
	})
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, attempts)
	require.Equal(t, 1, attempts[0])
	require.True(t, slices.IsSorted(attempts), "DeliveryAttempt is ApproximateReceiveCount: %v", attempts)
	r.mu.Lock()
	for _, err := range r.errs {
		require.ErrorIs(t, err, broker.ErrNotAcked)
		var dl *broker.DeadLetterError
		require.ErrorAs(t, err, &dl)
		require.Equal(t, "publish", dl.Op)
	}
	r.mu.Unlock()
	v, inflight := depth(t, client, src)
	require.Equal(t, []string{"0", "0"}, []string{v, inflight}, "after maxReceiveCount receives SQS moved it to the redrive dead-letter queue")
}

// TestConsumerAttemptsStartAtReceiveCount: a message already received once
// is processed as its second attempt; the in-place retries continue from
// there and the envelope records the count.
func TestConsumerAttemptsStartAtReceiveCount(t *testing.T) {
	client := newClient(t)
	src, _ := createQueue(t, client, queueName(t, "-src"), nil)
	store := newStore(t, nil)
	dlq := queueName(t, "-dlq")
	var r results
	c, err := geosqs.NewConsumer(context.Background(), client, src, processor(t, store, dlq, classify.Policy{MaxAttempts: 3}), consumerOpts(&r, geosqs.ConsumerOptions{}))
	require.NoError(t, err)
	_, err = client.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: &src, MessageBody: aws.String(`{"event_id":"evt-tile","geometry":{"type":"Point","coordinates":[1,2]}}`)})
	require.NoError(t, err)
	// A first consumer receives it and dies: it comes back after 1 s.
	// (Not ChangeMessageVisibility 0: local-aws-sqs counts that as a receive.)
	first, err := client.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: &src, VisibilityTimeout: 1})
	require.NoError(t, err)
	require.Len(t, first.Messages, 1)
	var mu sync.Mutex
	var seen []int
	consume(t, c, func(_ context.Context, m *broker.Message) error {
		mu.Lock()
		seen = append(seen, m.DeliveryAttempt)
		mu.Unlock()
		return classify.Transient(errors.New("tile server: HTTP 502"))
	}, func() bool { return r.len() >= 1 })
	require.NoError(t, r.errs[0])
	require.Equal(t, []int{2, 2}, seen, "attempts 2 and 3 of a budget of 3; DeliveryAttempt is the receive count, 2")
	recs := drainAll(t, store, dlq, broker.Filter{})
	require.Len(t, recs, 1)
	require.Equal(t, seen[0]+1, recs[0].Envelope.Attempts)
	require.Equal(t, seen[0], recs[0].Envelope.Source.DeliveryCount)
	require.Equal(t, classify.ClassTransient, recs[0].Envelope.FailureClass)
}

// TestConsumerExtendsVisibility: a spatial operation longer than the
// visibility timeout keeps its message invisible, and it is processed
// once.
func TestConsumerExtendsVisibility(t *testing.T) {
	client := newClient(t)
	src, _ := createQueue(t, client, queueName(t, "-src"), map[string]string{"VisibilityTimeout": "2"})
	var r results
	c, err := geosqs.NewConsumer(context.Background(), client, src, processor(t, newStore(t, nil), queueName(t, "-dlq"), classify.Policy{}),
		consumerOpts(&r, geosqs.ConsumerOptions{ExtendEvery: 250 * time.Millisecond}))
	require.NoError(t, err)
	_, err = client.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: &src, MessageBody: aws.String(`{"geometry":{"type":"Point","coordinates":[1,2]}}`)})
	require.NoError(t, err)
	var stolen, runs int
	consume(t, c, func(ctx context.Context, m *broker.Message) error {
		runs++
		// 2.5 visibility timeouts of "reprojection", while another consumer polls.
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			out, err := client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: &src})
			if err != nil {
				return err
			}
			stolen += len(out.Messages)
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	}, func() bool { return r.len() >= 1 })
	require.NoError(t, r.errs[0])
	require.Zero(t, stolen, "no other consumer received the message while it was processed")
	require.Equal(t, 1, runs)
	require.Zero(t, stolen, "no other consumer received the message while it was processed")
	v, inflight := depth(t, client, src)
	require.Equal(t, []string{"0", "0"}, []string{v, inflight}, "deleted after success")
}

// TestConsumerFIFO: a FIFO source's group is processed in order; the poison
// message lands in a FIFO dead-letter queue with its MessageGroupId and
// MessageDeduplicationId.
func TestConsumerFIFO(t *testing.T) {
	client := newClient(t)
	src, _ := createQueue(t, client, queueName(t, "-src.fifo"), nil)
	store := newStore(t, nil)
	dlq := queueName(t, "-dlq.fifo")
	var r results
	c, err := geosqs.NewConsumer(context.Background(), client, src, processor(t, store, dlq, classify.Policy{}),
		consumerOpts(&r, geosqs.ConsumerOptions{LeaseTTL: 30 * time.Second, ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}}))
	require.NoError(t, err)
	bodies := []string{`{"n":1,"geometry":{"type":"Point","coordinates":[1,2]}}`, `{"n":2,"bowtie":true}`, `{"n":3,"geometry":{"type":"Point","coordinates":[1,2]}}`}
	for i, b := range bodies {
		_, err := client.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: &src, MessageBody: aws.String(b),
			MessageGroupId: aws.String("parcel-42"), MessageDeduplicationId: aws.String("upload-" + string(rune('a'+i)))})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var order []string
	consume(t, c, func(_ context.Context, m *broker.Message) error {
		mu.Lock()
		order = append(order, string(m.Body))
		mu.Unlock()
		if string(m.Key) != "parcel-42" {
			return errors.New("the group is not the key")
		}
		if strings.Contains(string(m.Body), "bowtie") {
			return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
		}
		return nil
	}, func() bool { return r.len() >= 3 })
	require.Equal(t, bodies, order, "one group, in order")
	for _, err := range r.errs {
		require.NoError(t, err)
	}

	dlqURL, err := geosqs.QueueURL(context.Background(), store, dlq)
	require.NoError(t, err)
	raw, err := client.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: &dlqURL, MaxNumberOfMessages: 10,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	require.NoError(t, err)
	require.Len(t, raw.Messages, 1)
	require.Equal(t, "parcel-42", raw.Messages[0].Attributes["MessageGroupId"])
	require.Equal(t, "upload-b", raw.Messages[0].Attributes["MessageDeduplicationId"])
	env, err := envelope.Decode([]byte(aws.ToString(raw.Messages[0].Body)))
	require.NoError(t, err)
	require.Equal(t, "parcel-42", env.Source.GroupID)
	require.Equal(t, "upload-b", env.Source.DedupID)
	require.Equal(t, "sqs", env.Source.System)
	v, inflight := depth(t, client, src)
	require.Equal(t, []string{"0", "0"}, []string{v, inflight})
}

func TestNewConsumerOptions(t *testing.T) {
	client := newClient(t)
	src, _ := createQueue(t, client, queueName(t, ""), nil)
	p := processor(t, newStore(t, nil), "x", classify.Policy{})
	for _, o := range []geosqs.ConsumerOptions{{ConsumerOptions: broker.ConsumerOptions{MaxBatch: 11}}, {WaitTime: 21 * time.Second},
		{LeaseTTL: 1500 * time.Millisecond}, {LeaseTTL: time.Second, ExtendEvery: time.Second}, {ConsumerOptions: broker.ConsumerOptions{Concurrency: -1}}} {
		_, err := geosqs.NewConsumer(context.Background(), client, src, p, &o)
		require.ErrorIs(t, err, broker.ErrInvalidArgument, "%+v", o)
	}
	_, err := geosqs.NewConsumer(context.Background(), client, src, nil, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	_, err = geosqs.NewConsumer(context.Background(), client, src+"-missing", p, nil)
	require.Error(t, err, "the queue's VisibilityTimeout cannot be read")
}
