package main

// The demo: pstest in process, the dead-letter policy applied, sample
// events through the consumer and the dead-letter topic read back. Run it
// with
//
//	go test -v -run TestDemo ./examples/pubsub-consumer
//
// It lives in a test file so that main.go, which a service copies, does
// not link a Pub/Sub test server.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/geodlq/geodlq/broker"
	geopubsub "github.com/geodlq/geodlq/broker/pubsub"
)

// demoOutput is where TestDemo prints its walkthrough: the terminal too
// with -v, and the test's log if it fails.
func demoOutput(t *testing.T) io.Writer {
	var buf bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() && !testing.Verbose() {
			t.Log(buf.String())
		}
	})
	if testing.Verbose() {
		return io.MultiWriter(&buf, os.Stdout)
	}
	return &buf
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
