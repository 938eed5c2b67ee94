package warehouse

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
)

// TestIdempotencyKeyColumns dead-letters the keyed corpus through a
// Processor and exports it: idempotency_key is each event's own key, and
// idempotency_key_derived is false for those, true for events that came
// without one.
func TestIdempotencyKeyColumns(t *testing.T) {
	ctx := context.Background()
	s := memory.New(nil)
	p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: s, Policy: classify.Policy{MaxAttempts: 1}})
	require.NoError(t, err)
	want := map[string]string{} // payload SHA-256 -> the event's own key
	for _, ev := range corpus.Keyed() {
		out, err := p.Process(ctx, &broker.Message{Body: ev.Item.Payload, Source: &envelope.Source{System: "test", Topic: "t"}},
			func(context.Context, *broker.Message) error { return classify.InvalidGeometry(errors.New("bad")) })
		require.NoError(t, err)
		want[out.Envelope.PayloadSHA256] = ev.Key
	}
	var buf bytes.Buffer
	res, err := Export(ctx, s, &buf, nil)
	require.NoError(t, err)
	require.EqualValues(t, len(want), res.Rows)
	rows, err := parquet.Read[Row](bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	require.NoError(t, err)
	derived := 0
	for _, r := range rows {
		key, ok := want[r.PayloadSHA256]
		require.True(t, ok)
		if key != "" {
			require.Equal(t, key, r.IdempotencyKey)
			require.False(t, r.IdempotencyKeyDerived, key)
		} else {
			derived++
			require.True(t, r.IdempotencyKeyDerived, r.IdempotencyKey)
		}
	}
	require.Positive(t, derived)
}
