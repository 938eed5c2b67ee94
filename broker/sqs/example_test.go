package sqs_test

import (
	"context"
	"fmt"
	"log"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/geodlq/geodlq/broker"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
	"github.com/geodlq/geodlq/classify"
)

// The settings a source queue of vector jobs needs, from the expected
// longest spatial operation (the seed's 12 s reprojection).
func ExampleRedriveConfig_Settings() {
	s, err := geosqs.RedriveConfig{
		SourceQueue:         "vector-jobs",
		DeadLetterTargetARN: "arn:aws:sqs:us-east-1:123456789012:vector-dlq",
		MaxReceiveCount:     4,
		LongestOperation:    12 * time.Second,
	}.Settings()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Attributes()["RedrivePolicy"])
	fmt.Println(s.Attributes()["VisibilityTimeout"])

	_, err = geosqs.RedriveConfig{SourceQueue: "vector-jobs.fifo", DeadLetterTargetARN: "arn:aws:sqs:us-east-1:123456789012:vector-dlq"}.Settings()
	fmt.Println(err)
	// Output:
	// {"deadLetterTargetArn":"arn:aws:sqs:us-east-1:123456789012:vector-dlq","maxReceiveCount":"4"}
	// 72
	// sqs: source "vector-jobs.fifo" is a FIFO queue but dead-letter queue "arn:aws:sqs:us-east-1:123456789012:vector-dlq" is a standard queue; a FIFO source needs a FIFO dead-letter queue (name ending in .fifo) so MessageGroupId and MessageDeduplicationId are preserved
}

// A consumer of a source queue that dead-letters into SQS queues.
func ExampleNewConsumer() {
	ctx := context.Background()
	var client *awssqs.Client // awssqs.NewFromConfig(cfg)
	if client == nil {
		return // needs AWS (or scripts/local-sqs.sh)
	}
	store, err := geosqs.New(ctx, client, nil) // 256 KiB messages, 30 s leases
	if err != nil {
		log.Fatal(err)
	}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{
		Publisher: store, // the builder keeps envelopes under store.MaxMessageBytes
		Policy:    classify.Policy{MaxAttempts: 4},
		Destination: func(_ *broker.Message, d classify.Route) string {
			return "vector-jobs-" + d.String() + "-dlq"
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	c, err := geosqs.NewConsumer(ctx, client, "https://sqs.us-east-1.amazonaws.com/123456789012/vector-jobs", proc, nil)
	if err != nil {
		log.Fatal(err)
	}
	_ = c.Run(ctx, func(ctx context.Context, m *broker.Message) error {
		return nil // check and persist m.Body
	})
	// Output:
}
