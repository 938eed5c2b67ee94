package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuickstart runs the demo end to end: it fails if any event is lost
// or any side effect runs more than once.
func TestQuickstart(t *testing.T) {
	require.NoError(t, run(context.Background(), t.TempDir(), slog.New(slog.DiscardHandler)))
}
