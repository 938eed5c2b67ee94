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
