package rabbitmq_test

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// uniqueName returns a name no other run uses.
func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "." + hex.EncodeToString(b[:])
}

// dial returns a connection closed when the test ends.
func dial(t *testing.T, url string) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// cleanup deletes queues and an exchange a test declared.
func cleanup(t testing.TB, url, exchange string, queues ...string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer ch.Close()
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Errorf("cleanup: deleting queue %s: %v", q, err)
			return
		}
	}
	if exchange != "" {
		if err := ch.ExchangeDelete(exchange, false, false); err != nil {
			t.Errorf("cleanup: deleting exchange %s: %v", exchange, err)
		}
	}
}
