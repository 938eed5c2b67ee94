package pubsubpush_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker/pubsub/pubsubpush"
)

// TestSlowBodies: pushes whose body arrives slowly (a few bytes, then
// nothing) are answered 408 and their connections closed by the handler
// itself, on a server with no timeouts of its own (httptest's).
func TestSlowBodies(t *testing.T) {
	e := newEnv(t, true, pubsubpush.Options{BodyTimeout: 200 * time.Millisecond})
	addr := strings.TrimPrefix(e.srv.URL, "http://")
	const clients = 50
	conns := make([]net.Conn, 0, clients)
	for range clients {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"message\":", addr)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for i, c := range conns {
		// A bound for the test only: a connection the handler left open
		// fails here rather than hanging.
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
		b, err := io.ReadAll(c)
		require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "connection %d was left open", i)
		require.True(t, strings.HasPrefix(string(b), "HTTP/1.1 408 "), "connection %d: %q", i, b)
	}
}
