// Package pgmigrate applies the versioned schema migrations of geodlq's
// PostgreSQL adapters (broker/postgis, replay/pgclaims).
//
// A table's steps are numbered from 1 without gaps. [Migrate] applies the
// ones a database lacks, each once and in order, all in one transaction
// under an advisory lock ([LockKey]), and records each applied step in the
// bookkeeping table {table}_migrations of the same schema. It is
// idempotent and safe to run concurrently from several processes.
// [Version] reads how far a table has got.
//
// Every error message starts with the calling adapter's prefix, so the
// adapters' errors read as they always have.
//
// It is a module of its own because both adapters' modules need it at run
// time; it is public only for them, and its API follows theirs (it may
// change in any release before v1, docs/api.md).
package pgmigrate

import (
	"context"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LockKey is the pg_advisory_xact_lock key that serialises every geodlq
// PostgreSQL migration in a database, so that concurrent Migrate calls,
// and concurrent CREATE EXTENSION, cannot race.
const LockKey = 0x67656f646c71 // "geodlq"

// Step is one migration: the fields of the adapters' own exported
// Migration types.
type Step struct {
	// Version numbers the step, from 1, without gaps.
	Version int
	// Name says what the step does; it is recorded with the version.
	Name string
	// SQL is the step's statements, before [Target.Render].
	SQL string
}

// Target names the table whose schema is migrated, and how.
type Target struct {
	// Prefix starts every error message, e.g. "postgis".
	Prefix string
	// Schema is the bare name of the schema holding the table; Migrate
	// creates it when missing.
	Schema string
	// Table is the bare table name. The bookkeeping table is Table +
	// "_migrations", in Schema.
	Table string
	// Render turns a step's SQL into the statements executed (it
	// substitutes the adapter's placeholders). Nil executes SQL as is.
	Render func(sql string) string
	// Prepare, when set, runs in the migration's transaction once the
	// lock is held, before the schema is created (broker/postgis creates
	// the postgis extension there). Its error is returned as it is.
	Prepare func(ctx context.Context, tx pgx.Tx) error
}

func (t Target) bookkeeping() string {
	return pgx.Identifier{t.Schema, t.Table + "_migrations"}.Sanitize()
}

// Migrate applies the steps t's table has not recorded yet, in one
// transaction under the advisory lock [LockKey]: it creates the schema
// and the bookkeeping table when missing, runs each missing step and
// records it. A table already at a version beyond len(steps) is an error.
// M is the adapter's own migration type, whose fields are [Step]'s.
func Migrate[M ~struct {
	Version int
	Name    string
	SQL     string
}](ctx context.Context, pool *pgxpool.Pool, t Target, steps []M) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%s: migrate: %w", t.Prefix, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(LockKey)); err != nil {
		return fmt.Errorf("%s: migrate: lock: %w", t.Prefix, err)
	}
	if t.Prepare != nil {
		if err := t.Prepare(ctx, tx); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{t.Schema}.Sanitize()); err != nil {
		return fmt.Errorf("%s: migrate: %w", t.Prefix, err)
	}
	mt := t.bookkeeping()
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+mt+` (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("%s: migrate: %w", t.Prefix, err)
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM `+mt).Scan(&current); err != nil {
		return fmt.Errorf("%s: migrate: %w", t.Prefix, err)
	}
	if current > len(steps) {
		return fmt.Errorf("%s: migrate: %s is at version %d, newer than this package's %d",
			t.Prefix, pgx.Identifier{t.Schema, t.Table}.Sanitize(), current, len(steps))
	}
	for _, s := range steps[current:] {
		m := Step(s)
		sql := m.SQL
		if t.Render != nil {
			sql = t.Render(sql)
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: migration %d (%s): %w", t.Prefix, m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+mt+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return fmt.Errorf("%s: migration %d: %w", t.Prefix, m.Version, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%s: migrate: commit: %w", t.Prefix, err)
	}
	return nil
}

// Version returns the version t's table is at: the highest step recorded
// in its bookkeeping table, 0 when there is none (before the first
// [Migrate]).
func Version(ctx context.Context, pool *pgxpool.Pool, t Target) (int, error) {
	mt := t.bookkeeping()
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, mt).Scan(&exists); err != nil {
		return 0, fmt.Errorf("%s: version: %w", t.Prefix, err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM `+mt).Scan(&v); err != nil {
		return 0, fmt.Errorf("%s: version: %w", t.Prefix, err)
	}
	return v, nil
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// CheckIdent validates a schema or table name (what says which): lower-case
// letters, digits and underscores, not starting with a digit, at most max
// bytes. The error starts with prefix.
func CheckIdent(prefix, what, s string, max int) error {
	if !identRE.MatchString(s) || len(s) > max {
		return fmt.Errorf("%s: %s %q must match [a-z_][a-z0-9_]* and be at most %d bytes", prefix, what, s, max)
	}
	return nil
}
