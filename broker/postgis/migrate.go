package postgis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/pgmigrate"
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

// Migrations returns the store's migrations, oldest first. Options.Create
// (and broker.OpenStore with Create) applies the ones a database lacks;
// they are listed here so that they can be reviewed, or applied by another
// migration tool (record each applied version in {table}_migrations, as
// Options.Create does).
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
}, {
	Version: 3,
	Name:    "summaries, attributes and search text beside the body; sort, source and trigram indexes",
	SQL: `
-- broker.IndexOf, computed when a record is written: a page of summaries
-- reads no body, every sort pages with a keyset cursor, Filter.Text is a
-- trigram search, the source is cut from attrs. Rows written before this
-- version are filled in by the store's backfill (summary IS NULL).
ALTER TABLE {t}
	ADD COLUMN vertex_count        integer NOT NULL DEFAULT 0,
	ADD COLUMN geometry_bytes      bigint  NOT NULL DEFAULT 0,
	ADD COLUMN attempts            integer NOT NULL DEFAULT 0,
	ADD COLUMN dead_lettered_nanos bigint  NOT NULL DEFAULT -9223372036854775807,
	ADD COLUMN source              text,
	ADD COLUMN summary             text,
	ADD COLUMN attrs               text,
	ADD COLUMN search              text;
COMMENT ON COLUMN {t}.summary IS 'broker.Summary as JSON (Source aside); NULL for a row written by a geodlq before schema version 3';
COMMENT ON COLUMN {t}.attrs IS 'broker.Indexed.Attrs: the event''s scalar members, one "\n/pointer\tvalue" line each';
COMMENT ON COLUMN {t}.search IS 'broker.Indexed.Search: what Filter.Text searches, folded to lower case';
COMMENT ON COLUMN {t}.source IS 'the event''s source at broker.DefaultSourcePointer (/source_uri)';
CREATE INDEX {n}_sort_time ON {t} (dead_lettered_nanos, id);
CREATE INDEX {n}_sort_vertices ON {t} (vertex_count, id);
CREATE INDEX {n}_sort_bytes ON {t} (geometry_bytes, id);
CREATE INDEX {n}_sort_attempts ON {t} (attempts, id);
CREATE INDEX {n}_source ON {t} (destination, source) WHERE replayed_at IS NULL;
CREATE INDEX {n}_unindexed ON {t} (id) WHERE summary IS NULL;
-- Filter.Text: a trigram index, when the pg_trgm extension is installed
-- (the migration creates it when it may; without it the text is searched
-- row by row).
DO $trgm$
BEGIN
	IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
		EXECUTE format('CREATE INDEX %I ON {t} USING gin (search %I.gin_trgm_ops)', '{n}_search',
			(SELECT nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'));
	END IF;
END
$trgm$;
`,
}, {
	Version: 4,
	Name:    "counts kept by triggers for Stats and Page.Total; an index of the leased rows",
	SQL: `
-- Stats and Page.Total: the records by their fields and whether they are
-- replayed. Every statement that writes the table appends its changes to
-- {n}_count_log (statement triggers over the transition tables: no row
-- that concurrent writers share, so they neither wait for each other nor
-- deadlock); the store folds the log into {n}_counts now and then (see
-- the package doc), and a count reads both: a few thousand rows rather
-- than every record.
CREATE TABLE {s}.{n}_counts (
	destination   text    NOT NULL,
	failure_class text    NOT NULL,
	failed_stage  text    NOT NULL,
	epsg          bigint  NOT NULL,
	reason_kind   text    NOT NULL,
	source        text    NOT NULL,
	is_envelope   boolean NOT NULL,
	replayed      boolean NOT NULL,
	n             bigint  NOT NULL,
	PRIMARY KEY (destination, failure_class, failed_stage, epsg, reason_kind, source, is_envelope, replayed)
);
CREATE TABLE {s}.{n}_count_log (LIKE {s}.{n}_counts);
COMMENT ON TABLE {s}.{n}_counts IS 'geodlq: the records of {n} by their fields (with {n}_count_log), for Stats and Page.Total';
COMMENT ON TABLE {s}.{n}_count_log IS 'geodlq: changes to {n}_counts not yet folded into it';

CREATE FUNCTION {s}.{n}_count_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	INSERT INTO {s}.{n}_count_log
	SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0), COALESCE(reason_kind, ''),
		COALESCE(source, ''), is_envelope, replayed_at IS NOT NULL, count(*)
	FROM new_rows GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
	RETURN NULL;
END
$fn$;
CREATE FUNCTION {s}.{n}_count_delete() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	INSERT INTO {s}.{n}_count_log
	SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0), COALESCE(reason_kind, ''),
		COALESCE(source, ''), is_envelope, replayed_at IS NOT NULL, -count(*)
	FROM old_rows GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
	RETURN NULL;
END
$fn$;
-- An update counts only the rows whose counted fields changed (a lease,
-- a renewal or an absorbed duplicate changes none).
CREATE FUNCTION {s}.{n}_count_update() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	INSERT INTO {s}.{n}_count_log
	SELECT d, c, st, e, k, src, env, rp, sum(n) FROM (
		SELECT o.destination, COALESCE(o.failure_class, ''), COALESCE(o.failed_stage, ''), COALESCE(o.epsg, 0),
			COALESCE(o.reason_kind, ''), COALESCE(o.source, ''), o.is_envelope, o.replayed_at IS NOT NULL, -1
		FROM old_rows o JOIN new_rows nw ON nw.id = o.id
		WHERE (o.destination, o.failure_class, o.failed_stage, o.epsg, o.reason_kind, o.source, o.is_envelope, o.replayed_at IS NULL)
			IS DISTINCT FROM (nw.destination, nw.failure_class, nw.failed_stage, nw.epsg, nw.reason_kind, nw.source, nw.is_envelope, nw.replayed_at IS NULL)
		UNION ALL
		SELECT nw.destination, COALESCE(nw.failure_class, ''), COALESCE(nw.failed_stage, ''), COALESCE(nw.epsg, 0),
			COALESCE(nw.reason_kind, ''), COALESCE(nw.source, ''), nw.is_envelope, nw.replayed_at IS NOT NULL, 1
		FROM old_rows o JOIN new_rows nw ON nw.id = o.id
		WHERE (o.destination, o.failure_class, o.failed_stage, o.epsg, o.reason_kind, o.source, o.is_envelope, o.replayed_at IS NULL)
			IS DISTINCT FROM (nw.destination, nw.failure_class, nw.failed_stage, nw.epsg, nw.reason_kind, nw.source, nw.is_envelope, nw.replayed_at IS NULL)
	) AS ch(d, c, st, e, k, src, env, rp, n)
	GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 HAVING sum(n) <> 0;
	RETURN NULL;
END
$fn$;
CREATE TRIGGER {n}_count_insert AFTER INSERT ON {t} REFERENCING NEW TABLE AS new_rows
	FOR EACH STATEMENT EXECUTE FUNCTION {s}.{n}_count_insert();
CREATE TRIGGER {n}_count_delete AFTER DELETE ON {t} REFERENCING OLD TABLE AS old_rows
	FOR EACH STATEMENT EXECUTE FUNCTION {s}.{n}_count_delete();
CREATE TRIGGER {n}_count_update AFTER UPDATE ON {t} REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
	FOR EACH STATEMENT EXECUTE FUNCTION {s}.{n}_count_update();
-- The triggers hold the table's lock from here on: the rows counted below
-- are every row there is.
INSERT INTO {s}.{n}_counts
SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0), COALESCE(reason_kind, ''),
	COALESCE(source, ''), is_envelope, replayed_at IS NOT NULL, count(*)
FROM {t} GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
-- Stats moves the records under a live lease from pending to leased: few
-- rows, found by this index.
CREATE INDEX {n}_leased ON {t} (lease_until) WHERE status = 'leased';
`,
}, {
	Version: 5,
	Name:    "indexes of a listing sorted by attempts under a class, reason kind or EPSG filter",
	SQL: `
-- attempts has few values (1 to 9): sorted by it under a filter, the
-- (attempts, id) index alone walks every record of the other classes'
-- attempts first; these start at the filter's value.
CREATE INDEX {n}_class_attempts ON {t} (failure_class, attempts, id);
CREATE INDEX {n}_kind_attempts ON {t} (reason_kind, attempts, id);
CREATE INDEX {n}_epsg_attempts ON {t} (epsg, attempts, id);
`,
}}

// minVersion is the oldest schema this package's queries work on: version
// 2 only adds indexes, and a table of version 1 or 2 is listed the old way
// (see [driver.current]).
const minVersion = 1

// summaryVersion is the schema version with the summary columns.
const summaryVersion = 3

func (d *driver) render(q string) string {
	return strings.NewReplacer("{s}", d.schemaQ, "{t}", d.table, "{n}", d.name).Replace(q)
}

func (d *driver) migrationTarget() pgmigrate.Target {
	return pgmigrate.Target{Prefix: "postgis", Schema: d.schema, Table: d.name, Render: d.render, Prepare: createExtension}
}

// createExtension creates the postgis extension when the database lacks
// it (which needs the privilege to), and pg_trgm when it may (without it
// the text search reads every row).
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
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')`).Scan(&have); err != nil {
		return fmt.Errorf("postgis: migrate: %w", err)
	}
	if !have {
		if _, err := tx.Exec(ctx, `SAVEPOINT trgm`); err != nil {
			return fmt.Errorf("postgis: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_trgm`); err != nil {
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT trgm`); err != nil {
				return fmt.Errorf("postgis: migrate: %w", err)
			}
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
	if err := pgmigrate.Migrate(ctx, d.pool, d.migrationTarget(), migrations); err != nil {
		return err
	}
	d.version.Store(int64(len(migrations)))
	return d.backfill(ctx)
}

// backfillBatch is the rows one backfill statement indexes.
const backfillBatch = 500

// backfill fills in the summary, attributes, search text and sort values
// of the rows that lack them (written before schema version 3, or since
// by an older geodlq), a batch per statement, oldest first.
func (d *driver) backfill(ctx context.Context) error {
	var after int64
	for {
		rows, err := d.pool.Query(ctx, `SELECT id, headers, binary_headers, body FROM `+d.table+
			` WHERE summary IS NULL AND id > $1 ORDER BY id LIMIT $2`, after, backfillBatch)
		if err != nil {
			return fmt.Errorf("postgis: indexing the records written before schema version %d: %w", summaryVersion, err)
		}
		var (
			ids                            []int64
			vertices, attempts             []int32
			geomBytes, nanos               []int64
			sources, sums, attrs, searches []*string
		)
		for rows.Next() {
			var (
				id      int64
				headers map[string]string
				binary  []byte
				body    []byte
			)
			if err := rows.Scan(&id, &headers, &binary, &body); err != nil {
				rows.Close()
				return fmt.Errorf("postgis: indexing the records written before schema version %d: %w", summaryVersion, err)
			}
			h, _ := decodeHeaders(headers, binary)
			ix := indexOf(&broker.Message{Body: body, Headers: h}, nil)
			ids = append(ids, id)
			vertices, attempts = append(vertices, ix.vertices), append(attempts, ix.attempts)
			geomBytes, nanos = append(geomBytes, ix.geomBytes), append(nanos, ix.nanos)
			sources, sums = append(sources, ix.source), append(sums, &ix.summary)
			attrs, searches = append(attrs, &ix.attrs), append(searches, &ix.search)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgis: indexing the records written before schema version %d: %w", summaryVersion, err)
		}
		if len(ids) == 0 {
			return nil
		}
		_, err = d.pool.Exec(ctx, `UPDATE `+d.table+` AS d SET vertex_count = u.v, geometry_bytes = u.gb, attempts = u.a,
			dead_lettered_nanos = u.n, source = u.src, summary = u.sum, attrs = u.attrs, search = u.search
			FROM unnest($1::bigint[], $2::integer[], $3::bigint[], $4::integer[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[])
				AS u(id, v, gb, a, n, src, sum, attrs, search)
			WHERE d.id = u.id`, ids, vertices, geomBytes, attempts, nanos, sources, sums, attrs, searches)
		if err != nil {
			return fmt.Errorf("postgis: indexing the records written before schema version %d: %w", summaryVersion, err)
		}
		after = ids[len(ids)-1]
	}
}

// readVersion returns the schema version the database is at (0 before
// the first migration), and remembers it (see [driver.current]).
func (d *driver) readVersion(ctx context.Context) (int, error) {
	v, err := pgmigrate.Version(ctx, d.pool, d.migrationTarget())
	if err == nil {
		d.version.Store(int64(v))
		d.versionAt.Store(time.Now().UnixNano())
	}
	return v, err
}

// current reports whether the table has the summary columns (schema
// version 3): then List, Stats and the text and source filters run in
// SQL; a table of an older version is listed the old way, and the
// portable store sorts, counts and searches. An older version is read
// again at most every 10 seconds, so that a handle notices a migration
// another process ran.
func (d *driver) current(ctx context.Context) bool {
	if d.version.Load() >= summaryVersion {
		return true
	}
	if time.Since(time.Unix(0, d.versionAt.Load())) < 10*time.Second {
		return false
	}
	v, err := d.readVersion(ctx)
	return err == nil && v >= summaryVersion
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
		return fmt.Errorf("postgis: no geodlq table %s in this database (create it with Options.Create or OpenOptions.Create): %w", d.table, broker.ErrNoStore)
	}
	v, err := d.readVersion(ctx)
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
