package main

// The demo: queues created on local-aws-sqs (scripts/local-sqs.sh) with
// the settings the redrive helper derives, sample events through the
// consumer, and the dead-letter queue read back. Run it with
//
//	go test -v -run TestDemo ./examples/sqs-consumer
//
// It lives in a test file so that main.go stays what a service copies.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/geodlq/geodlq/broker"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
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
