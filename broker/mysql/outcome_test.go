package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/mysql"
	"github.com/geodlq/geodlq/broker/mysql/internal/mysqltest"
)

// commitFault is what the proxy does to the first COMMIT it sees.
type commitFault int

const (
	// passCommit forwards everything.
	passCommit commitFault = iota
	// loseAnswer forwards the COMMIT, then cuts both connections before
	// the server's answer reaches the client: committed, answer lost.
	loseAnswer
	// swallowCommit cuts both connections instead of forwarding the
	// COMMIT: the server rolls the transaction back.
	swallowCommit
)

// faultProxy is a TCP proxy to the test server that parses the client's
// MySQL packets and injects one commit fault.
type faultProxy struct {
	ln    net.Listener
	to    string
	fault atomic.Int32
	fired atomic.Bool
	wg    sync.WaitGroup
}

func newFaultProxy(t *testing.T, to string) *faultProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &faultProxy{ln: ln, to: to}
	p.wg.Go(p.accept)
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.wg.Go(func() { _, _ = io.Copy(c, s); _ = c.Close() })
		p.wg.Go(func() { p.clientToServer(c, s) })
	}
}

// clientToServer copies the client's packets one by one (4-byte header:
// 3-byte length, sequence; COM_QUERY is 0x03) and acts on a COMMIT.
func (p *faultProxy) clientToServer(c, s net.Conn) {
	defer func() { _ = s.Close(); _ = c.Close() }()
	hdr := make([]byte, 4)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint32(append(hdr[:3:3], 0)))
		body := make([]byte, n)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		isCommit := n > 1 && body[0] == 0x03 && bytes.EqualFold(bytes.TrimSpace(body[1:]), []byte("COMMIT"))
		fault := commitFault(p.fault.Load())
		if isCommit && fault != passCommit && p.fired.CompareAndSwap(false, true) {
			if fault == loseAnswer {
				if _, err := s.Write(append(hdr, body...)); err != nil {
					return
				}
				// Let the server read and run it, then cut the client off
				// before the answer is copied (the client is not reading
				// from s: closing c ends the other copier's writes).
				_ = c.Close()
				time.Sleep(200 * time.Millisecond)
			}
			return
		}
		if _, err := s.Write(append(hdr, body...)); err != nil {
			return
		}
	}
}

// openVia opens the store's database through addr (a proxy), as a second
// pool on the same data.
func openVia(t *testing.T, cfg *gomysql.Config, addr string) *sql.DB {
	c := cfg.Clone()
	c.Addr = addr
	return mysqltest.Open(t, c)
}

func countRows(t *testing.T, db *sql.DB, where string, args ...any) int {
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM `"+mysql.DefaultTable+"` WHERE "+where, args...).Scan(&n))
	return n
}

// TestCommitAnswerLost: a COMMIT that reached the server but whose answer
// was lost is checked: Publish and Ack report success, and the row is
// there once.
func TestCommitAnswerLost(t *testing.T) {
	ctx := context.Background()
	cfg := mysqltest.Database(t)
	direct := mysqltest.Open(t, cfg)
	proxy := newFaultProxy(t, cfg.Addr)
	s, err := mysql.New(ctx, openVia(t, cfg, proxy.addr()), &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	m := brokertest.Message(t, brokertest.SampleInputs()[0])

	proxy.fault.Store(int32(loseAnswer))
	require.NoError(t, s.Publish(ctx, "d", m), "the commit happened: Publish says so")
	require.True(t, proxy.fired.Load(), "the fault was injected")
	require.Equal(t, 1, countRows(t, direct, "destination = 'd'"), "stored once")

	recs, err := s.Fetch(ctx, "d", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	proxy.fired.Store(false)
	require.NoError(t, s.Ack(ctx, recs[0]), "the ack's commit happened: Ack says so")
	require.True(t, proxy.fired.Load())
	require.Equal(t, 1, countRows(t, direct, "acked_at IS NOT NULL"))
	require.ErrorIs(t, s.Ack(ctx, recs[0]), broker.ErrLeaseLost, "and it is final")
}

// TestCommitNeverArrived: a COMMIT that never reached the server leaves
// nothing, and Publish says so with a definite error (not
// ErrOutcomeUnknown), so the retry stores the message once.
func TestCommitNeverArrived(t *testing.T) {
	ctx := context.Background()
	cfg := mysqltest.Database(t)
	direct := mysqltest.Open(t, cfg)
	proxy := newFaultProxy(t, cfg.Addr)
	s, err := mysql.New(ctx, openVia(t, cfg, proxy.addr()), &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	m := brokertest.Message(t, brokertest.SampleInputs()[0])

	proxy.fault.Store(int32(swallowCommit))
	err = s.Publish(ctx, "d", m)
	require.Error(t, err)
	require.True(t, proxy.fired.Load())
	require.NotErrorIs(t, err, broker.ErrOutcomeUnknown, "the check settled it: not written")
	require.Contains(t, err.Error(), "not committed")
	require.Zero(t, countRows(t, direct, "TRUE"), "nothing stored")
	require.NoError(t, s.Publish(ctx, "d", m), "the retry")
	require.Equal(t, 1, countRows(t, direct, "TRUE"), "stored once")
}

// TestStartedPublishOutlivesCancel: a Publish whose INSERT waits on a lock
// is not interrupted by its caller's context: within the grace the caller
// gets the true outcome (stored), and nothing is stored twice.
func TestStartedPublishOutlivesCancel(t *testing.T) {
	ctx := context.Background()
	cfg := mysqltest.Database(t)
	db := mysqltest.Open(t, cfg)
	s, err := mysql.New(ctx, db, &mysql.Options{Create: true, StoreOptions: broker.StoreOptions{CancelGrace: 5 * time.Second}})
	require.NoError(t, err)
	defer s.Close()
	locker := holdTableLock(t, cfg)

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Publish(cctx, "d", brokertest.Message(t, brokertest.SampleInputs()[0])) }()
	waitForLockWait(t, db)
	cancel()
	time.Sleep(300 * time.Millisecond)
	locker.release()
	select {
	case err := <-done:
		require.NoError(t, err, "the started write finished within the grace and reports its outcome")
	case <-time.After(10 * time.Second):
		t.Fatal("Publish did not return")
	}
	require.Equal(t, 1, countRows(t, db, "TRUE"))
}

// TestReadTimeoutCannotCommitLater: a driver readTimeout that cuts an
// INSERT waiting on a lock (the one interruption the portable store cannot
// prevent) reports a definite error, and the row does not appear once the
// lock is gone: the transaction never got its COMMIT. An autocommit
// INSERT would have been committed after the client gave up.
func TestReadTimeoutCannotCommitLater(t *testing.T) {
	ctx := context.Background()
	cfg := mysqltest.Database(t)
	db := mysqltest.Open(t, cfg)
	_, err := mysql.New(ctx, db, &mysql.Options{Create: true})
	require.NoError(t, err)
	short := cfg.Clone()
	short.ReadTimeout = 500 * time.Millisecond
	s, err := mysql.New(ctx, mysqltest.Open(t, short), nil)
	require.NoError(t, err)
	defer s.Close()
	locker := holdTableLock(t, cfg)

	start := time.Now()
	err = s.Publish(ctx, "d", brokertest.Message(t, brokertest.SampleInputs()[0]))
	require.Error(t, err, "the read timed out")
	require.Less(t, time.Since(start), 5*time.Second)
	require.NotErrorIs(t, err, broker.ErrOutcomeUnknown, "an INSERT cut before COMMIT has a certain outcome")
	locker.release()
	time.Sleep(500 * time.Millisecond)
	require.Zero(t, countRows(t, db, "TRUE"), "the abandoned transaction rolled back")
}

type tableLock struct {
	conn *sql.Conn
	once sync.Once
}

func (l *tableLock) release() {
	l.once.Do(func() {
		_, _ = l.conn.ExecContext(context.Background(), "UNLOCK TABLES")
		_ = l.conn.Close()
	})
}

// holdTableLock takes LOCK TABLES … WRITE on the store's table on a
// connection of its own, so that writers wait.
func holdTableLock(t *testing.T, cfg *gomysql.Config) *tableLock {
	db := mysqltest.Open(t, cfg)
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), "LOCK TABLES `"+mysql.DefaultTable+"` WRITE")
	require.NoError(t, err)
	l := &tableLock{conn: conn}
	t.Cleanup(l.release)
	return l
}

// waitForLockWait waits until a statement of this database waits for a
// table lock.
func waitForLockWait(t *testing.T, db *sql.DB) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND STATE LIKE '%lock%' AND INFO LIKE 'INSERT%'`).Scan(&n)
		require.NoError(t, err)
		if n > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the INSERT never waited for the lock")
}
