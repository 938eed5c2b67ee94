package postgis_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/broker/postgis/internal/pgtest"
)

// proxiedStore returns a migrated store whose pool reaches the server
// through proxy, with the given cancel grace.
func proxiedStore(t *testing.T, proxy *pgtest.Proxy, schema string, grace time.Duration) (*broker.Store, *pgxpool.Pool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(proxy.DSN())
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := postgis.New(context.Background(), pool, &postgis.Options{Schema: schema, Create: true,
		StoreOptions: broker.StoreOptions{CancelGrace: grace}})
	require.NoError(t, err)
	return s, pool
}

// TestPublishOutcomeIsCertain (issue 9, item 3): a Publish whose caller
// gives up while the INSERT is under way reports what the database did.
// The server commits at once; a proxy holds its answer back. pgx on the
// caller's context reports such a write failed although it committed, and
// the retry a redelivery makes then stores the event again; the store
// waits for the answer instead, or, past CancelGrace, says the outcome is
// unknown — never "failed" for a committed row.
func TestPublishOutcomeIsCertain(t *testing.T) {
	ctx := context.Background()
	proxy := pgtest.NewProxy(t)
	schema := pgtest.Schema(t)
	s, pool := proxiedStore(t, proxy, schema, 5*time.Second)
	admin := pgtest.NewPool(t, 2) // straight to the server, no delay
	rows := func(where string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM `+postgis.Table(s)+` WHERE `+where, args...).Scan(&n))
		return n
	}
	require.NoError(t, s.Publish(ctx, "warm", bowtie(t, "idem:warm")))
	const delay = 150 * time.Millisecond
	proxy.SetResponseDelay(delay)

	// The hazard, shown with pgx on the caller's context: reported failed,
	// yet committed.
	_, err := pool.Exec(ctx, `CREATE TABLE "`+schema+`".scratch (n int)`)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(delay/3, cancel)
	_, err = pool.Exec(cctx, `INSERT INTO "`+schema+`".scratch VALUES (1)`)
	require.Error(t, err, "pgx gives up when its context ends")
	var n int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".scratch`).Scan(&n))
	require.Equal(t, 1, n, "…but the row was committed")

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	midWrite := 0
	for i := range 10 {
		key := "idem:outcome:" + strconv.Itoa(i)
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Duration(rng.Int64N(int64(delay))), cancel)
		err := s.Publish(cctx, "outcome", bowtie(t, key))
		cancelled := cctx.Err() != nil
		cancel()
		stored := rows("idempotency_key = $1", key)
		if err != nil {
			require.ErrorIs(t, err, context.Canceled, "only a write that never started fails")
			require.Zero(t, stored, "a failed write stored nothing")
			continue
		}
		require.Equal(t, 1, stored, "a write reported done is stored")
		if cancelled {
			midWrite++
		}
	}
	require.Positive(t, midWrite, "some callers gave up while the INSERT was under way, and got its true outcome")

	// Past the grace, the caller hears that the outcome is unknown, never
	// "failed": the caller gives up once the server has committed the row
	// (seen from the admin pool) while the proxy still holds the answer,
	// so the grace runs out before the answer comes (a fixed cancel time
	// would race the INSERT itself on a loaded machine).
	short, _ := proxiedStore(t, proxy, schema, 30*time.Millisecond)
	proxy.SetResponseDelay(2 * time.Second)
	cctx, cancel = context.WithCancel(ctx)
	published := make(chan error, 1)
	go func() { published <- short.Publish(cctx, "outcome", bowtie(t, "idem:outcome:unknown")) }()
	require.Eventually(t, func() bool { return rows("idempotency_key = 'idem:outcome:unknown'") == 1 },
		20*time.Second, 5*time.Millisecond, "the write reaches the server and commits")
	cancel()
	err = <-published
	require.ErrorIs(t, err, broker.ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, rows("idempotency_key = 'idem:outcome:unknown'"), "the write went on and committed")

	// An Ack is settled the same way.
	proxy.SetResponseDelay(delay)
	recs, err := s.Fetch(ctx, "outcome", broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	cctx, cancel = context.WithCancel(ctx)
	time.AfterFunc(delay/3, cancel)
	err = s.Ack(cctx, recs[0])
	cancel()
	require.NoError(t, err, "the Ack was sent; its outcome is reported")
	require.Equal(t, 1, rows("id = $1 AND status = 'replayed'", mustID(t, recs[0])))
}
