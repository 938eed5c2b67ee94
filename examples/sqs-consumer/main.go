// Command sqs-consumer is an Amazon SQS consumer with geodlq's dead-letter
// path, ready to copy: it validates each GeoJSON event of a source queue
// (GEOS's verdicts, in pure Go), retries transient failures in place,
// sends what cannot be processed to a dead-letter queue as a dlq.v1
// envelope (large geometries offloaded to a blob directory so it fits
// SQS's 256 KiB), and
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
//
// Credentials and region come from the usual AWS sources (environment,
// shared config, instance role). Everything it uses is public API, and
// this file builds on its own in your module. (Its walkthrough on
// local-aws-sqs, scripts/local-sqs.sh, is a test: go test -v -run TestDemo
// ./examples/sqs-consumer.)
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
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

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
	flag.StringVar(&c.endpoint, "endpoint", os.Getenv("GEODLQ_TEST_SQS"), "SQS endpoint URL (default: AWS)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Stdout, log); err != nil && !errors.Is(err, context.Canceled) {
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
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{
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
		return errors.New("-queue-url and -dlq-arn are required")
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
