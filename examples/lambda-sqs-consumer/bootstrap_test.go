package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// maxZip is Lambda's zip budget for this function (issue 22).
const maxZip = 20 << 20

// sqsEndpoint is the local SQS server (scripts/local-sqs.sh).
func sqsEndpoint() string {
	if ep := os.Getenv("GEODLQ_TEST_SQS"); ep != "" {
		return ep
	}
	return "http://127.0.0.1:9324"
}

// needSQS skips the test when the local SQS server is unreachable (a copy
// of the example run with no servers), or fails it when
// GEODLQ_REQUIRE_SERVICES is set (make test).
func needSQS(t *testing.T) {
	t.Helper()
	ep := sqsEndpoint()
	u, err := url.Parse(ep)
	require.NoError(t, err, "GEODLQ_TEST_SQS")
	c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
	if err == nil {
		_ = c.Close()
		return
	}
	if os.Getenv("GEODLQ_REQUIRE_SERVICES") != "" {
		t.Fatalf("local-aws-sqs at %s is unreachable (%v); run scripts/local-sqs.sh", ep, err)
	}
	t.Skipf("SKIPPING: local-aws-sqs at %s is unreachable (%v); run scripts/local-sqs.sh", ep, err)
}

// TestBootstrapInEmptyRoot builds the function as make lambda does
// (linux/amd64, CGO_ENABLED=0), checks its zip is at most 20 MB, and runs
// it in an empty root — no shared libraries, no proj.db — against a local
// Lambda Runtime API, with a dead-letter queue on the local SQS server
// and the next stage (FORWARD_URL) on loopback. One SQS batch holds a
// valid event, a bowtie, a NaN ring, an EPSG:3857 payload and an event
// the next stage answers 503: batchItemFailures must name the last alone,
// and the dead-letter queue must hold the three bad events' envelopes with
// their verdicts.
func TestBootstrapInEmptyRoot(t *testing.T) {
	needSQS(t)
	bin := Build(t, ".")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	size := ZipSize(t, bin)
	t.Logf("bootstrap zip: %.1f MB", float64(size)/(1<<20))
	require.LessOrEqual(t, size, int64(maxZip))

	client := awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(sqsEndpoint()),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	name := fmt.Sprintf("lambda-dlq-%d", time.Now().UnixNano())
	q, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: &name})
	require.NoError(t, err, "the local SQS server (scripts/local-sqs.sh) at %s", sqsEndpoint())
	t.Cleanup(func() {
		_, _ = client.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: q.QueueUrl})
	})

	// The next stage: 503 for the event that must come back, 200 else.
	var (
		mu        sync.Mutex
		forwarded []string
	)
	fwd, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			EventID string `json:"event_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&ev)
		if ev.EventID == "evt-downstream-busy" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		forwarded = append(forwarded, ev.EventID)
		mu.Unlock()
	})}
	go func() { _ = srv.Serve(fwd) }()
	t.Cleanup(func() { _ = srv.Close() })

	api := NewRuntimeAPI(t)
	var stderr LockedBuffer
	Start(t, ctx, bin, []string{
		"AWS_LAMBDA_RUNTIME_API=" + api.Addr,
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_LAMBDA_FUNCTION_NAME=vector-jobs-consumer", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=2048",
		"DLQ_URL=" + *q.QueueUrl, "SQS_ENDPOINT=" + sqsEndpoint(), "MAX_ATTEMPTS=3",
		"FORWARD_URL=http://" + fwd.Addr().String() + "/jobs",
	}, &stderr)

	bodies := map[string]string{
		"m-valid":    `{"event_id":"evt-valid","source_uri":"s3://b/ok.geojson","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}`,
		"m-bowtie":   `{"event_id":"evt-bowtie","source_uri":"s3://b/bowtie.geojson","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`,
		"m-nan":      `{"event_id":"evt-nan","source_uri":"s3://b/nan.geojson","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[NaN,1],[0,1],[0,0]]]}}`,
		"m-mercator": `{"event_id":"evt-mercator","source_uri":"s3://b/3857.geojson","crs":"urn:ogc:def:crs:EPSG::3857","geometry":{"type":"Point","coordinates":[1113194.9,6800125.5]}}`,
		"m-busy":     `{"event_id":"evt-downstream-busy","source_uri":"s3://b/busy.geojson","crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[10,50]}}`,
	}
	var ev events.SQSEvent
	for _, id := range []string{"m-valid", "m-bowtie", "m-nan", "m-mercator", "m-busy"} {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: id, ReceiptHandle: "rh-" + id, Body: bodies[id],
			Attributes:  map[string]string{"ApproximateReceiveCount": "1", "SentTimestamp": "1764720000000"},
			EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:vector-jobs", AWSRegion: "us-east-1"})
	}
	payload, err := json.Marshal(ev)
	require.NoError(t, err)
	out := api.Invoke(ctx, t, "req-1", payload)
	require.False(t, out.Error, "the function failed: %s\nstderr: %s", out.Body, stderr.String())
	var resp events.SQSEventResponse
	require.NoError(t, json.Unmarshal(out.Body, &resp), "%s", out.Body)
	require.Equal(t, []events.SQSBatchItemFailure{{ItemIdentifier: "m-busy"}}, resp.BatchItemFailures, "stderr: %s", stderr.String())
	mu.Lock()
	require.Equal(t, []string{"evt-valid"}, forwarded)
	mu.Unlock()

	// The dead letters: one envelope per deterministic failure.
	type letter struct {
		class classify.Class
		kind  string
		epsg  int
	}
	got := map[string]letter{}
	for len(got) < 3 && ctx.Err() == nil {
		r, err := client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		require.NoError(t, err)
		for _, m := range r.Messages {
			env, err := envelope.Decode([]byte(aws.ToString(m.Body)))
			require.NoError(t, err)
			l := letter{class: env.FailureClass}
			if ge := env.GeometryError; ge != nil {
				l.kind = ge.Kind
				if ge.EPSG != nil {
					l.epsg = *ge.EPSG
				}
			}
			require.NotNil(t, env.Source)
			got[env.Source.MessageID] = l
		}
	}
	require.Equal(t, map[string]letter{
		"m-bowtie":   {classify.ClassInvalidGeometry, "self_intersection", 4326},
		"m-nan":      {classify.ClassInvalidGeometry, "invalid_coordinate", 4326},
		"m-mercator": {classify.ClassCRSMismatch, "crs_differs", 3857},
	}, got)
	require.False(t, slices.ContainsFunc(strings.Split(stderr.String(), "\n"), func(l string) bool {
		return strings.Contains(l, "proj") && strings.Contains(l, "cannot")
	}), "stderr: %s", stderr.String())
}
