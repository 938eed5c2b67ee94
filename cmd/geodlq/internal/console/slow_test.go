package console

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// connWatch counts a server's connections by state.
type connWatch struct {
	mu     sync.Mutex
	open   map[net.Conn]bool
	closed int
}

func (c *connWatch) hook(conn net.Conn, st http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch st {
	case http.StateNew:
		c.open[conn] = true
	case http.StateClosed, http.StateHijacked:
		if c.open[conn] {
			delete(c.open, conn)
			c.closed++
		}
	}
}

func (c *connWatch) counts() (open, closed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open), c.closed
}

// TestSlowClients: clients that never read a payload download, send a
// request body a byte at a time or never finish their headers are cut
// off by the server (their connections closed, the handlers done),
// while a client that reads gets the whole payload.
func TestSlowClients(t *testing.T) {
	const size = 4 << 20
	big := `{"event_id":"evt-big","source_uri":"s3://provider-a/big.geojson","crs":"EPSG:4326","properties":{"blob":"` +
		strings.Repeat("x", size) + `"},"geometry":` + bowtieAt(10, 10) + `}`
	e := newEnv(t, sqliteKind(), envOptions{events: []string{big}})
	srv, err := New(Options{Store: e.store, Blobs: e.blobs, Token: testToken, Poll: time.Hour,
		Timeouts: Timeouts{ReadHeader: 300 * time.Millisecond, Read: 300 * time.Millisecond, Write: 300 * time.Millisecond,
			Stall: 300 * time.Millisecond, Idle: 300 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hs := srv.HTTPServer(ctx)
	w := &connWatch{open: map[net.Conn]bool{}}
	hs.ConnState = w.hook
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	addr := ln.Addr().String()
	rec := e.recordOf("evt-big")
	download := recPath(rec) + "/payload?download=1"

	// A client that reads gets it all, past the stall bound in total.
	res, err := http.Get("http://" + addr + download)
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Greater(t, n, int64(size))
	require.Equal(t, fmt.Sprint(n), res.Header.Get("Content-Length"))

	dial := func() *net.TCPConn {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		tc := c.(*net.TCPConn)
		require.NoError(t, tc.SetReadBuffer(4096))
		t.Cleanup(func() { _ = tc.Close() })
		return tc
	}
	// Each download restores and verifies the payload first (seconds for
	// 4 MiB under -race): a few are enough to show them cut off.
	const downloads, each = 2, 20
	var conns []*net.TCPConn
	for range downloads { // never read the download
		c := dial()
		_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", download, addr)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for range each { // a body that never finishes
		c := dial()
		_, err := fmt.Fprintf(c, "POST /api/jobs HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"act", addr, testToken)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for range each { // headers that never finish
		c := dial()
		_, err := fmt.Fprintf(c, "GET /api/config HTTP/1.1\r\nHost: %s\r\nX-Slow: ", addr)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	var open, closed int
	for range 3000 { // at most a minute
		if open, closed = w.counts(); open == 0 && closed == 1+downloads+2*each {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, [2]int{0, 1 + downloads + 2*each}, [2]int{open, closed}, "the server closes every slow client's connection (open, closed)")

	// The clients see it: the slow senders' connections end (a bound for
	// the test only: one left open fails here rather than hanging). The
	// non-readers got less than the payload; the rest of what the server
	// had written before closing is the kernel's to deliver (or drop), at
	// its own pace: they read what arrives in a moment.
	for i, c := range conns {
		wait := 30 * time.Second
		if i < downloads {
			wait = time.Second
		}
		require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
		got, err := io.Copy(io.Discard, c)
		if i < downloads {
			require.Less(t, got, int64(size), "a client that never read got the whole payload")
			continue
		}
		require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "connection %d was left open", i)
	}
}
