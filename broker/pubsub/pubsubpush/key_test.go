package pubsubpush_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/pubsub/pubsubpush"
	"github.com/geodlq/geodlq/envelope"
)

// TestPushEventKey: a pushed event's envelope carries the idempotency-key
// attribute when there is one, else the event's own idempotency_key, not
// derived; without either, a key derived from the subscription and the
// body, marked derived.
func TestPushEventKey(t *testing.T) {
	e := newEnv(t, true, pubsubpush.Options{})
	const own = `{"event_id":"evt-k","idempotency_key":"order-17","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`
	push := func(id, data string, attrs map[string]string) []byte {
		b, _ := json.Marshal(map[string]any{
			"message": map[string]any{"data": base64.StdEncoding.EncodeToString([]byte(data)), "messageId": id,
				"publishTime": "2026-12-03T10:00:00.123Z", "attributes": attrs},
			"subscription": sub, "deliveryAttempt": 1})
		return b
	}
	for _, tc := range []struct {
		name    string
		data    string
		attrs   map[string]string
		key     string
		derived bool
	}{
		{"attribute wins", own, map[string]string{broker.HeaderIdempotencyKey: "attr-1"}, "attr-1", false},
		{"the event's own key", own, nil, "order-17", false},
		{"no key", bowtie, nil, broker.DeriveIdempotencyKey(&broker.Message{Body: []byte(bowtie),
			Source: &envelope.Source{System: "pubsub", Topic: sub}}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, http.StatusNoContent, e.post(push("m-"+tc.name, tc.data, tc.attrs), nil))
			dl := e.deadLetters()
			require.Len(t, dl, 1)
			require.Equal(t, tc.key, dl[0].Envelope.IdempotencyKey)
			require.Equal(t, tc.derived, dl[0].Envelope.IdempotencyKeyDerived)
		})
	}
}
