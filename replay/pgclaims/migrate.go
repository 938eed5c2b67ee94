package pgclaims

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Migration is one step of the store's schema, applied once, in order, in
// the same transaction as its row in the migrations table.
type Migration struct {
	// Version numbers the step, from 1, without gaps.
	Version int
	// Name says what the step does.
	Name string
	// SQL is the step's statements, with {t} for the quoted,
	// schema-qualified table and {n} for the bare table name.
	SQL string
}

// Migrations returns the store's migrations, oldest first.
func Migrations() []Migration { return append([]Migration(nil), migrations...) }

var migrations = []Migration{{
	Version: 1,
	Name:    "claims table",
	SQL: `
CREATE TABLE {t} (
	key         bytea       PRIMARY KEY,
	token       text,
	lease_until timestamptz,
	done_at     timestamptz,
	claims      integer     NOT NULL DEFAULT 0,
	updated_at  timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT {n}_lease_check CHECK ((token IS NULL) = (lease_until IS NULL)),
	CONSTRAINT {n}_done_check CHECK (done_at IS NULL OR token IS NULL)
);
COMMENT ON TABLE {t} IS 'geodlq idempotency claims (replay/pgclaims): one row per idempotency key';
CREATE INDEX {n}_done ON {t} (done_at) WHERE done_at IS NOT NULL;
`,
}}

// migrationLockKey serialises every geodlq PostgreSQL migration in a
// database (the same key broker/postgis uses).
const migrationLockKey = 0x67656f646c71 // "geodlq"

// Migrate creates the schema and table, records each applied step of
// [Migrations] in {table}_migrations, all in one transaction under an
// advisory lock. It is idempotent and safe to run concurrently.
func (c *Claims) Migrate(ctx context.Context) error {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgclaims: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLockKey)); err != nil {
		return fmt.Errorf("pgclaims: migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{c.schema}.Sanitize()); err != nil {
		return fmt.Errorf("pgclaims: migrate: %w", err)
	}
	mt := pgx.Identifier{c.schema, c.name + "_migrations"}.Sanitize()
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+mt+` (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("pgclaims: migrate: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM `+mt).Scan(&current); err != nil {
		return fmt.Errorf("pgclaims: migrate: %w", err)
	}
	if current > len(migrations) {
		return fmt.Errorf("pgclaims: migrate: %s is at version %d, newer than this package's %d", c.table, current, len(migrations))
	}
	r := strings.NewReplacer("{t}", c.table, "{n}", c.name)
	for _, m := range migrations[current:] {
		if _, err := tx.Exec(ctx, r.Replace(m.SQL)); err != nil {
			return fmt.Errorf("pgclaims: migration %d (%s): %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+mt+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return fmt.Errorf("pgclaims: migration %d: %w", m.Version, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgclaims: migrate: commit: %w", err)
	}
	return nil
}

// Version returns the schema version the database is at (0 before the
// first [Claims.Migrate]).
func (c *Claims) Version(ctx context.Context) (int, error) {
	mt := pgx.Identifier{c.schema, c.name + "_migrations"}.Sanitize()
	var exists bool
	if err := c.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, mt).Scan(&exists); err != nil {
		return 0, fmt.Errorf("pgclaims: version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := c.pool.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM `+mt).Scan(&v); err != nil {
		return 0, fmt.Errorf("pgclaims: version: %w", err)
	}
	return v, nil
}
