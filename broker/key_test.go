package broker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// TestIdempotencyKeyRule checks the order every path takes a message's key
// in — header, then the event's own key, then derived — for the
// Processor's default and for a user's IdempotencyKey function, and that
// the handler, the Result and the envelope agree.
func TestIdempotencyKeyRule(t *testing.T) {
	const own = `{"idempotency_key":"order-17","geometry":null}`
	const nested = `{"properties":{"idempotency_key":"p-3"},"geometry":null}`
	const none = `{"geometry":null}`
	src := source("spatial.events")
	derive := func(body string) string {
		return broker.DeriveIdempotencyKey(&broker.Message{Body: []byte(body), Source: src})
	}
	nestedBuilder, err := envelope.NewBuilder(&envelope.BuilderOptions{IdempotencyKeyPath: "/properties/idempotency_key"})
	require.NoError(t, err)
	for _, tc := range []struct {
		name        string
		body        string
		headers     map[string]string
		builder     *envelope.Builder
		fn          func(*broker.Message) string
		key         string
		derived     bool
		markHandler bool
	}{
		{name: "event's own key", body: own, key: "order-17"},
		{name: "header wins", body: own, headers: map[string]string{broker.HeaderIdempotencyKey: "hdr-1"}, key: "hdr-1"},
		{name: "no key: derived", body: none, key: derive(none), derived: true},
		{name: "not JSON: derived", body: `idempotency_key=x`, key: derive(`idempotency_key=x`), derived: true},
		{name: "replayed derived key", body: none, headers: map[string]string{
			broker.HeaderIdempotencyKey: "idem:v1:earlier", broker.HeaderIdempotencyKeyDerived: "true"}, key: "idem:v1:earlier", derived: true},
		{name: "stale mark without a key", body: own, headers: map[string]string{broker.HeaderIdempotencyKeyDerived: "true"}, key: "order-17"},
		{name: "configured path", body: nested, builder: nestedBuilder, key: "p-3"},
		{name: "configured path, default member ignored", body: own, builder: nestedBuilder, key: derive(own), derived: true},
		{name: "user function", body: own, fn: func(*broker.Message) string { return "mine" }, key: "mine"},
		{name: "user function declines", body: own, fn: func(*broker.Message) string { return "" }, key: "order-17"},
		{name: "user function returns the derived header", body: none, headers: map[string]string{
			broker.HeaderIdempotencyKey: "idem:v1:earlier", broker.HeaderIdempotencyKeyDerived: "true"},
			fn: func(m *broker.Message) string { return m.Header(broker.HeaderIdempotencyKey) }, key: "idem:v1:earlier", derived: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dlq := memory.New(nil)
			p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: dlq, Builder: tc.builder, IdempotencyKey: tc.fn,
				Policy: classify.Policy{MaxAttempts: 1}})
			require.NoError(t, err)
			m := &broker.Message{Body: []byte(tc.body), Headers: tc.headers, Source: src}
			before := len(m.Headers)
			var saw, sawMark string
			out, err := p.Process(context.Background(), m, func(_ context.Context, hm *broker.Message) error {
				saw, sawMark = hm.Header(broker.HeaderIdempotencyKey), hm.Header(broker.HeaderIdempotencyKeyDerived)
				return classify.InvalidGeometry(errors.New("bad"))
			})
			require.NoError(t, err)
			require.Len(t, m.Headers, before, "the caller's headers are not changed")
			require.Equal(t, tc.key, saw)
			require.Equal(t, tc.derived, sawMark == "true")
			require.Equal(t, tc.key, out.IdempotencyKey)
			require.Equal(t, tc.derived, out.IdempotencyKeyDerived)
			require.Equal(t, tc.key, out.Envelope.IdempotencyKey)
			require.Equal(t, tc.derived, out.Envelope.IdempotencyKeyDerived)
			k, d := broker.IdempotencyKeyOf(m, tc.builder)
			if tc.fn == nil {
				require.Equal(t, tc.key, k)
				require.Equal(t, tc.derived, d)
			}
		})
	}
}
