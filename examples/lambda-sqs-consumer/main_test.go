package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConfig(t *testing.T) {
	for _, env := range []map[string]string{{}, {"DLQ_URL": "q", "MAX_ATTEMPTS": "zero"}} {
		_, err := newHandler(context.Background(), func(k string) string { return env[k] }, slog.New(slog.DiscardHandler))
		require.Error(t, err)
	}
	t.Setenv("AWS_REGION", "us-east-1")
	env := map[string]string{"DLQ_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/vector-dlq", "MAX_ATTEMPTS": "3"}
	h, err := newHandler(context.Background(), func(k string) string { return env[k] }, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotNil(t, h)
}
