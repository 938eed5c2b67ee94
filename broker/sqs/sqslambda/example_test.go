package sqslambda_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/broker/sqs/sqslambda"
	"github.com/geodlq/geodlq/classify"
)

// A batch of three records: one processed, one dead-lettered on its first
// delivery, one transient failure reported for SQS to deliver again. In a
// function, pass h.HandleSQS to lambda.Start and an SQS store to the
// Processor.
func ExampleNew() {
	dlq := memory.New(nil) // geosqs.New(ctx, client, nil) in a function
	h, err := sqslambda.New(func(_ context.Context, m *broker.Message) error {
		switch string(m.Body) {
		case "bowtie":
			return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
		case "tile":
			return classify.Transient(errors.New("tile server: HTTP 503"))
		}
		return nil
	}, &sqslambda.Options{Processor: broker.ProcessorOptions{Publisher: dlq, Policy: classify.Policy{MaxAttempts: 3},
		Destination: func(*broker.Message, classify.Route) string { return "vector-dlq" }}})
	if err != nil {
		panic(err)
	}
	record := func(id, body string) events.SQSMessage {
		return events.SQSMessage{MessageId: id, Body: body, EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:vector-jobs",
			Attributes: map[string]string{"ApproximateReceiveCount": "1"}}
	}
	resp, err := h.HandleSQS(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		record("m-1", "parcel"), record("m-2", "bowtie"), record("m-3", "tile")}})
	fmt.Println(resp.BatchItemFailures, err)
	fmt.Println("dead-lettered:", memory.Len(dlq, "vector-dlq"))
	// Output:
	// [{m-3}] <nil>
	// dead-lettered: 1
}

// The gate behind API Gateway refuses an event without a geometry with an
// RFC 9457 problem, and enqueues a valid one.
func ExampleNewIngress() {
	q := memory.New(nil) // geosqs.New(ctx, client, nil) in a function
	g, err := sqslambda.NewIngress(q, "vector-jobs", nil)
	if err != nil {
		panic(err)
	}
	var req events.APIGatewayV2HTTPRequest
	req.RequestContext.HTTP.Method, req.RawPath = "POST", "/events"
	req.Body = `{"source_uri":"s3://b/k.geojson","processing_mode":"vector"}`
	resp, _ := g.HandleV2(context.Background(), req)
	fmt.Println(resp.StatusCode, resp.Headers["Content-Type"])
	req.Body = `{"source_uri":"s3://b/k.geojson","processing_mode":"vector","geometry":{"type":"Point","coordinates":[1,2]}}`
	resp, _ = g.HandleV2(context.Background(), req)
	fmt.Println(resp.StatusCode, memory.Len(q, "vector-jobs"))
	// Output:
	// 400 application/problem+json
	// 202 1
}
