package pgtest_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker/postgis/internal/pgtest"
)

// TestProxy: the proxy passes the protocol through, delays answers when
// told, and hangs new connections when stalled.
func TestProxy(t *testing.T) {
	ctx := context.Background()
	p := pgtest.NewProxy(t)
	conn, err := pgx.Connect(ctx, p.DSN())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var one int
	require.NoError(t, conn.QueryRow(ctx, `SELECT 1`).Scan(&one))
	require.Equal(t, 1, one)

	p.SetResponseDelay(200 * time.Millisecond)
	start := time.Now()
	require.NoError(t, conn.QueryRow(ctx, `SELECT 2`).Scan(&one))
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "the answer was held back")
	p.SetResponseDelay(0)

	p.Stall(true)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = pgx.Connect(cctx, p.DSN())
	require.Error(t, err, "a stalled proxy never answers a new connection")
	require.NoError(t, conn.QueryRow(ctx, `SELECT 3`).Scan(&one), "open connections keep working")
	require.Equal(t, 3, one)
}

// TestStalled: the stalled server accepts and reads, and never writes.
func TestStalled(t *testing.T) {
	dsn := pgtest.NewStalled(t)
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	c, err := net.Dial("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte{0, 0, 0, 8, 4, 210, 22, 47}) // an SSLRequest
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	n, err := c.Read(make([]byte, 1))
	require.Zero(t, n)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "no answer, not a closed connection")
}
