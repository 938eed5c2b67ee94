package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDemo(t *testing.T) {
	var out bytes.Buffer
	c := config{subscription: "geo-vector-sub", deadLetterTopic: "vector-dlq", maxDeliveryAttempts: 5, offloadDir: t.TempDir()}
	require.NoError(t, demo(context.Background(), c, io.MultiWriter(&out, demoOutput(t)), slog.New(slog.DiscardHandler)))
	s := out.String()
	require.Contains(t, s, "--max-delivery-attempts=5")
	require.Contains(t, s, "dead-letter topic vector-dlq: 3 records")
	for _, want := range []string{"invalid_geometry", "Self-intersection", "crs_mismatch", "schema_violation"} {
		require.Contains(t, s, want)
	}
}

func TestPolicyRefused(t *testing.T) {
	var out bytes.Buffer
	_, err := printPolicy(&out, config{project: "p", subscription: "s", deadLetterTopic: "d", maxDeliveryAttempts: 3})
	require.ErrorContains(t, err, "maxDeliveryAttempts 3")
	require.Error(t, run(context.Background(), config{}, &out, slog.New(slog.DiscardHandler)))
}
