package main

import (
	"bytes"
	"context"
	"log/slog"
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
