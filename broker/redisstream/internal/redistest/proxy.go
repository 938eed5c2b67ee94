package redistest

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/testenv"
)

// FaultProxy forwards TCP connections to the test Redis and, once armed,
// injects one fault into the first request that carries a marker: it
// drops the reply and the connection after Redis ran the command (a
// connection lost between a write and its reply), or delays the reply (a
// server slower than the client's ReadTimeout). Point a client at Addr.
type FaultProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	marker []byte
	drop   bool
	delay  time.Duration
	hits   atomic.Int32
}

// NewFaultProxy starts a proxy to the test Redis (testenv.Redis); it stops
// when the test ends.
func NewFaultProxy(tb testing.TB) *FaultProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	p := &FaultProxy{ln: ln, target: testenv.Redis(tb)}
	var wg sync.WaitGroup
	tb.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(c) })
		}
	})
	return p
}

// Addr is the proxy's host:port.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// DropReply arms the proxy: the next request containing marker reaches
// Redis, and then its connection is closed without the reply.
func (p *FaultProxy) DropReply(marker string) { p.arm(marker, true, 0) }

// DelayReply arms the proxy: the reply to the next request containing
// marker is held back for d.
func (p *FaultProxy) DelayReply(marker string, d time.Duration) { p.arm(marker, false, d) }

// Hits returns how many faults were injected.
func (p *FaultProxy) Hits() int { return int(p.hits.Load()) }

func (p *FaultProxy) arm(marker string, drop bool, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.drop, p.delay = []byte(marker), drop, delay
}

func (p *FaultProxy) take(chunk []byte) (drop bool, delay time.Duration, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.marker == nil || !bytes.Contains(chunk, p.marker) {
		return false, 0, false
	}
	p.marker = nil
	p.hits.Add(1)
	return p.drop, p.delay, true
}

func (p *FaultProxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	var swallow atomic.Bool
	var delayNext atomic.Int64
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				if d := delayNext.Swap(0); d > 0 {
					time.Sleep(time.Duration(d))
				}
				if !swallow.Load() {
					_, _ = client.Write(buf[:n])
				}
			}
			if err != nil {
				_ = client.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			drop, delay, hit := p.take(buf[:n])
			if hit && drop {
				swallow.Store(true)
				_, _ = server.Write(buf[:n])
				time.Sleep(100 * time.Millisecond) // Redis runs the command; its reply is lost
				return
			}
			if hit {
				delayNext.Store(int64(delay))
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
