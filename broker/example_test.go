package broker_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// A consumer hands each message to a Processor and acknowledges the source
// only when the outcome says so.
func ExampleProcessor_Process() {
	ctx := context.Background()
	dlq := memory.New(nil) // your Kafka, SQS, Redis… adapter
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: dlq})
	if err != nil {
		panic(err)
	}

	msg := &broker.Message{
		Body:    []byte(`{"event_id":"evt-9","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`),
		Headers: map[string]string{broker.HeaderIdempotencyKey: "idem:v1:abc"},
		Source:  &envelope.Source{System: "kafka", Topic: "spatial.events"},
	}
	out, err := proc.Process(ctx, msg, func(ctx context.Context, m *broker.Message) error {
		// parse, reproject, validate, join, persist…
		return &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation,
			Err: errors.New("Self-intersection[0.5 0.5]")}
	})
	if err != nil {
		// The dead-letter write failed: do NOT ack; the broker redelivers.
		fmt.Println("leave unacked:", err)
		return
	}
	fmt.Println("ack:", out.Ack, "dead-lettered to", out.Destination)
	env, _ := envelope.Decode(memory.Messages(dlq, out.Destination)[0].Body)
	fmt.Println(env.FailureClass, env.FailedStage, env.IdempotencyKey, env.EventID)
	// Output:
	// ack: true dead-lettered to spatial.events.poison.dlt
	// invalid_geometry topology_validation idem:v1:abc evt-9
}

// The key a message is processed under: its header, else the event's own
// idempotency_key, else derived from the source and the body.
func ExampleIdempotencyKeyOf() {
	src := &envelope.Source{System: "kafka", Topic: "parcels"}
	for _, m := range []*broker.Message{
		{Body: []byte(`{"idempotency_key":"order-17"}`), Headers: map[string]string{broker.HeaderIdempotencyKey: "hdr-1"}, Source: src},
		{Body: []byte(`{"idempotency_key":"order-17"}`), Source: src},
		{Body: []byte(`{"id":3}`), Source: src},
	} {
		key, derived := broker.IdempotencyKeyOf(m, nil)
		fmt.Println(key[:min(len(key), 8)], derived)
	}
	// Output:
	// hdr-1 false
	// order-17 false
	// idem:v1: true
}
