package jetstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// uniqueName returns a stream name no other run uses.
func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// connect returns a JetStream client on a new connection, closed when the
// test ends.
func connect(t *testing.T, url string) (*nats.Conn, natsjs.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	return nc, js
}

// deleteStream removes a test's stream (and its consumers).
func deleteStream(t testing.TB, url, name string) {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Errorf("cleanup: connecting: %v", err)
		return
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, natsjs.ErrStreamNotFound) {
		t.Errorf("cleanup: deleting stream %s: %v", name, err)
	}
}
