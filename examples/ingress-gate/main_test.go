package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/ingress"
)

// TestSelfTest runs the -selftest flow: good events are queued byte for
// byte with their keys, bad ones are answered 400 and 413 and never
// queued.
func TestSelfTest(t *testing.T) {
	queue := memory.New(&memory.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: 256 << 10}})
	h := newHandler(queue, &ingress.Options{MaxBytes: 256 << 10, MaxVertices: 100_000}, slog.New(slog.DiscardHandler))
	var out bytes.Buffer
	require.NoError(t, selfTest(context.Background(), &out, h, queue), out.String())
	require.Contains(t, out.String(), "-> 202 Accepted")
	require.Contains(t, out.String(), "-> 400 Bad Request  application/problem+json")
	require.Contains(t, out.String(), `"pointer": "/geometry/coordinates/0/0"`)
	require.Contains(t, out.String(), "-> 413 Request Entity Too Large")
	msgs := memory.Messages(queue, topic)
	require.Len(t, msgs, 2)
	require.Equal(t, samples()[0].body, string(msgs[0].Body))
	require.Equal(t, "selftest-1", msgs[0].Headers["idempotency-key"])
	require.Equal(t, samples()[1].body, string(msgs[1].Body))
}

// TestEnqueueKey: the gate enqueues an event with the producer's
// Idempotency-Key, else the event's own idempotency_key, else a key it
// derives and marks derived.
func TestEnqueueKey(t *testing.T) {
	queue := memory.New(nil)
	h := newHandler(queue, &ingress.Options{}, slog.New(slog.DiscardHandler))
	const own = `{"idempotency_key":"parcel-17@v3","source_uri":"s3://b/p.geojson","processing_mode":"vector","geometry":{"type":"Point","coordinates":[12.5,41.9]}}`
	const none = `{"source_uri":"s3://b/q.geojson","processing_mode":"vector","geometry":{"type":"Point","coordinates":[12.5,41.9]}}`
	for i, tc := range []struct {
		body, header, key string
		derived           bool
	}{
		{own, "client-1", "client-1", false},
		{own, "", "parcel-17@v3", false},
		{none, "", broker.DeriveIdempotencyKey(&broker.Message{Body: []byte(none)}), true},
	} {
		req := httptest.NewRequest(http.MethodPost, "/events", strings.NewReader(tc.body))
		if tc.header != "" {
			req.Header.Set("Idempotency-Key", tc.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		var ans struct {
			Key     string `json:"idempotency_key"`
			Derived bool   `json:"idempotency_key_derived"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &ans))
		require.Equal(t, tc.key, ans.Key)
		require.Equal(t, tc.derived, ans.Derived)
		m := memory.Messages(queue, topic)[i]
		require.Equal(t, tc.key, m.Header(broker.HeaderIdempotencyKey))
		require.Equal(t, tc.derived, m.Header(broker.HeaderIdempotencyKeyDerived) == "true")
	}
}
