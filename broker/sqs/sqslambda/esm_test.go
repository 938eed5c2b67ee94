package sqslambda_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
	"github.com/geodlq/geodlq/broker/sqs/sqslambda"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/spatial"
)

// journal records, in order, the dead-letter writes and deletes the test
// sees, so it can check that nothing is deleted before its dead letter is
// durable.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	j.entries = append(j.entries, fmt.Sprintf(format, args...))
	j.mu.Unlock()
}

func (j *journal) index(e string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Index(j.entries, e)
}

// journaled is the dead-letter store, noting each durable write.
type journaled struct {
	*broker.Store
	j *journal
}

func (s journaled) Publish(ctx context.Context, dest string, m *broker.Message) error {
	err := s.Store.Publish(ctx, dest, m)
	if err == nil {
		s.j.add("dl:%s", m.Envelope.Source.MessageID)
	}
	return err
}

// esm is an event source mapping, as Lambda runs one: it receives a batch,
// invokes the function with a deadline (the function timeout), and then
// deletes every record not in batchItemFailures — unless the function
// failed or timed out, when it deletes nothing and the batch comes back
// after the visibility timeout. With partial false (a mapping without
// ReportBatchItemFailures) a normal return deletes the whole batch.
// maxReceiveCount and the redrive to the queue's dead-letter queue are
// SQS's own (local-aws-sqs honours the RedrivePolicy).
type esm struct {
	t        *testing.T
	client   *awssqs.Client
	url, arn string
	timeout  time.Duration
	partial  bool
	fn       func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)
	j        *journal

	invocations, timeouts int
	failures              [][]string // per invocation, the event ids reported failed
	last                  events.SQSEvent
}

// poll runs one receive and invocation; it reports how many records the
// batch had.
func (e *esm) poll() int {
	ctx := context.Background()
	out, err := e.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(e.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}, MessageAttributeNames: []string{"All"}})
	require.NoError(e.t, err)
	if len(out.Messages) == 0 {
		return 0
	}
	ev := events.SQSEvent{}
	byID := map[string]types.Message{}
	for _, m := range out.Messages {
		sum := md5.Sum([]byte(aws.ToString(m.Body)))
		r := events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			Md5OfBody: hex.EncodeToString(sum[:]), Attributes: m.Attributes, MessageAttributes: map[string]events.SQSMessageAttribute{},
			EventSource: "aws:sqs", EventSourceARN: e.arn, AWSRegion: "us-east-1"}
		for k, a := range m.MessageAttributes {
			r.MessageAttributes[k] = events.SQSMessageAttribute{DataType: aws.ToString(a.DataType), StringValue: a.StringValue, BinaryValue: a.BinaryValue}
		}
		ev.Records = append(ev.Records, r)
		byID[r.MessageId] = m
	}
	e.invocations++
	e.last = ev
	ictx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	type result struct {
		resp events.SQSEventResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := e.fn(ictx, ev)
		done <- result{resp, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-ictx.Done():
		e.timeouts++
		<-done // Lambda would freeze or kill it; the test waits, and deletes nothing
		return len(ev.Records)
	}
	failed := map[string]bool{}
	var ids []string
	for _, f := range res.resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
		ids = append(ids, eventID(aws.ToString(byID[f.ItemIdentifier].Body)))
	}
	slices.Sort(ids)
	e.failures = append(e.failures, ids)
	if res.err != nil {
		return len(ev.Records) // the whole batch comes back
	}
	for _, r := range ev.Records {
		if e.partial && failed[r.MessageId] {
			continue
		}
		e.j.add("delete:%s", r.MessageId)
		_, err := e.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(e.url), ReceiptHandle: aws.String(r.ReceiptHandle)})
		require.NoError(e.t, err)
	}
	return len(ev.Records)
}

var eventIDRe = regexp.MustCompile(`"event_id":"([^"]+)"`)

func eventID(body string) string {
	if m := eventIDRe.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return "seed-bowtie"
}

func depth(t *testing.T, url string) string {
	t.Helper()
	var out struct{ Attributes map[string]string }
	require.NoError(t, json.Unmarshal(runAWS(t, "sqs", "get-queue-attributes", "--queue-url", url, "--attribute-names", "ApproximateNumberOfMessages"), &out))
	return out.Attributes["ApproximateNumberOfMessages"]
}

// seedBowtie is the seed's verification message, sent with the aws CLI.
const seedBowtie = `{
    "source_uri": "s3://my-bucket/test.geojson",
    "crs": "EPSG:4326",
    "processing_mode": "vector",
    "geometry": {
      "type": "Polygon",
      "coordinates": [[[0,0],[1,1],[0,1],[1,0],[0,0]]]
    }
  }`

func event(id, crs, geometry string) string {
	return fmt.Sprintf(`{"event_id":%q,"source_uri":"s3://tiles/%s.geojson","processing_mode":"vector","crs":%q,"geometry":%s}`, id, id, crs, geometry)
}

const (
	point  = `{"type":"Point","coordinates":[12.49,41.89]}`
	bowtie = `{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}`
)

// TestEventSourceMapping drives the handler as Lambda's event source
// mapping does, against local-aws-sqs, with a batch that mixes valid
// events, a bowtie, an EPSG:3857 payload, a transient failure, an event
// whose dead-letter queue refuses writes, and one whose handler runs out
// of time — plus the seed's bowtie, sent and verified with the aws CLI.
func TestEventSourceMapping(t *testing.T) {
	t.Parallel() // its own queues (queueName); the waits on visibility timeouts overlap
	client := newClient(t)
	nativeURL, nativeARN := createQueue(t, client, queueName(t, "-native"), nil)
	dlqURL, _ := createQueue(t, client, queueName(t, "-dlq"), nil)
	const fnTimeout = 3 * time.Second
	// 2 × the function timeout keeps the test short; the advice is 6×
	// (geosqs.VisibilityTimeoutFor).
	const vt = 6 * time.Second
	settings, err := geosqs.RedriveConfig{DeadLetterTargetARN: nativeARN, MaxReceiveCount: 4}.Settings()
	require.NoError(t, err)
	attrs := settings.Attributes()
	attrs["VisibilityTimeout"] = fmt.Sprint(int(vt.Seconds()))
	srcURL, srcARN := createQueue(t, client, queueName(t, "-primary"), attrs)

	batch := []string{
		event("evt-valid-1", "EPSG:4326", point),
		event("evt-bowtie", "EPSG:4326", bowtie),
		event("evt-3857", "EPSG:3857", `{"type":"Point","coordinates":[1113194.9,6446275.8]}`),
		event("evt-tile", "EPSG:4326", point),
		event("evt-refused", "EPSG:4326", bowtie),
		event("evt-slow", "EPSG:4326", point),
		event("evt-valid-2", "EPSG:4326", point),
	}
	runAWS(t, "sqs", "send-message", "--queue-url", srcURL, "--message-body", seedBowtie)
	for _, b := range batch {
		_, err := client.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: aws.String(srcURL), MessageBody: aws.String(b)})
		require.NoError(t, err)
	}

	store, err := geosqs.New(context.Background(), client, &geosqs.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 5 * time.Second}})
	require.NoError(t, err)
	defer store.Close()
	j := &journal{}
	missing := queueName(t, "-missing") // not created: SQS refuses the write
	checker, err := spatial.NewChecker(&spatial.Options{ExpectedEPSG: 4326})
	require.NoError(t, err)
	defer checker.Close()
	var mu sync.Mutex
	processed := map[string][]int{} // event id → receive counts of successful runs
	h, err := sqslambda.New(func(ctx context.Context, m *broker.Message) error {
		id := eventID(string(m.Body))
		if _, err := checker.CheckEventContext(ctx, m.Body); err != nil {
			return err
		}
		switch {
		case id == "evt-tile":
			return classify.Transient(errors.New("tile server: HTTP 503"))
		case id == "evt-slow" && m.DeliveryAttempt == 1:
			<-ctx.Done() // a reprojection longer than the time left
			return ctx.Err()
		}
		mu.Lock()
		processed[id] = append(processed[id], m.DeliveryAttempt)
		mu.Unlock()
		return nil
	}, &sqslambda.Options{
		Processor: broker.ProcessorOptions{
			Publisher: journaled{store, j},
			Policy:    classify.Policy{MaxAttempts: 3},
			Destination: func(m *broker.Message, _ classify.Route) string {
				if eventID(string(m.Body)) == "evt-refused" {
					return missing
				}
				return dlqURL
			},
		},
		StopBefore: time.Second,
	})
	require.NoError(t, err)

	d := &esm{t: t, client: client, url: srcURL, arn: srcARN, timeout: fnTimeout, partial: true, fn: h.HandleSQS, j: j}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if d.poll() == 0 {
			a, err := client.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(srcURL),
				AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
			require.NoError(t, err)
			if a.Attributes["ApproximateNumberOfMessages"] == "0" && a.Attributes["ApproximateNumberOfMessagesNotVisible"] == "0" {
				break
			}
		}
	}
	t.Logf("%d invocations; failures reported per invocation: %v", d.invocations, d.failures)
	require.Zero(t, d.timeouts, "the handler returned before every deadline: a slow record is reported, not timed out")
	require.Contains(t, d.failures[0], "evt-slow", "the record that ran out of time is reported failed")
	require.NotContains(t, d.failures[0], "evt-bowtie", "deterministic failures are done on their first delivery")
	require.NotContains(t, d.failures[0], "evt-3857")

	// The seed's verification, with the aws CLI: the primary queue is
	// empty; the geodlq dead-letter queue holds the four dead letters; the
	// queue's own dead-letter queue holds the event whose dead-letter
	// write SQS refused, moved there after maxReceiveCount.
	require.Equal(t, "0", depth(t, srcURL), "primary queue")
	require.Equal(t, "4", depth(t, dlqURL), "geodlq dead-letter queue")
	require.Equal(t, "1", depth(t, nativeURL), "the queue's redrive dead-letter queue")

	mu.Lock()
	for _, id := range []string{"evt-valid-1", "evt-valid-2", "evt-slow"} {
		require.NotEmpty(t, processed[id], "%s processed", id)
	}
	require.GreaterOrEqual(t, processed["evt-slow"][0], 2, "the slow record was processed on a later delivery")
	mu.Unlock()

	recs, err := store.Fetch(context.Background(), dlqURL, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 4)
	got := map[string]*envelope.Envelope{}
	for _, r := range recs {
		got[eventID(string(mustRestore(t, r.Envelope)))] = r.Envelope
		require.Less(t, j.index("dl:"+r.Envelope.Source.MessageID), j.index("delete:"+r.Envelope.Source.MessageID),
			"the dead letter of %s is durable before its record is deleted", r.Envelope.Source.MessageID)
		require.NoError(t, store.Ack(context.Background(), r))
	}
	for id, want := range map[string]classify.Class{"evt-bowtie": classify.ClassInvalidGeometry, "seed-bowtie": classify.ClassInvalidGeometry, "evt-3857": classify.ClassCRSMismatch} {
		require.Contains(t, got, id)
		require.Equal(t, want, got[id].FailureClass, id)
		require.Equal(t, 1, got[id].Source.DeliveryCount, "%s dead-lettered on its first delivery", id)
		require.Equal(t, 1, got[id].Attempts, id)
	}
	require.Contains(t, got, "evt-tile")
	require.Equal(t, classify.ClassTransient, got["evt-tile"].FailureClass)
	require.Equal(t, 3, got["evt-tile"].Attempts, "the transient failure was retried by SQS until Policy.MaxAttempts")
	require.Equal(t, 3, got["evt-tile"].Source.DeliveryCount)

	raw, err := client.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(nativeURL), MaxNumberOfMessages: 10})
	require.NoError(t, err)
	require.Len(t, raw.Messages, 1)
	require.Equal(t, batch[4], aws.ToString(raw.Messages[0].Body), "the event whose dead-letter write failed is kept whole by SQS's redrive")
	require.Equal(t, -1, j.index("delete:"+aws.ToString(raw.Messages[0].MessageId)), "and was never deleted")
}

func mustRestore(t *testing.T, env *envelope.Envelope) []byte {
	t.Helper()
	b, err := env.Restore(context.Background(), nil)
	require.NoError(t, err)
	return b
}

// TestExplicitDelete: without partial batch responses, the handler deletes
// what is done itself (after the dead letter is durable) and fails the
// invocation for the rest, which comes back.
func TestExplicitDelete(t *testing.T) {
	t.Parallel() // its own queues (queueName); the waits on visibility timeouts overlap
	client := newClient(t)
	dlqURL, _ := createQueue(t, client, queueName(t, "-dlq"), nil)
	srcURL, srcARN := createQueue(t, client, queueName(t, "-src"), map[string]string{"VisibilityTimeout": "2"})
	for _, b := range []string{event("evt-valid", "EPSG:4326", point), event("evt-bowtie", "EPSG:4326", bowtie), event("evt-tile", "EPSG:4326", point)} {
		_, err := client.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: aws.String(srcURL), MessageBody: aws.String(b)})
		require.NoError(t, err)
	}
	store, err := geosqs.New(context.Background(), client, nil)
	require.NoError(t, err)
	defer store.Close()
	j := &journal{}
	rec := &deleteJournal{API: client, j: j}
	checker, err := spatial.NewChecker(nil)
	require.NoError(t, err)
	defer checker.Close()
	h, err := sqslambda.New(func(ctx context.Context, m *broker.Message) error {
		if _, err := checker.CheckEventContext(ctx, m.Body); err != nil {
			return err
		}
		if eventID(string(m.Body)) == "evt-tile" && m.DeliveryAttempt < 2 {
			return classify.Transient(errors.New("tile server: HTTP 429"))
		}
		return nil
	}, &sqslambda.Options{
		Processor: broker.ProcessorOptions{Publisher: journaled{store, j}, Policy: classify.Policy{MaxAttempts: 3},
			Destination: func(*broker.Message, classify.Route) string { return dlqURL }},
		Delete: &sqslambda.DeleteOptions{Client: rec, QueueURL: srcURL},
	})
	require.NoError(t, err)
	d := &esm{t: t, client: client, url: srcURL, arn: srcARN, timeout: 10 * time.Second, partial: false, fn: h.HandleSQS, j: &journal{}}
	require.Equal(t, 3, d.poll())
	require.Equal(t, [][]string{{"evt-tile"}}, d.failures, "the invocation failed for the transient record only")
	require.Len(t, rec.deleted(), 2, "the handler deleted the two records that were done")
	for _, r := range d.last.Records {
		if eventID(r.Body) == "evt-bowtie" {
			require.Less(t, j.index("dl:"+r.MessageId), j.index("delete:"+r.ReceiptHandle), "the dead letter is durable before the handler deletes")
		}
	}
	require.Eventually(t, func() bool { return d.poll() == 1 }, 30*time.Second, 100*time.Millisecond, "only the failed record came back")
	require.Len(t, rec.deleted(), 3)
	require.Equal(t, "0", depth(t, srcURL))
	require.Equal(t, "1", depth(t, dlqURL))
}

// deleteJournal notes the handler's own deletes.
type deleteJournal struct {
	geosqs.API
	j  *journal
	mu sync.Mutex
	n  []string
}

func (d *deleteJournal) DeleteMessage(ctx context.Context, in *awssqs.DeleteMessageInput, o ...func(*awssqs.Options)) (*awssqs.DeleteMessageOutput, error) {
	out, err := d.API.DeleteMessage(ctx, in, o...)
	if err == nil {
		d.j.add("delete:%s", aws.ToString(in.ReceiptHandle))
		d.mu.Lock()
		d.n = append(d.n, aws.ToString(in.ReceiptHandle))
		d.mu.Unlock()
	}
	return out, err
}

func (d *deleteJournal) deleted() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.n)
}

// TestFIFO: on a FIFO source the envelope keeps the record's
// MessageGroupId and MessageDeduplicationId, and so does the FIFO
// dead-letter queue; a group stops at its first record not done, and its
// later records are reported too, so they come back in order.
func TestFIFO(t *testing.T) {
	t.Parallel() // its own queues (queueName); the waits on visibility timeouts overlap
	client := newClient(t)
	dlqURL, _ := createQueue(t, client, queueName(t, "-dlq.fifo"), nil)
	srcURL, srcARN := createQueue(t, client, queueName(t, "-src.fifo"), map[string]string{"VisibilityTimeout": "2"})
	for i, b := range []string{event("evt-a", "EPSG:4326", bowtie), event("evt-b", "EPSG:4326", point), event("evt-c", "EPSG:4326", point)} {
		_, err := client.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: aws.String(srcURL), MessageBody: aws.String(b),
			MessageGroupId: aws.String("parcel-42"), MessageDeduplicationId: aws.String(fmt.Sprintf("upload-%d", i))})
		require.NoError(t, err)
	}
	store, err := geosqs.New(context.Background(), client, nil)
	require.NoError(t, err)
	defer store.Close()
	var mu sync.Mutex
	var order []string
	h, err := sqslambda.New(func(_ context.Context, m *broker.Message) error {
		id := eventID(string(m.Body))
		mu.Lock()
		order = append(order, id)
		mu.Unlock()
		if id == "evt-b" && m.DeliveryAttempt == 1 {
			return classify.Transient(errors.New("tile server: HTTP 503"))
		}
		if id == "evt-a" {
			return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
		}
		return nil
	}, &sqslambda.Options{Processor: broker.ProcessorOptions{Publisher: store, Policy: classify.Policy{MaxAttempts: 3},
		Destination: func(*broker.Message, classify.Route) string { return dlqURL }}})
	require.NoError(t, err)
	d := &esm{t: t, client: client, url: srcURL, arn: srcARN, timeout: 10 * time.Second, partial: true, fn: h.HandleSQS, j: &journal{}}
	require.Equal(t, 3, d.poll())
	require.Equal(t, [][]string{{"evt-b", "evt-c"}}, d.failures, "the group stops at evt-b; evt-c is reported behind it")
	require.Eventually(t, func() bool { return d.poll() > 0 }, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, []string{"evt-a", "evt-b", "evt-b", "evt-c"}, order, "one group, in order")
	raw, err := client.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(dlqURL), MaxNumberOfMessages: 10,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	require.NoError(t, err)
	require.Len(t, raw.Messages, 1)
	require.Equal(t, "parcel-42", raw.Messages[0].Attributes["MessageGroupId"])
	require.Equal(t, "upload-0", raw.Messages[0].Attributes["MessageDeduplicationId"])
	env, err := envelope.Decode([]byte(aws.ToString(raw.Messages[0].Body)))
	require.NoError(t, err)
	require.Equal(t, "parcel-42", env.Source.GroupID)
	require.Equal(t, "upload-0", env.Source.DedupID)
}
