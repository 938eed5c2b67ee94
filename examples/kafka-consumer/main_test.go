package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemo runs the demo: an in-process Kafka, the sample events
// through the consumer, and the dead-letter topics read back.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	c := config{topic: "spatial.events", group: "spatial-app", offloadDir: t.TempDir()}
	require.NoError(t, demo(context.Background(), c, io.MultiWriter(&out, demoOutput(t)), slog.New(slog.DiscardHandler)))
	s := out.String()
	require.Equal(t, 2, strings.Count(s, ": processed"))
	require.Contains(t, s, "spatial.events.poison.dlt: 4 records")
	require.Contains(t, s, "spatial.events.retry.dlt: 0 records")
	for _, want := range []string{"invalid_geometry", "crs_mismatch", "schema_violation", "geometry offloaded"} {
		require.Contains(t, s, want)
	}
	require.NotContains(t, s, "NOT acknowledged")
}
