package pgclaims

import (
	"context"
	"strings"

	"github.com/geodlq/geodlq/pgmigrate"
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
}, {
	Version: 2,
	Name:    "token that completed a done key",
	SQL: `
ALTER TABLE {t} ADD COLUMN done_token text;
COMMENT ON COLUMN {t}.done_token IS 'the token whose Complete made the key done: a Complete whose answer was lost recognises its own';
`,
}}

func (c *Claims) migrationTarget() pgmigrate.Target {
	r := strings.NewReplacer("{t}", c.table, "{n}", c.name)
	return pgmigrate.Target{Prefix: "pgclaims", Schema: c.schema, Table: c.name, Render: r.Replace}
}

// Migrate creates the schema and table, records each applied step of
// [Migrations] in {table}_migrations, all in one transaction under an
// advisory lock (the one broker/postgis takes too). It is idempotent and
// safe to run concurrently.
func (c *Claims) Migrate(ctx context.Context) error {
	return pgmigrate.Migrate(ctx, c.pool, c.migrationTarget(), migrations)
}

// version returns the schema version the database is at (0 before the
// first [Claims.Migrate]).
func (c *Claims) version(ctx context.Context) (int, error) {
	return pgmigrate.Version(ctx, c.pool, c.migrationTarget())
}
