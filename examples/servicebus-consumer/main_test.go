package main

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// There is no Service Bus server here: the test checks the settings the
// consumer prints and that it refuses to start without a namespace.
func TestSettings(t *testing.T) {
	var out bytes.Buffer
	c := config{queue: "vector-jobs", maxDeliveryCount: 4, longestOp: 12 * time.Second, settingsOnly: true}
	require.NoError(t, run(context.Background(), c, "", &out, slog.New(slog.DiscardHandler)))
	require.Contains(t, out.String(), "--max-delivery-count 4 --lock-duration PT1M12S")
	c.settingsOnly = false
	require.ErrorContains(t, run(context.Background(), c, "", &out, slog.New(slog.DiscardHandler)), "SERVICEBUS_CONNECTION_STRING")
	c.maxDeliveryCount = -1
	require.Error(t, run(context.Background(), c, "", &out, slog.New(slog.DiscardHandler)))
}
