package pgmigrate_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/pgmigrate"
	"github.com/geodlq/geodlq/pgmigrate/internal/pgtest"
)

// migration stands for an adapter's own exported Migration type.
type migration struct {
	Version int
	Name    string
	SQL     string
}

var steps = []migration{
	{Version: 1, Name: "table", SQL: `CREATE TABLE {t} (id bigint PRIMARY KEY)`},
	{Version: 2, Name: "column", SQL: `ALTER TABLE {t} ADD COLUMN note text`},
}

func target(schema string) pgmigrate.Target {
	t := pgx.Identifier{schema, "things"}.Sanitize()
	return pgmigrate.Target{Prefix: "test", Schema: schema, Table: "things",
		Render: strings.NewReplacer("{t}", t).Replace}
}

// TestMigrate: steps apply once each, in order, concurrently safe; a
// later package version applies only the new step; a table ahead of the
// package is refused.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 8)
	schema := pgtest.Schema(t)
	tg := target(schema)

	v, err := pgmigrate.Version(ctx, pool, tg)
	require.NoError(t, err)
	require.Zero(t, v, "no bookkeeping table yet")

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = pgmigrate.Migrate(ctx, pool, tg, steps[:1]) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	v, err = pgmigrate.Version(ctx, pool, tg)
	require.NoError(t, err)
	require.Equal(t, 1, v)

	require.NoError(t, pgmigrate.Migrate(ctx, pool, tg, steps))
	require.NoError(t, pgmigrate.Migrate(ctx, pool, tg, steps), "again: a no-op")
	v, err = pgmigrate.Version(ctx, pool, tg)
	require.NoError(t, err)
	require.Equal(t, 2, v)
	rows, err := pool.Query(ctx, `SELECT name FROM `+pgx.Identifier{schema, "things_migrations"}.Sanitize()+` ORDER BY version`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"table", "column"}, names)
	_, err = pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "things"}.Sanitize()+` (id, note) VALUES (1, 'x')`)
	require.NoError(t, err, "both steps ran, rendered")

	err = pgmigrate.Migrate(ctx, pool, tg, steps[:1])
	require.EqualError(t, err, `test: migrate: "`+schema+`"."things" is at version 2, newer than this package's 1`)
}

// TestMigratePrepareAndFailure: Prepare runs under the lock and its error
// is returned as is; a failing step rolls back the whole migration.
func TestMigratePrepareAndFailure(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t, 2)
	schema := pgtest.Schema(t)
	tg := target(schema)

	refused := errors.New("refused")
	tg.Prepare = func(context.Context, pgx.Tx) error { return refused }
	require.Same(t, refused, pgmigrate.Migrate(ctx, pool, tg, steps))

	tg.Prepare = nil
	bad := append(append([]migration(nil), steps...), migration{Version: 3, Name: "broken", SQL: `NOT SQL`})
	err := pgmigrate.Migrate(ctx, pool, tg, bad)
	require.ErrorContains(t, err, "test: migration 3 (broken): ")
	v, err := pgmigrate.Version(ctx, pool, tg)
	require.NoError(t, err)
	require.Zero(t, v, "one transaction: nothing recorded")
}

func TestCheckIdent(t *testing.T) {
	require.NoError(t, pgmigrate.CheckIdent("x", "table", "dead_letters", 40))
	require.NoError(t, pgmigrate.CheckIdent("x", "table", "_t9", 40))
	for _, bad := range []string{"", "9t", "Dead", "a-b", `a"b`, strings.Repeat("a", 41)} {
		require.EqualError(t, pgmigrate.CheckIdent("x", "table", bad, 40),
			"x: table "+strconv.Quote(bad)+" must match [a-z_][a-z0-9_]* and be at most 40 bytes")
	}
}
