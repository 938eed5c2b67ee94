// Package faultnet wraps the network connections of a database client so
// that a test can lose the server's answer to one request after the
// server received it: the fault that makes a write's outcome unknown to
// its client (the connection breaks between COMMIT and its reply). It is
// for tests only.
package faultnet

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// ErrInjected is the error a connection whose answer was lost returns.
var ErrInjected = errors.New("faultnet: connection lost before the answer (injected)")

// Loser dials connections, and breaks the first one to send a request
// containing an armed pattern: its next read waits Settle (so that the
// server acts on the request) and then fails with a *net.OpError wrapping
// [ErrInjected], and the connection is closed. One arming breaks one
// connection once.
type Loser struct {
	// Settle is how long the broken read waits before failing. Default
	// 200ms.
	Settle time.Duration

	mu      sync.Mutex
	pattern []byte
	fired   int
}

// Arm makes the next request containing pattern lose its answer.
func (l *Loser) Arm(pattern string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pattern = []byte(pattern)
}

// Fired returns how many answers were lost.
func (l *Loser) Fired() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fired
}

// take reports whether a request p fires the armed fault, disarming it.
func (l *Loser) take(p []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pattern == nil || !bytes.Contains(p, l.pattern) {
		return false
	}
	l.pattern = nil
	l.fired++
	return true
}

// DialContext dials network and address like a net.Dialer, and wraps the
// connection.
func (l *Loser) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, l: l}, nil
}

type conn struct {
	net.Conn
	l      *Loser
	mu     sync.Mutex
	broken bool
}

func (c *conn) Write(p []byte) (int, error) {
	if c.l.take(p) {
		c.mu.Lock()
		c.broken = true
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	broken := c.broken
	c.mu.Unlock()
	if broken {
		settle := c.l.Settle
		if settle <= 0 {
			settle = 200 * time.Millisecond
		}
		time.Sleep(settle)
		_ = c.Conn.Close()
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: ErrInjected}
	}
	return c.Conn.Read(p)
}
