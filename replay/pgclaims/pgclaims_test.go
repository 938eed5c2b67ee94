package pgclaims_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/internal/faultnet"
	"github.com/geodlq/geodlq/internal/testenv"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/claimstest"
	"github.com/geodlq/geodlq/replay/pgclaims"
	"github.com/geodlq/geodlq/replay/pgclaims/internal/pgtest"
)

func TestConformance(t *testing.T) {
	pool := pgtest.NewPool(t, 8)
	schema := pgtest.Schema(t)
	_, err := pgclaims.New(context.Background(), pool, &pgclaims.Options{Schema: schema, Create: true})
	require.NoError(t, err)
	claimstest.RunConformanceTests(t, claimstest.Harness{
		// Each call is another handle on the same table, as another
		// process would have; the suite's keys are unique.
		New: func(ctx context.Context, _ *testing.T) (replay.Claims, error) {
			return pgclaims.New(ctx, pool, &pgclaims.Options{Schema: schema})
		},
	})
}

func newClaims(t *testing.T) *pgclaims.Claims {
	t.Helper()
	c, err := pgclaims.New(context.Background(), pgtest.NewPool(t, 8), &pgclaims.Options{Schema: pgtest.Schema(t), Create: true})
	require.NoError(t, err)
	return c
}

func TestNewValidatesArguments(t *testing.T) {
	ctx := context.Background()
	_, err := pgclaims.New(ctx, nil, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	pool := &pgxpool.Pool{} // never used: New does no I/O without Create
	for _, o := range []pgclaims.Options{{Schema: "Bad"}, {Table: "x-y"}, {Table: "t_0123456789012345678901234567890123456789"}} {
		_, err := pgclaims.New(ctx, pool, &o)
		require.ErrorIs(t, err, broker.ErrInvalidArgument, "%+v", o)
	}
	c, err := pgclaims.New(ctx, pool, nil)
	require.NoError(t, err)
	require.Equal(t, `"geodlq"."idempotency_claims"`, c.Table())
	var p *pgxpool.Pool
	require.True(t, c.As(&p))
	require.Same(t, pool, p)
	require.False(t, c.As(new(*int)))
}

// TestMigrate: versioned, idempotent, safe concurrently.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 8)
	schema := pgtest.Schema(t)
	c, err := pgclaims.New(ctx, pool, &pgclaims.Options{Schema: schema, Table: "claims"})
	require.NoError(t, err)
	v, err := c.VersionForTest(ctx)
	require.NoError(t, err)
	require.Zero(t, v)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = c.Migrate(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, c.Migrate(ctx))
	v, err = c.VersionForTest(ctx)
	require.NoError(t, err)
	require.Equal(t, len(pgclaims.Migrations()), v)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".claims_migrations`).Scan(&n))
	require.Equal(t, v, n)
}

// TestLeaseUsesDatabaseClock: ExpiresAt is the row's lease_until, which
// the database computed as its now() + ttl.
func TestLeaseUsesDatabaseClock(t *testing.T) {
	ctx := context.Background()
	c := newClaims(t)
	l, st, err := c.Claim(ctx, "idem:clock", 90*time.Second)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
	var until time.Time
	var left time.Duration
	require.NoError(t, c.PoolForTest().QueryRow(ctx, `SELECT lease_until, EXTRACT(EPOCH FROM lease_until - now()) * 1e9 FROM `+c.Table()+
		` WHERE key = convert_to('idem:clock', 'UTF8')`).Scan(&until, &left))
	require.True(t, until.Equal(l.ExpiresAt), "ExpiresAt %v is the database's lease_until %v", l.ExpiresAt, until)
	require.True(t, left > 80*time.Second && left <= 90*time.Second, "%v left", left)
	_, _, err = c.Claim(ctx, "idem:clock", 0)
	require.ErrorIs(t, err, broker.ErrInvalidArgument, "a non-positive ttl is refused")
}

// TestKeysAreBytes: keys that text columns cannot hold (NUL, invalid
// UTF-8) are claimed verbatim and distinctly.
func TestKeysAreBytes(t *testing.T) {
	ctx := context.Background()
	c := newClaims(t)
	keys := []string{"idem:\x00nul", "idem:\xff\xfe", "idem:", "idem:\x00", ""}
	for _, k := range keys {
		l, st, err := c.Claim(ctx, k, time.Minute)
		require.NoError(t, err, "%q", k)
		require.Equal(t, replay.StatusAcquired, st, "%q is its own key", k)
		require.Equal(t, k, l.Key)
		require.NoError(t, c.Complete(ctx, l))
	}
	for _, k := range keys {
		_, st, err := c.Claim(ctx, k, time.Minute)
		require.NoError(t, err)
		require.Equal(t, replay.StatusDone, st, "%q", k)
	}
}

// TestPurgeDone deletes completed keys only.
func TestPurgeDone(t *testing.T) {
	ctx := context.Background()
	c := newClaims(t)
	done, _, err := c.Claim(ctx, "idem:purge:done", time.Minute)
	require.NoError(t, err)
	require.NoError(t, c.Complete(ctx, done))
	_, st, err := c.Claim(ctx, "idem:purge:live", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
	n, err := c.PurgeDone(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, st, err = c.Claim(ctx, "idem:purge:done", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st, "a purged key runs again")
	_, st, err = c.Claim(ctx, "idem:purge:live", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusInProgress, st, "live claims are kept")
}

func TestCanceledContext(t *testing.T) {
	c := newClaims(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := c.Claim(ctx, "idem:canceled", time.Minute)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, c.Complete(ctx, replay.Lease{Key: "k", Token: "t"}), context.Canceled)
}

// faultyClaims returns a store over a pool whose connections lose, when
// armed, the answer to a request the server received, and whose lock
// waits time out after 100ms (lock_timeout: SQLSTATE 55P03); the schema
// is migrated through a plain pool.
func faultyClaims(t *testing.T) (*pgclaims.Claims, *faultnet.Loser, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	plain := pgtest.NewPool(t, 4)
	schema := pgtest.Schema(t)
	_, err := pgclaims.New(ctx, plain, &pgclaims.Options{Schema: schema, Create: true})
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(testenv.Postgres(t))
	require.NoError(t, err)
	loser := &faultnet.Loser{}
	cfg.ConnConfig.DialFunc = loser.DialContext
	// One message per statement, its text included, so that the armed
	// pattern marks the statement itself.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "100ms"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := pgclaims.New(ctx, pool, &pgclaims.Options{Schema: schema})
	require.NoError(t, err)
	return c, loser, plain
}

// TestCompleteOutcomeKnown: a Complete whose answer is lost after the
// server completed the key finds its own completion and succeeds — the
// side effect is recorded, not reported "done but not recorded" — while
// completing the same lease again is still refused.
func TestCompleteOutcomeKnown(t *testing.T) {
	ctx := context.Background()
	c, loser, _ := faultyClaims(t)
	l, st, err := c.Claim(ctx, "idem:lost-answer", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
	loser.Arm("done_at = now()")
	require.NoError(t, c.Complete(ctx, l), "the lost answer's completion is found")
	require.Equal(t, 1, loser.Fired(), "the answer was lost")
	_, st, err = c.Claim(ctx, "idem:lost-answer", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusDone, st)
	require.ErrorIs(t, c.Complete(ctx, l), broker.ErrLeaseLost, "a second Complete of the lease is refused")

	// A lost answer to a Claim: the retry reads the claim back as its own.
	loser.Arm("ON CONFLICT (key)")
	l2, st, err := c.Claim(ctx, "idem:lost-claim", time.Minute)
	require.NoError(t, err)
	require.Equal(t, 2, loser.Fired())
	require.Equal(t, replay.StatusAcquired, st, "the claim the lost answer took is the caller's")
	require.NoError(t, c.Complete(ctx, l2))

	// A lost answer to a Release: the lease is no longer held either way.
	l3, _, err := c.Claim(ctx, "idem:lost-release", time.Minute)
	require.NoError(t, err)
	loser.Arm("SET token = NULL, lease_until = NULL, updated_at")
	require.NoError(t, c.Release(ctx, l3))
	require.Equal(t, 3, loser.Fired())
	_, st, err = c.Claim(ctx, "idem:lost-release", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st, "released")
}

// TestConflictsAreRetried: a Complete and a Claim that wait on a row
// another transaction holds past lock_timeout (55P03) are retried until
// the row is free, instead of failing.
func TestConflictsAreRetried(t *testing.T) {
	ctx := context.Background()
	c, _, plain := faultyClaims(t)
	l, _, err := c.Claim(ctx, "idem:locked", time.Minute)
	require.NoError(t, err)
	tx, err := plain.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var one int
	require.NoError(t, tx.QueryRow(ctx, `SELECT 1 FROM `+c.Table()+` WHERE key = $1 FOR UPDATE`, []byte("idem:locked")).Scan(&one))
	done := make(chan error, 1)
	go func() { done <- c.Complete(ctx, l) }()
	time.Sleep(600 * time.Millisecond) // several lock timeouts
	select {
	case err := <-done:
		t.Fatalf("Complete returned while the row was locked: %v", err)
	default:
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done, "Complete retried its lock timeouts until the row was free")
	_, st, err := c.Claim(ctx, "idem:locked", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusDone, st)
}
