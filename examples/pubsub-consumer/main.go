// Command pubsub-consumer is a Google Cloud Pub/Sub consumer with geodlq's
// dead-letter path, ready to copy: it validates each GeoJSON event of a
// source subscription (GEOS's verdicts, in pure Go), retries transient
// failures in place, publishes what cannot be processed to a dead-letter
// topic as a dlq.v1 envelope (large geometries offloaded to a blob
// directory), and
// acknowledges a message only after that publish succeeded — it nacks it
// otherwise, so Pub/Sub redelivers it and, after maxDeliveryAttempts,
// forwards it to the subscription's dead-letter topic.
//
// It first prints the dead-letter policy it expects and checks the
// subscription against it (a dead-letter topic without a subscription is
// reported: messages forwarded there would be lost).
//
//	go run ./examples/pubsub-consumer -project geo-prod -subscription geo-vector-sub -dead-letter-topic vector-dlq
//
// Everything it uses is public API, and this file builds on its own in
// your module. (Its walkthrough against pstest, in process, is a test:
// go test -v -run TestDemo ./examples/pubsub-consumer.)
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
	"runtime"
	"syscall"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/geodlq/geodlq/broker"
	geopubsub "github.com/geodlq/geodlq/broker/pubsub"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
)

type config struct {
	concurrency                            int // events processed at once
	project, subscription, deadLetterTopic string
	maxDeliveryAttempts                    int
	offloadDir                             string
}

func main() {
	var c config
	flag.StringVar(&c.project, "project", "", "Google Cloud project")
	flag.StringVar(&c.subscription, "subscription", "geo-vector-sub", "source subscription")
	flag.StringVar(&c.deadLetterTopic, "dead-letter-topic", "vector-dlq", "dead-letter topic (geodlq's envelopes, and the subscription's dead-letter policy)")
	flag.IntVar(&c.maxDeliveryAttempts, "max-delivery-attempts", 5, "dead-letter policy maxDeliveryAttempts (5-100)")
	flag.IntVar(&c.concurrency, "concurrency", runtime.GOMAXPROCS(0), "messages processed at once (Pub/Sub delivers without order unless ordering keys are on)")
	flag.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Stdout, log); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "pubsub-consumer:", err)
		os.Exit(1)
	}
}

// printPolicy prints the dead-letter policy the consumer expects.
func printPolicy(out io.Writer, c config) (geopubsub.DeadLetterConfig, error) {
	dl := geopubsub.DeadLetterConfig{DeadLetterTopic: c.deadLetterTopic, MaxDeliveryAttempts: c.maxDeliveryAttempts}
	cmd, err := dl.Gcloud(c.project, c.subscription)
	if err != nil {
		return dl, err
	}
	fmt.Fprintf(out, "Source subscription dead-letter policy:\n%s\n", cmd)
	return dl, nil
}

func newConsumer(ctx context.Context, client *pubsub.Client, c config, log *slog.Logger) (*broker.Consumer, *broker.Store, broker.Handler, func(), error) {
	store, err := geopubsub.New(ctx, client, &geopubsub.Options{StoreOptions: broker.StoreOptions{Logger: log}})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	chk, err := spatial.NewChecker(nil) // expects EPSG:4326
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if err := os.MkdirAll(c.offloadDir, 0o755); err != nil {
		return nil, nil, nil, nil, err
	}
	blobs, err := offload.NewDirStore(c.offloadDir)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	off, err := offload.New(blobs, nil)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off, ResolveEPSG: chk.ResolveEPSG})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{
		Publisher:   store, // 10 MB messages; the builder keeps envelopes under it
		Builder:     builder,
		Destination: func(*broker.Message, classify.Route) string { return c.deadLetterTopic },
		Policy:      classify.Policy{MaxAttempts: 3, BaseDelay: 100 * time.Millisecond},
		Logger:      log,
	})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cons, err := geopubsub.NewConsumer(ctx, client, c.subscription, proc, &geopubsub.ConsumerOptions{ConsumerOptions: broker.ConsumerOptions{Logger: log, Concurrency: c.concurrency}})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	h := func(ctx context.Context, m *broker.Message) error {
		// Validate, then do the real work; claim
		// m.Header(broker.HeaderIdempotencyKey) with replay.Once first if
		// it has side effects.
		_, err := chk.CheckEventContext(ctx, m.Body)
		return err
	}
	return cons, store, h, func() { _ = cons.Close(); _ = store.Close(); _ = chk.Close() }, nil
}

func run(ctx context.Context, c config, out io.Writer, log *slog.Logger) error {
	if c.project == "" {
		return errors.New("-project is required")
	}
	if _, err := printPolicy(out, c); err != nil {
		return err
	}
	client, err := pubsub.NewClient(ctx, c.project)
	if err != nil {
		return err
	}
	defer client.Close()
	if _, err := geopubsub.CheckDeadLetterPolicy(ctx, client, c.subscription); err != nil {
		fmt.Fprintf(out, "WARNING: %v\n", err)
	}
	cons, _, h, closeFn, err := newConsumer(ctx, client, c, log)
	if err != nil {
		return err
	}
	defer closeFn()
	return cons.Run(ctx, h)
}
