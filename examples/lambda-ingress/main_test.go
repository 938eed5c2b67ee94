package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConfig(t *testing.T) {
	_, err := newIngress(context.Background(), func(string) string { return "" }, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "PRIMARY_QUEUE_URL")
	env := map[string]string{"PRIMARY_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/vector-jobs", "AWS_REGION": "us-east-1"}
	t.Setenv("AWS_REGION", "us-east-1")
	g, err := newIngress(context.Background(), func(k string) string { return env[k] }, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotNil(t, g)
}
