package mysqlclaims_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/mysql/internal/mysqltest"
	"github.com/geodlq/geodlq/broker/mysql/mysqlclaims"
	"github.com/geodlq/geodlq/internal/faultnet"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/claimstest"
)

func TestConformance(t *testing.T) {
	cfg := mysqltest.Database(t)
	_, err := mysqlclaims.New(context.Background(), mysqltest.Open(t, cfg), &mysqlclaims.Options{Create: true})
	require.NoError(t, err)
	claimstest.RunConformanceTests(t, claimstest.Harness{
		// Each call is another pool on the same table, as another process
		// would have; the suite's keys are unique.
		New: func(ctx context.Context, t *testing.T) (replay.Claims, error) {
			return mysqlclaims.New(ctx, mysqltest.Open(t, cfg), nil)
		},
	})
}

func TestNew(t *testing.T) {
	ctx := context.Background()
	_, err := mysqlclaims.New(ctx, nil, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	db := mysqltest.NewDB(t)
	for _, o := range []mysqlclaims.Options{{Table: "Bad"}, {Table: "x-y"}, {Table: "t_0123456789012345678901234567890123456789012345678"}} {
		_, err := mysqlclaims.New(ctx, db, &o)
		require.ErrorIs(t, err, broker.ErrInvalidArgument, "%+v", o)
	}
	_, err = mysqlclaims.New(ctx, db, nil)
	require.ErrorIs(t, err, broker.ErrNoStore, "without Create a database without the table is not a claims store")
	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()`).Scan(&n))
	require.Zero(t, n, "and nothing was created")

	// Concurrent creation: one table, one recorded migration.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { _, errs[i] = mysqlclaims.New(ctx, db, &mysqlclaims.Options{Create: true}) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+mysqlclaims.DefaultTable+"_migrations`").Scan(&n))
	require.Equal(t, 1, n)
	c, err := mysqlclaims.New(ctx, db, nil)
	require.NoError(t, err, "an existing table opens without Create")
	var got *sql.DB
	require.True(t, c.As(&got))
	require.Same(t, db, got)
	require.False(t, c.As(new(int)))
}

func TestPurgeDone(t *testing.T) {
	ctx := context.Background()
	c, err := mysqlclaims.New(ctx, mysqltest.NewDB(t), &mysqlclaims.Options{Create: true, Table: "claims"})
	require.NoError(t, err)
	l, st, err := c.Claim(ctx, "idem:v1:purge", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
	require.NoError(t, c.Complete(ctx, l))
	_, st, err = c.Claim(ctx, "idem:v1:live", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)

	n, err := c.PurgeDone(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "nothing completed before an hour ago")
	n, err = c.PurgeDone(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the done key, not the live claim")
	_, st, err = c.Claim(ctx, "idem:v1:purge", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st, "a purged key runs again")
	_, st, err = c.Claim(ctx, "idem:v1:live", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusInProgress, st)

	_, _, err = c.Claim(ctx, "k", 0)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	require.ErrorIs(t, c.Complete(ctx, replay.Lease{Key: "k", Token: "not hex"}), broker.ErrLeaseLost)
}

// faultyClaims returns a store whose connections lose, when armed, the
// answer to a request the server received, and whose lock waits time out
// after a second (innodb_lock_wait_timeout: error 1205), with a plain
// pool on the same database.
func faultyClaims(t *testing.T) (*mysqlclaims.Claims, *faultnet.Loser, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	cfg := mysqltest.Database(t)
	plain := mysqltest.Open(t, cfg)
	_, err := mysqlclaims.New(ctx, plain, &mysqlclaims.Options{Create: true})
	require.NoError(t, err)
	loser := &faultnet.Loser{}
	fc := cfg.Clone()
	fc.DialFunc = loser.DialContext
	fc.InterpolateParams = true // one request per statement, its text included
	if fc.Params == nil {
		fc.Params = map[string]string{}
	}
	fc.Params["innodb_lock_wait_timeout"] = "1"
	c, err := mysqlclaims.New(ctx, mysqltest.Open(t, fc), nil)
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
	loser.Arm("SET done_at = UTC_TIMESTAMP(6)")
	require.NoError(t, c.Complete(ctx, l), "the lost answer's completion is found")
	require.Equal(t, 1, loser.Fired(), "the answer was lost")
	_, st, err = c.Claim(ctx, "idem:lost-answer", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusDone, st)
	require.ErrorIs(t, c.Complete(ctx, l), broker.ErrLeaseLost, "a second Complete of the lease is refused")

	// A lost answer to a Claim's COMMIT: the retry reads the claim back
	// as its own.
	loser.Arm("COMMIT")
	l2, st, err := c.Claim(ctx, "idem:lost-claim", time.Minute)
	require.NoError(t, err)
	require.Equal(t, 2, loser.Fired())
	require.Equal(t, replay.StatusAcquired, st, "the claim the lost answer took is the caller's")
	require.NoError(t, c.Complete(ctx, l2))

	// A lost answer to a Release: the lease is no longer held either way.
	l3, _, err := c.Claim(ctx, "idem:lost-release", time.Minute)
	require.NoError(t, err)
	loser.Arm("SET token = NULL, lease_until = NULL")
	require.NoError(t, c.Release(ctx, l3))
	require.Equal(t, 3, loser.Fired())
	_, st, err = c.Claim(ctx, "idem:lost-release", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st, "released")
}

// TestConflictsAreRetried: a Complete that waits on a row another
// transaction holds past innodb_lock_wait_timeout (1205) is retried until
// the row is free, instead of failing.
func TestConflictsAreRetried(t *testing.T) {
	ctx := context.Background()
	c, _, plain := faultyClaims(t)
	l, _, err := c.Claim(ctx, "idem:locked", time.Minute)
	require.NoError(t, err)
	tx, err := plain.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var one int
	require.NoError(t, tx.QueryRowContext(ctx, "SELECT 1 FROM `"+mysqlclaims.DefaultTable+"` WHERE claim_key = ? FOR UPDATE", []byte("idem:locked")).Scan(&one))
	done := make(chan error, 1)
	go func() { done <- c.Complete(ctx, l) }()
	time.Sleep(2500 * time.Millisecond) // two lock-wait timeouts
	select {
	case err := <-done:
		t.Fatalf("Complete returned while the row was locked: %v", err)
	default:
	}
	require.NoError(t, tx.Commit())
	require.NoError(t, <-done, "Complete retried its lock-wait timeouts until the row was free")
	_, st, err := c.Claim(ctx, "idem:locked", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusDone, st)
}
