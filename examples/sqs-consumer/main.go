// Command sqs-consumer is an Amazon SQS consumer with geodlq's dead-letter
// path, ready to copy: it validates each GeoJSON event of a source queue
// with GEOS and PROJ, retries transient failures in place, sends what
// cannot be processed to a dead-letter queue as a dlq.v1 envelope (large
// geometries offloaded to a blob directory so it fits SQS's 256 KiB), and
// deletes a message only after its envelope is in the dead-letter queue. A
// failure of SQS itself never deletes: the visibility timeout brings the
// message back, and the queue's redrive policy takes over after
// maxReceiveCount receives.
//
// It first prints the queue settings it expects — the RedrivePolicy and
// VisibilityTimeout the redrive helper derives — and checks them.
//
//	go run ./examples/sqs-consumer -queue-url https://sqs.eu-west-1.amazonaws.com/123456789012/vector-jobs \
//	    -dlq vector-jobs-dlq -dlq-arn arn:aws:sqs:eu-west-1:123456789012:vector-jobs-dlq
//	go run ./examples/sqs-consumer -demo   # against local-aws-sqs (scripts/local-sqs.sh)
//
// Credentials and region come from the usual AWS sources (environment,
// shared config, instance role). Everything it uses is public API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/geodlq/geodlq/broker"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
)

type config struct {
	queueURL        string
	dlq             string // dead-letter queue name or URL (the geodlq store's destination)
	dlqARN          string // its ARN, for the source queue's RedrivePolicy
	maxReceiveCount int
	longestOp       time.Duration
	offloadDir      string
	endpoint        string
	demo            bool
	// wait is the consumer's long-polling wait (0: 20 s).
	wait time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.queueURL, "queue-url", "", "source queue URL")
	flag.StringVar(&c.dlq, "dlq", "vector-jobs-dlq", "dead-letter queue name or URL")
	flag.StringVar(&c.dlqARN, "dlq-arn", "", "dead-letter queue ARN, for the redrive policy")
	flag.IntVar(&c.maxReceiveCount, "max-receive-count", 4, "redrive maxReceiveCount (the seed recommends 3-5)")
	flag.DurationVar(&c.longestOp, "longest-op", 12*time.Second, "longest expected spatial operation (sets the visibility timeout)")
	flag.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries")
	flag.StringVar(&c.endpoint, "endpoint", os.Getenv("GEODLQ_TEST_SQS"), "SQS endpoint URL (default: AWS; -demo: http://127.0.0.1:9324)")
	flag.BoolVar(&c.demo, "demo", false, "create queues on local-aws-sqs, send sample events, consume them, print the dead-letter queue, and exit")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if c.demo {
		err = demo(ctx, c, os.Stdout, log)
	} else {
		err = run(ctx, c, os.Stdout, log)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "sqs-consumer:", err)
		os.Exit(1)
	}
}

// printSettings prints the source queue settings the consumer expects.
func printSettings(out io.Writer, c config, log *slog.Logger) (geosqs.QueueSettings, error) {
	s, err := geosqs.RedriveConfig{
		SourceQueue: c.queueURL, DeadLetterTargetARN: c.dlqARN,
		MaxReceiveCount: c.maxReceiveCount, LongestOperation: c.longestOp, Logger: log,
	}.Settings()
	if err != nil {
		return s, err
	}
	fmt.Fprintf(out, "Source queue settings (RedrivePolicy maxReceiveCount %d, VisibilityTimeout %v = %d× the %v longest operation):\n%s\n",
		s.RedrivePolicy.MaxReceiveCount, s.VisibilityTimeout, geosqs.VisibilityFactor, c.longestOp, s.CLI(c.queueURL))
	return s, nil
}

func newClient(ctx context.Context, endpoint string) (*awssqs.Client, error) {
	if endpoint != "" {
		return awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint),
			Credentials: credentials.NewStaticCredentialsProvider("geodlq", "geodlq", "")}), nil
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	return awssqs.NewFromConfig(cfg), nil
}

// newConsumer wires the store, the envelope builder with its offloader,
// the processor and the consumer.
func newConsumer(ctx context.Context, client *awssqs.Client, c config, log *slog.Logger, onResult func(*broker.Delivery, broker.Result, error)) (*broker.Consumer, broker.Handler, func(), error) {
	store, err := geosqs.New(ctx, client, &geosqs.Options{StoreOptions: broker.StoreOptions{Logger: log}})
	if err != nil {
		return nil, nil, nil, err
	}
	chk, err := spatial.NewChecker(nil) // expects EPSG:4326
	if err != nil {
		return nil, nil, nil, err
	}
	if err := os.MkdirAll(c.offloadDir, 0o755); err != nil {
		return nil, nil, nil, err
	}
	blobs, err := offload.NewDirStore(c.offloadDir)
	if err != nil {
		return nil, nil, nil, err
	}
	off, err := offload.New(blobs, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	// The Processor asks the store for its limit (256 KiB less room for
	// attributes) and the builder offloads geometry until the envelope fits.
	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off, ResolveEPSG: chk.ResolveEPSG})
	if err != nil {
		return nil, nil, nil, err
	}
	proc, err := broker.NewProcessor(broker.ProcessorOptions{
		Publisher: store,
		Builder:   builder,
		// One dead-letter queue, as in the seed; the envelope's
		// destination field still says retry or poison.
		Destination: func(*broker.Message, classify.Route) string { return c.dlq },
		Policy:      classify.Policy{MaxAttempts: 3, BaseDelay: 100 * time.Millisecond},
		Logger:      log,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	cons, err := geosqs.NewConsumer(ctx, client, c.queueURL, proc, &geosqs.ConsumerOptions{
		ConsumerOptions: broker.ConsumerOptions{Logger: log, Concurrency: 4, OnResult: onResult}, WaitTime: c.wait})
	if err != nil {
		return nil, nil, nil, err
	}
	h := func(ctx context.Context, m *broker.Message) error {
		// Validate, then do the real work (reproject, join, persist…);
		// claim m.Header(broker.HeaderIdempotencyKey) with replay.Once
		// first if that work has side effects.
		_, err := chk.CheckEventContext(ctx, m.Body)
		return err
	}
	return cons, h, func() { _ = store.Close(); _ = chk.Close() }, nil
}

func run(ctx context.Context, c config, out io.Writer, log *slog.Logger) error {
	if c.queueURL == "" || c.dlqARN == "" {
		return errors.New("-queue-url and -dlq-arn are required (or -demo)")
	}
	settings, err := printSettings(out, c, log)
	if err != nil {
		return err
	}
	client, err := newClient(ctx, c.endpoint)
	if err != nil {
		return err
	}
	if err := settings.Check(ctx, client, c.queueURL); err != nil {
		fmt.Fprintf(out, "WARNING: the source queue differs from these settings:\n%v\n", err)
	}
	cons, h, closeFn, err := newConsumer(ctx, client, c, log, nil)
	if err != nil {
		return err
	}
	defer closeFn()
	fmt.Fprintf(out, "consuming %s (visibility timeout %v)\n", c.queueURL, settings.VisibilityTimeout)
	return cons.Run(ctx, h)
}

// demoEvents are what producers sent: a valid parcel, the seed's bowtie, an
// EPSG:3857 payload in an EPSG:4326 pipeline, and a body that is not JSON.
func demoEvents() []string {
	return []string{
		`{"event_id":"evt-1","crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[12.49,41.89]}}`,
		`{"source_uri":"s3://my-bucket/test.geojson","crs":"EPSG:4326","processing_mode":"vector","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}}`,
		`{"event_id":"evt-3857","crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[1113194.9,6446275.8]}}`,
		`not json at all`,
	}
}

func demo(ctx context.Context, c config, out io.Writer, log *slog.Logger) error {
	if c.endpoint == "" {
		c.endpoint = "http://127.0.0.1:9324"
	}
	// local-aws-sqs holds a long poll until it has MaxNumberOfMessages
	// (SQS answers as soon as it has any), so the demo polls briefly.
	c.wait = time.Second
	client, err := newClient(ctx, c.endpoint)
	if err != nil {
		return err
	}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	dlq, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("vector-jobs-dlq-" + suffix)})
	if err != nil {
		return fmt.Errorf("creating the demo queues on %s (run scripts/local-sqs.sh): %w", c.endpoint, err)
	}
	attrs, err := client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return err
	}
	c.dlq, c.dlqARN = aws.ToString(dlq.QueueUrl), attrs.Attributes["QueueArn"]
	c.queueURL = "vector-jobs-" + suffix
	settings, err := printSettings(out, c, log)
	if err != nil {
		return err
	}
	src, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(c.queueURL), Attributes: settings.Attributes()})
	if err != nil {
		return err
	}
	c.queueURL = aws.ToString(src.QueueUrl)
	for _, e := range demoEvents() {
		if _, err := client.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: src.QueueUrl, MessageBody: aws.String(e)}); err != nil {
			return err
		}
	}
	// Consume until every demo event has an outcome.
	results := make(chan error, len(demoEvents()))
	cons, h, closeFn, err := newConsumer(ctx, client, c, log, func(_ *broker.Delivery, _ broker.Result, err error) { results <- err })
	if err != nil {
		return err
	}
	defer closeFn()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cons.Run(rctx, h) }()
	for range demoEvents() {
		select {
		case err := <-results:
			if err != nil {
				cancel()
				<-done
				return err
			}
		case err := <-done:
			cancel()
			return err
		}
	}
	cancel()
	<-done
	_ = cons.Close()
	store, err := geosqs.New(ctx, client, &geosqs.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 10 * time.Second}})
	if err != nil {
		return err
	}
	recs, err := store.Fetch(ctx, c.dlq, broker.Filter{}, 10)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "dead-letter queue: %d records\n", len(recs))
	for _, r := range recs {
		e := r.Envelope
		reason := e.ErrorMessage
		if e.GeometryError != nil {
			reason = e.GeometryError.Reason
		}
		fmt.Fprintf(out, "  %-40s %-18s %-20s receive #%d  %s\n", e.EventID, e.FailureClass, e.FailedStage, e.Source.DeliveryCount, reason)
		if err := store.Release(ctx, r); err != nil {
			return err
		}
	}
	return nil
}
