package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/testenv"
)

// Proxy is a TCP proxy in front of the test server, for the faults a
// network and a server can inject: answers that arrive late
// ([Proxy.SetResponseDelay]), and a server that accepts connections and
// never answers ([Proxy.Stall]). It stops when the test ends.
type Proxy struct {
	ln     net.Listener
	target string
	dsn    string

	mu     sync.Mutex
	delay  time.Duration
	stall  bool
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

// NewProxy starts a proxy on 127.0.0.1 to the test database's server
// (testenv.Postgres: skipped, or failed under GEODLQ_REQUIRE_SERVICES,
// when the server is unreachable).
func NewProxy(tb testing.TB) *Proxy {
	tb.Helper()
	dsn := testenv.Postgres(tb)
	u, err := url.Parse(dsn)
	require.NoError(tb, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	p := &Proxy{ln: ln, target: u.Host}
	u.Host = ln.Addr().String()
	p.dsn = u.String()
	p.wg.Go(p.serve)
	tb.Cleanup(p.close)
	return p
}

// NewStalled returns the DSN of a server that accepts TCP connections and
// never sends a byte: a hung or overloaded server, or a port some other
// program listens on.
func NewStalled(tb testing.TB) string {
	tb.Helper()
	p := NewProxy(tb)
	p.Stall(true)
	return p.DSN()
}

// DSN returns the test database's DSN with the proxy as its host.
func (p *Proxy) DSN() string { return p.dsn }

// SetResponseDelay holds every chunk the server sends, on every
// connection, for d before passing it on (0: none). The server has done
// the work; only its answer is late.
func (p *Proxy) SetResponseDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Stall makes connections accepted from now on hang: the proxy reads what
// the client sends and never answers. Connections already open keep
// working.
func (p *Proxy) Stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stall = on
}

func (p *Proxy) responseDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// track records c, to be closed with the proxy (at once if it is closed).
func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return
	}
	p.conns = append(p.conns, c)
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		p.mu.Lock()
		stall := p.stall
		p.mu.Unlock()
		if stall {
			p.wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
			continue
		}
		p.wg.Go(func() { p.pipe(c) })
	}
}

func (p *Proxy) pipe(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	p.track(server)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(server, client)
		_ = server.Close()
	})
	wg.Go(func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				if d := p.responseDelay(); d > 0 {
					time.Sleep(d)
				}
				if _, werr := client.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = client.Close()
	})
	wg.Wait()
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
