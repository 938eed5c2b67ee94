package postgis

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/internal/pgmigrate"
)

// Migration is one step of the store's schema, applied once, in order, in
// the same transaction as its row in the migrations table.
type Migration struct {
	// Version numbers the step, from 1, without gaps.
	Version int
	// Name says what the step does.
	Name string
	// SQL is the step's statements, with {s} for the quoted schema, {t}
	// for the quoted, schema-qualified table and {n} for the bare table
	// name (used to name indexes and functions).
	SQL string
}

// Migrations returns the store's migrations, oldest first. Options.Migrate
// (and broker.OpenStore with Create) applies the ones a database lacks;
// they are listed here so that they can be reviewed, or applied by another
// migration tool (record each applied version in {table}_migrations, as
// Options.Migrate does).
func Migrations() []Migration { return append([]Migration(nil), migrations...) }

var migrations = []Migration{{
	Version: 1,
	Name:    "dead-letter table, triage indexes, GiST indexes, safe-parse helpers",
	SQL: `
CREATE TABLE {t} (
	id                bigserial   PRIMARY KEY,
	destination       text        NOT NULL,
	msg_key           bytea,
	headers           jsonb       NOT NULL DEFAULT '{}',
	binary_headers    jsonb,
	body              bytea       NOT NULL,
	is_envelope       boolean     NOT NULL DEFAULT false,
	envelope          jsonb,
	event_id          text,
	idempotency_key   text,
	failure_class     text,
	failed_stage      text,
	epsg              bigint,
	reason_kind       text,
	reason            text,
	source_topic      text,
	dead_lettered_at  timestamptz,
	dead_lettered_ns  smallint,
	published_at      timestamptz NOT NULL DEFAULT now(),
	status            text        NOT NULL DEFAULT 'pending',
	lease_token       text,
	lease_until       timestamptz,
	deliveries        integer     NOT NULL DEFAULT 0,
	replayed_at       timestamptz,
	duplicates        integer     NOT NULL DEFAULT 0,
	last_duplicate_at timestamptz,
	redead_lettered   boolean     NOT NULL DEFAULT false,
	geom              geometry,
	geom_status       text        NOT NULL DEFAULT 'none',
	geom_error        text,
	offload_uri       text,
	location          geometry(Point),
	CONSTRAINT {n}_status_check CHECK (status IN ('pending', 'leased', 'replayed')),
	CONSTRAINT {n}_replayed_check CHECK ((status = 'replayed') = (replayed_at IS NOT NULL)),
	CONSTRAINT {n}_lease_check CHECK ((status = 'leased') = (lease_token IS NOT NULL AND lease_until IS NOT NULL)),
	CONSTRAINT {n}_geom_status_check CHECK (geom_status IN ('none', 'parsed', 'unparseable', 'not_text', 'missing', 'offloaded'))
) WITH (fillfactor = 80, toast_tuple_target = 128);

COMMENT ON TABLE {t} IS 'geodlq dead-letter store (broker/postgis): one row per dead-lettered message';
COMMENT ON COLUMN {t}.body IS 'the message body, byte for byte: for a dlq.v1 envelope, its exact encoding';
COMMENT ON COLUMN {t}.envelope IS 'the envelope as jsonb, for queries; NULL when the body is not an envelope or jsonb refuses it (\u0000)';
COMMENT ON COLUMN {t}.dead_lettered_ns IS 'nanoseconds of dead_lettered_at beyond its microsecond, so time filters are exact';
COMMENT ON COLUMN {t}.redead_lettered IS 'a write with the same idempotency key arrived while the row was leased';
COMMENT ON COLUMN {t}.geom IS 'the inline geometry as PostGIS parses it (invalid ones included); NULL when offloaded, missing or unparseable';
COMMENT ON COLUMN {t}.location IS 'geometry_error.location, in the geometry''s SRID';

-- The indexes cover the records not yet replayed (replayed_at IS NULL),
-- the working set: leasing a record changes no indexed column, so its
-- update is HOT, and acknowledging one adds entries to the primary key and
-- {n}_replayed only. Replayed rows are history until Purge.
--
-- At most one un-replayed record per destination and idempotency key: a
-- second write while one is pending or leased is a no-op.
CREATE UNIQUE INDEX {n}_idem_key ON {t} (destination, idempotency_key) WHERE replayed_at IS NULL;
-- Fetch: oldest un-replayed records of a destination.
CREATE INDEX {n}_ready ON {t} (destination, id) WHERE replayed_at IS NULL;
CREATE INDEX {n}_class ON {t} (destination, failure_class, failed_stage) WHERE replayed_at IS NULL;
CREATE INDEX {n}_epsg ON {t} (destination, epsg) WHERE replayed_at IS NULL;
CREATE INDEX {n}_time ON {t} (destination, dead_lettered_at, dead_lettered_ns) WHERE replayed_at IS NULL;
CREATE INDEX {n}_event ON {t} (event_id) WHERE replayed_at IS NULL;
CREATE INDEX {n}_geom ON {t} USING gist (geom) WHERE replayed_at IS NULL;
-- broker.Filter.BBox compares the location's raw coordinates whatever the
-- SRID.
CREATE INDEX {n}_location_xy ON {t} USING gist (ST_SetSRID(location, 0)) WHERE replayed_at IS NULL;
-- Purge.
CREATE INDEX {n}_replayed ON {t} (destination, replayed_at) WHERE replayed_at IS NOT NULL;

-- ST_GeomFromGeoJSON raises on what it cannot parse; a dead-letter write
-- must not fail for that, so the error is caught and recorded.
CREATE FUNCTION {s}.{n}_parse_geojson(doc text, srid integer, OUT geom geometry, OUT err text)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
	IF doc IS NULL THEN
		RETURN;
	END IF;
	BEGIN
		geom := ST_SetSRID(ST_GeomFromGeoJSON(doc), srid);
	EXCEPTION WHEN OTHERS THEN
		geom := NULL;
		err := SQLERRM;
	END;
END
$fn$;

-- jsonb refuses some valid JSON (\u0000); the body keeps the bytes anyway.
CREATE FUNCTION {s}.{n}_to_jsonb(doc text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
	IF doc IS NULL THEN
		RETURN NULL;
	END IF;
	RETURN doc::jsonb;
EXCEPTION WHEN OTHERS THEN
	RETURN NULL;
END
$fn$;
`,
}, {
	Version: 2,
	Name:    "indexes for purge's blob reference check",
	SQL: `
-- Purge reports the blobs no remaining record references: it looks each
-- up among every row, replayed ones included.
CREATE INDEX {n}_offload_uri ON {t} (offload_uri) WHERE offload_uri IS NOT NULL;
CREATE INDEX {n}_raw_offload_uri ON {t} ((envelope->>'raw_payload_offload_uri'))
	WHERE (envelope->>'raw_payload_offload_uri') IS NOT NULL;
-- Envelopes jsonb cannot hold (a \u0000, invalid UTF-8) are read from
-- their bodies.
CREATE INDEX {n}_opaque ON {t} (id) WHERE is_envelope AND envelope IS NULL;
`,
}}

// minVersion is the oldest schema this package's queries work on: version
// 2 only adds indexes.
const minVersion = 1

func (d *driver) render(q string) string {
	return strings.NewReplacer("{s}", d.schemaQ, "{t}", d.table, "{n}", d.name).Replace(q)
}

func (d *driver) migrationTarget() pgmigrate.Target {
	return pgmigrate.Target{Prefix: "postgis", Schema: d.schema, Table: d.name, Render: d.render, Prepare: createExtension}
}

// createExtension creates the postgis extension when the database lacks
// it (which needs the privilege to).
func createExtension(ctx context.Context, tx pgx.Tx) error {
	var have bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'postgis')`).Scan(&have); err != nil {
		return fmt.Errorf("postgis: migrate: %w", err)
	}
	if !have {
		if _, err := tx.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS postgis`); err != nil {
			return fmt.Errorf("postgis: migrate: the postgis extension is not installed and could not be created (run CREATE EXTENSION postgis as a privileged user): %w", err)
		}
	}
	return nil
}

// migrate brings the store's schema up to date: it creates the PostGIS
// extension if the database lacks it (which needs the privilege to), the
// schema, the {table}_migrations bookkeeping table, and applies every
// [Migrations] step not yet recorded there, all in one transaction under
// an advisory lock. It is idempotent and safe to run concurrently from
// several processes.
func (d *driver) migrate(ctx context.Context) error {
	return pgmigrate.Migrate(ctx, d.pool, d.migrationTarget(), migrations)
}

// version returns the schema version the database is at (0 before the
// first migration).
func (d *driver) version(ctx context.Context) (int, error) {
	return pgmigrate.Version(ctx, d.pool, d.migrationTarget())
}

// check reports, without writing anything, whether the store's table is
// there at a schema version this package works with: an error wrapping
// [broker.ErrNoStore] when the table or its migrations table is missing.
func (d *driver) check(ctx context.Context) error {
	var table, book bool
	if err := d.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
		d.table, pgx.Identifier{d.schema, d.name + "_migrations"}.Sanitize()).Scan(&table, &book); err != nil {
		return fmt.Errorf("postgis: looking for the table %s: %w", d.table, err)
	}
	if !table || !book {
		return fmt.Errorf("postgis: no geodlq table %s in this database (create it with Options.Migrate or OpenOptions.Create): %w", d.table, broker.ErrNoStore)
	}
	v, err := d.version(ctx)
	if err != nil {
		return err
	}
	switch {
	case v < minVersion:
		return fmt.Errorf("postgis: %s has no recorded schema version: %w", d.table, broker.ErrNoStore)
	case v > len(migrations):
		return fmt.Errorf("postgis: %s is at schema version %d, newer than this package's %d", d.table, v, len(migrations))
	}
	return nil
}
