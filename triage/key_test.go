package triage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/triage"
)

// TestReenqueueKeepsTheKey: triage re-enqueues a repaired event with the
// envelope's key — the event's own, or a derived one marked derived — so
// that when the repaired event fails again its new envelope has the same
// key, derived or not as before.
func TestReenqueueKeepsTheKey(t *testing.T) {
	ctx := context.Background()
	b := memory.New(nil)
	builder, err := envelope.NewBuilder(nil)
	require.NoError(t, err)
	own := []byte(`{"idempotency_key":"tile-7@provider-a","source_uri":"s3://provider-a/tile-7.geojson","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}}`)
	want := map[string]bool{} // key -> derived
	for _, body := range [][]byte{own, bowtie} {
		env, enc, err := builder.Build(ctx, envelope.Input{Payload: body, Err: classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")),
			Source: &envelope.Source{System: "sqs", Topic: topic}})
		require.NoError(t, err)
		want[env.IdempotencyKey] = env.IdempotencyKeyDerived
		require.NoError(t, b.Publish(ctx, topic+".poison.dlt", &broker.Message{Body: enc, Headers: broker.Headers(env)}))
	}
	require.Len(t, want, 2)
	derived, ok := want["tile-7@provider-a"]
	require.True(t, ok, "the event's own key")
	require.False(t, derived)

	p, err := triage.New(&triage.Options{Source: b, Target: b, Repairers: repairers(), Check: func(context.Context, []byte) error { return nil }})
	require.NoError(t, err)
	rep, err := p.Run(ctx, topic+".poison.dlt", broker.Filter{}, false)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Replay.Counts["repaired"])

	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: b, Builder: builder, Policy: classify.Policy{MaxAttempts: 1}})
	require.NoError(t, err)
	re := memory.Messages(b, topic)
	require.Len(t, re, 2)
	for _, m := range re {
		key := m.Header(broker.HeaderIdempotencyKey)
		derived, ok := want[key]
		require.True(t, ok, "re-enqueued with the envelope's key %q", key)
		require.Equal(t, derived, m.Header(broker.HeaderIdempotencyKeyDerived) == "true", key)
		m.Source = &envelope.Source{System: "memory", Topic: topic}
		out, err := proc.Process(ctx, m, func(context.Context, *broker.Message) error {
			return classify.InvalidGeometry(errors.New("still bad"))
		})
		require.NoError(t, err)
		require.Equal(t, key, out.Envelope.IdempotencyKey)
		require.Equal(t, derived, out.Envelope.IdempotencyKeyDerived, key)
	}
}
