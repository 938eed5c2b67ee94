// Command pubsub-consumer is a Google Cloud Pub/Sub consumer with geodlq's
// dead-letter path, ready to copy: it validates each GeoJSON event of a
// source subscription with GEOS and PROJ, retries transient failures in
// place, publishes what cannot be processed to a dead-letter topic as a
// dlq.v1 envelope (large geometries offloaded to a blob directory), and
// acknowledges a message only after that publish succeeded — it nacks it
// otherwise, so Pub/Sub redelivers it and, after maxDeliveryAttempts,
// forwards it to the subscription's dead-letter topic.
//
// It first prints the dead-letter policy it expects and checks the
// subscription against it (a dead-letter topic without a subscription is
// reported: messages forwarded there would be lost).
//
//	go run ./examples/pubsub-consumer -project geo-prod -subscription geo-vector-sub -dead-letter-topic vector-dlq
//	go run ./examples/pubsub-consumer -demo   # against pstest, in process
//
// Everything it uses is public API.
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

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/geodlq/geodlq/broker"
	geopubsub "github.com/geodlq/geodlq/broker/pubsub"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
)

type config struct {
	project, subscription, deadLetterTopic string
	maxDeliveryAttempts                    int
	offloadDir                             string
	demo                                   bool
}

func main() {
	var c config
	flag.StringVar(&c.project, "project", "", "Google Cloud project")
	flag.StringVar(&c.subscription, "subscription", "geo-vector-sub", "source subscription")
	flag.StringVar(&c.deadLetterTopic, "dead-letter-topic", "vector-dlq", "dead-letter topic (geodlq's envelopes, and the subscription's dead-letter policy)")
	flag.IntVar(&c.maxDeliveryAttempts, "max-delivery-attempts", 5, "dead-letter policy maxDeliveryAttempts (5-100)")
	flag.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries")
	flag.BoolVar(&c.demo, "demo", false, "run against pstest in process with sample events, print the dead-letter topic, and exit")
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
	proc, err := broker.NewProcessor(broker.ProcessorOptions{
		Publisher:   store, // 10 MB messages; the builder keeps envelopes under it
		Builder:     builder,
		Destination: func(*broker.Message, classify.Route) string { return c.deadLetterTopic },
		Policy:      classify.Policy{MaxAttempts: 3, BaseDelay: 100 * time.Millisecond},
		Logger:      log,
	})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cons, err := geopubsub.NewConsumer(ctx, client, c.subscription, proc, &geopubsub.ConsumerOptions{ConsumerOptions: broker.ConsumerOptions{Logger: log}})
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
		return errors.New("-project is required (or -demo)")
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

func demoEvents() []string {
	return []string{
		`{"event_id":"evt-1","crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[12.49,41.89]}}`,
		`{"source_uri":"s3://my-bucket/test.geojson","crs":"EPSG:4326","processing_mode":"vector","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}}`,
		`{"event_id":"evt-3857","crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[1113194.9,6446275.8]}}`,
		`not json at all`,
	}
}

func demo(ctx context.Context, c config, out io.Writer, log *slog.Logger) error {
	srv := pstest.NewServer()
	defer srv.Close()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	c.project = "geo-demo"
	client, err := pubsub.NewClient(ctx, c.project, option.WithGRPCConn(conn))
	if err != nil {
		return err
	}
	defer client.Close()
	dl, err := printPolicy(out, c)
	if err != nil {
		return err
	}
	// The infrastructure: source topic and subscription, dead-letter topic
	// with the subscription geodlq's store reads, and the policy.
	name := func(kind, id string) string { return "projects/" + c.project + "/" + kind + "/" + id }
	for _, t := range []string{"vector-jobs", c.deadLetterTopic} {
		if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: name("topics", t)}); err != nil {
			return err
		}
	}
	for sub, t := range map[string]string{c.subscription: "vector-jobs", geopubsub.Subscription(c.deadLetterTopic): c.deadLetterTopic} {
		if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: name("subscriptions", sub), Topic: name("topics", t)}); err != nil {
			return err
		}
	}
	if err := dl.Apply(ctx, client, c.subscription); err != nil {
		return err
	}
	if _, err := geopubsub.CheckDeadLetterPolicy(ctx, client, c.subscription); err != nil {
		return err
	}
	pub := client.Publisher("vector-jobs")
	for _, e := range demoEvents() {
		if _, err := pub.Publish(ctx, &pubsub.Message{Data: []byte(e)}).Get(ctx); err != nil {
			return err
		}
	}
	pub.Stop()
	cons, store, h, closeFn, err := newConsumer(ctx, client, c, log)
	if err != nil {
		return err
	}
	defer closeFn()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cons.Run(rctx, h) }()
	var recs []*broker.Record
	for deadline := time.Now().Add(30 * time.Second); len(recs) < 3 && time.Now().Before(deadline); {
		got, err := store.Fetch(ctx, c.deadLetterTopic, broker.Filter{}, 10)
		if err != nil {
			cancel()
			return err
		}
		recs = append(recs, got...)
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintf(out, "dead-letter topic %s: %d records\n", c.deadLetterTopic, len(recs))
	for _, r := range recs {
		e := r.Envelope
		reason := e.ErrorMessage
		if e.GeometryError != nil {
			reason = e.GeometryError.Reason
		}
		fmt.Fprintf(out, "  %-40s %-18s %-20s %s\n", e.EventID, e.FailureClass, e.FailedStage, reason)
	}
	return nil
}
