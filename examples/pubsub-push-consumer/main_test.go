package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker/memory"
)

func push(t *testing.T, url, data string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"message": map[string]any{"data": base64.StdEncoding.EncodeToString([]byte(data)), "messageId": "m-1"},
		"subscription": "projects/p/subscriptions/s", "deliveryAttempt": 1})
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestPush: a valid event is answered 204 and nothing is dead-lettered; a
// bowtie is dead-lettered, then answered 204.
func TestPush(t *testing.T) {
	dlq := memory.New(nil)
	h, closeFn, err := newHandler(dlq, "vector-dlq", "", "", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer closeFn()
	srv := httptest.NewServer(h)
	defer srv.Close()
	require.Equal(t, http.StatusNoContent, push(t, srv.URL, `{"geometry":{"type":"Point","coordinates":[1,2]}}`))
	require.Zero(t, memory.Len(dlq, "vector-dlq"))
	require.Equal(t, http.StatusNoContent, push(t, srv.URL, `{"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}}`))
	require.Equal(t, 1, memory.Len(dlq, "vector-dlq"))
	require.Error(t, run(context.Background(), func(string) string { return "" }, slog.New(slog.DiscardHandler)), "PROJECT_ID and DLQ_TOPIC_ID are required")
}
