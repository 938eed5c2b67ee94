package triage_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/triage"
)

// Triage a poison destination: oversized events go to quarantine with an
// alert; schema violations stay for an upstream fix.
func Example() {
	ctx := context.Background()
	dlq := memory.New(nil)
	builder, _ := envelope.NewBuilder(nil)
	for _, ev := range []struct {
		body string
		err  error
	}{
		{`{"source_uri":"s3://provider-b/continent.geojson","geometry":{"type":"MultiPoint","coordinates":[[0,0]]}}`,
			classify.ResourceExhausted(errors.New("more than 5000000 positions"))},
		{`{"source_uri":"s3://provider-c/x.geojson","geometry":`, classify.SchemaViolation(errors.New("unexpected end of JSON input"))},
	} {
		_, body, _ := builder.Build(ctx, envelope.Input{Payload: []byte(ev.body), Err: ev.err, Attempts: 1,
			IdempotencyKey: "idem:v1:" + ev.body[15:40], Source: &envelope.Source{System: "sqs", Topic: "vector-jobs"}})
		_ = dlq.Publish(ctx, "vector-jobs.poison.dlt", &broker.Message{Body: body})
	}

	pager := triage.AlertFunc(func(_ context.Context, a triage.Alert) error {
		fmt.Println("ALERT", a.Class, a.SourceURI, "->", a.Quarantine)
		return nil
	})
	p, _ := triage.New(&triage.Options{Source: dlq, Target: dlq, Alerter: pager})
	rep, _ := p.Run(ctx, "vector-jobs.poison.dlt", broker.Filter{}, false)
	fmt.Println("quarantined:", rep.Quarantined, "left for a human:", memory.Len(dlq, "vector-jobs.poison.dlt"))
	// Output:
	// ALERT resource_exhausted s3://provider-b/continent.geojson -> vector-jobs.quarantine.dlt
	// quarantined: 1 left for a human: 1
}
