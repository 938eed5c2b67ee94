package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/geodlq/geodlq/broker"
)

const table = "dlq_records"

// schemaVersion is the table layout this package writes (PRAGMA
// user_version): 2 keeps each record's summary, attributes and search
// text (broker.IndexOf) and its sort values beside the body, which comes
// last so that reading the columns before it never reads it; 3 keeps
// counts (dlq_counts) and the search text's trigram index with its text
// (dlq_text). Files of version 0 (every file before version 2) are rebuilt
// in the new layout when opened read-write, and older ones brought up to
// date (see [drv.migrate]); 4 adds the indexes of a listing sorted by
// attempts under a filter (schemaV4); 5 keeps counts by the hour of
// dead-lettering (dlq_hour_counts, schemaV5).
const schemaVersion = 5

// recordsTable is the layout of version 2; {t} is the table's name.
const recordsTable = `CREATE TABLE {t} (
	id               INTEGER PRIMARY KEY AUTOINCREMENT,
	destination      TEXT    NOT NULL,
	is_envelope      INTEGER NOT NULL DEFAULT 0,
	event_id         TEXT,
	idempotency_key  TEXT,
	failure_class    TEXT,
	failed_stage     TEXT,
	epsg             INTEGER,
	reason_kind      TEXT,
	loc_x            REAL,
	loc_y            REAL,
	source_topic     TEXT,
	dead_lettered_at INTEGER,
	published_at     INTEGER NOT NULL,
	lease_token      TEXT,
	lease_until      INTEGER,
	deliveries       INTEGER NOT NULL DEFAULT 0,
	acked_at         INTEGER,
	vertex_count     INTEGER NOT NULL DEFAULT 0,
	geometry_bytes   INTEGER NOT NULL DEFAULT 0,
	attempts         INTEGER NOT NULL DEFAULT 0,
	source           TEXT,
	offload_uri      TEXT,
	raw_offload_uri  TEXT,
	summary          TEXT,
	attrs            TEXT,
	search           TEXT,
	msg_key          BLOB,
	headers          TEXT    NOT NULL DEFAULT '{}',
	body             BLOB    NOT NULL
)`

// schema creates what version 2 has beside the table: its indexes.
const schema = `
CREATE INDEX IF NOT EXISTS dlq_pending ON dlq_records (destination, acked_at, id);
CREATE INDEX IF NOT EXISTS dlq_class ON dlq_records (destination, failure_class, failed_stage);
CREATE INDEX IF NOT EXISTS dlq_epsg ON dlq_records (destination, epsg);
CREATE INDEX IF NOT EXISTS dlq_time ON dlq_records (destination, dead_lettered_at);
CREATE INDEX IF NOT EXISTS dlq_event ON dlq_records (event_id);
-- Stats: every column it groups and counts by, so that it reads the index only.
CREATE INDEX IF NOT EXISTS dlq_stats ON dlq_records (destination, failure_class, failed_stage, epsg, reason_kind,
	source, dead_lettered_at, acked_at, lease_until, is_envelope);
-- Sorted listings, keyset-paged.
CREATE INDEX IF NOT EXISTS dlq_sort_time ON dlq_records (COALESCE(dead_lettered_at, -9223372036854775807), id);
CREATE INDEX IF NOT EXISTS dlq_sort_vertices ON dlq_records (vertex_count, id);
CREATE INDEX IF NOT EXISTS dlq_sort_bytes ON dlq_records (geometry_bytes, id);
CREATE INDEX IF NOT EXISTS dlq_sort_attempts ON dlq_records (attempts, id);
-- Purge's blob reference check.
CREATE INDEX IF NOT EXISTS dlq_offload ON dlq_records (offload_uri) WHERE offload_uri IS NOT NULL;
CREATE INDEX IF NOT EXISTS dlq_raw_offload ON dlq_records (raw_offload_uri) WHERE raw_offload_uri IS NOT NULL;
-- Rows an older geodlq wrote (no summary): read from their bodies.
CREATE INDEX IF NOT EXISTS dlq_unindexed ON dlq_records (id) WHERE summary IS NULL;
`

// schemaV3 is what version 3 adds: counts kept by triggers, and the text
// index with its text (narrow rows, so that checking a match does not read
// the records), replacing version 2's contentless one.
const schemaV3 = `
DROP TRIGGER IF EXISTS dlq_search_insert;
DROP TRIGGER IF EXISTS dlq_search_delete;
DROP TRIGGER IF EXISTS dlq_search_update;
DROP TABLE IF EXISTS dlq_search;
-- Filter.Text: a trigram index (detail=none: which rows hold a trigram)
-- with the search text, kept by triggers.
CREATE VIRTUAL TABLE dlq_text USING fts5(search, tokenize = 'trigram case_sensitive 1', detail = none);
INSERT INTO dlq_text (rowid, search) SELECT id, search FROM dlq_records WHERE search IS NOT NULL;
CREATE TRIGGER dlq_text_insert AFTER INSERT ON dlq_records WHEN new.search IS NOT NULL BEGIN
	INSERT INTO dlq_text (rowid, search) VALUES (new.id, new.search);
END;
CREATE TRIGGER dlq_text_delete AFTER DELETE ON dlq_records WHEN old.search IS NOT NULL BEGIN
	DELETE FROM dlq_text WHERE rowid = old.id;
END;
CREATE TRIGGER dlq_text_update AFTER UPDATE OF search ON dlq_records BEGIN
	DELETE FROM dlq_text WHERE rowid = old.id AND old.search IS NOT NULL;
	INSERT INTO dlq_text (rowid, search) SELECT new.id, new.search WHERE new.search IS NOT NULL;
END;
-- Stats and Page.Total: the records by their fields and whether they are
-- replayed, kept by triggers, so that counting reads this table instead
-- of the records (leases, which expire without a write, are counted from
-- the records: few rows, by dlq_leases).
CREATE TABLE dlq_counts (
	destination   TEXT    NOT NULL,
	failure_class TEXT    NOT NULL,
	failed_stage  TEXT    NOT NULL,
	epsg          INTEGER NOT NULL,
	reason_kind   TEXT    NOT NULL,
	source        TEXT    NOT NULL,
	is_envelope   INTEGER NOT NULL,
	acked         INTEGER NOT NULL,
	n             INTEGER NOT NULL,
	PRIMARY KEY (destination, failure_class, failed_stage, epsg, reason_kind, source, is_envelope, acked)
) WITHOUT ROWID;
INSERT INTO dlq_counts SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0),
	COALESCE(reason_kind, ''), COALESCE(source, ''), is_envelope, acked_at IS NOT NULL, count(*)
	FROM dlq_records GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
CREATE TRIGGER dlq_counts_insert AFTER INSERT ON dlq_records BEGIN
	INSERT INTO dlq_counts VALUES (new.destination, COALESCE(new.failure_class, ''), COALESCE(new.failed_stage, ''),
		COALESCE(new.epsg, 0), COALESCE(new.reason_kind, ''), COALESCE(new.source, ''), new.is_envelope, new.acked_at IS NOT NULL, 1)
	ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER dlq_counts_delete AFTER DELETE ON dlq_records BEGIN
	UPDATE dlq_counts SET n = n - 1 WHERE destination = old.destination AND failure_class = COALESCE(old.failure_class, '')
		AND failed_stage = COALESCE(old.failed_stage, '') AND epsg = COALESCE(old.epsg, 0) AND reason_kind = COALESCE(old.reason_kind, '')
		AND source = COALESCE(old.source, '') AND is_envelope = old.is_envelope AND acked = (old.acked_at IS NOT NULL);
END;
CREATE TRIGGER dlq_counts_update AFTER UPDATE OF destination, failure_class, failed_stage, epsg, reason_kind, source, is_envelope, acked_at
	ON dlq_records WHEN old.destination IS NOT new.destination OR old.failure_class IS NOT new.failure_class
		OR old.failed_stage IS NOT new.failed_stage OR old.epsg IS NOT new.epsg OR old.reason_kind IS NOT new.reason_kind
		OR old.source IS NOT new.source OR old.is_envelope IS NOT new.is_envelope OR (old.acked_at IS NULL) <> (new.acked_at IS NULL) BEGIN
	UPDATE dlq_counts SET n = n - 1 WHERE destination = old.destination AND failure_class = COALESCE(old.failure_class, '')
		AND failed_stage = COALESCE(old.failed_stage, '') AND epsg = COALESCE(old.epsg, 0) AND reason_kind = COALESCE(old.reason_kind, '')
		AND source = COALESCE(old.source, '') AND is_envelope = old.is_envelope AND acked = (old.acked_at IS NOT NULL);
	INSERT INTO dlq_counts VALUES (new.destination, COALESCE(new.failure_class, ''), COALESCE(new.failed_stage, ''),
		COALESCE(new.epsg, 0), COALESCE(new.reason_kind, ''), COALESCE(new.source, ''), new.is_envelope, new.acked_at IS NOT NULL, 1)
	ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE INDEX dlq_leases ON dlq_records (lease_until) WHERE acked_at IS NULL AND lease_until IS NOT NULL;
`

// schemaV4 is what version 4 adds: a listing sorted by attempts (few
// values: 1 to 9) under a filter on class, reason kind or EPSG walks one
// of these in order from the filter's value, where the (attempts, id)
// index alone walked every record of the other classes' attempts first.
const schemaV4 = `
CREATE INDEX IF NOT EXISTS dlq_class_attempts ON dlq_records (failure_class, attempts, id);
CREATE INDEX IF NOT EXISTS dlq_kind_attempts ON dlq_records (reason_kind, attempts, id);
CREATE INDEX IF NOT EXISTS dlq_epsg_attempts ON dlq_records (epsg, attempts, id);
`

// schemaV5 is what version 5 adds: the counts of dlq_counts by the hour
// the records were dead-lettered in too (without their sources), kept by
// triggers, so that Stats by time (a bucket of whole hours: the console's
// time line) reads a row per field values and hour rather than every
// record. hour is dead_lettered_at floored to a multiple of an hour since
// the epoch, in nanoseconds, or noHour for a record without the time (not
// an envelope), as in the dlq_sort_time index. Counts left by an earlier
// upgrade of a file whose version was then set back are built again.
const schemaV5 = `
DROP TRIGGER IF EXISTS dlq_hour_counts_insert;
DROP TRIGGER IF EXISTS dlq_hour_counts_delete;
DROP TRIGGER IF EXISTS dlq_hour_counts_update;
DROP TABLE IF EXISTS dlq_hour_counts;
CREATE TABLE dlq_hour_counts (
	destination   TEXT    NOT NULL,
	failure_class TEXT    NOT NULL,
	failed_stage  TEXT    NOT NULL,
	epsg          INTEGER NOT NULL,
	reason_kind   TEXT    NOT NULL,
	is_envelope   INTEGER NOT NULL,
	hour          INTEGER NOT NULL,
	acked         INTEGER NOT NULL,
	n             INTEGER NOT NULL,
	PRIMARY KEY (destination, failure_class, failed_stage, epsg, reason_kind, is_envelope, hour, acked)
) WITHOUT ROWID;
INSERT INTO dlq_hour_counts SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0),
	COALESCE(reason_kind, ''), is_envelope, {hour}, acked_at IS NOT NULL, count(*)
	FROM dlq_records GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
CREATE TRIGGER dlq_hour_counts_insert AFTER INSERT ON dlq_records BEGIN
	INSERT INTO dlq_hour_counts VALUES (new.destination, COALESCE(new.failure_class, ''), COALESCE(new.failed_stage, ''),
		COALESCE(new.epsg, 0), COALESCE(new.reason_kind, ''), new.is_envelope, {newhour}, new.acked_at IS NOT NULL, 1)
	ON CONFLICT DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER dlq_hour_counts_delete AFTER DELETE ON dlq_records BEGIN
	UPDATE dlq_hour_counts SET n = n - 1 WHERE destination = old.destination AND failure_class = COALESCE(old.failure_class, '')
		AND failed_stage = COALESCE(old.failed_stage, '') AND epsg = COALESCE(old.epsg, 0) AND reason_kind = COALESCE(old.reason_kind, '')
		AND is_envelope = old.is_envelope AND hour = {oldhour} AND acked = (old.acked_at IS NOT NULL);
END;
CREATE TRIGGER dlq_hour_counts_update AFTER UPDATE OF destination, failure_class, failed_stage, epsg, reason_kind, is_envelope, dead_lettered_at, acked_at
	ON dlq_records WHEN old.destination IS NOT new.destination OR old.failure_class IS NOT new.failure_class
		OR old.failed_stage IS NOT new.failed_stage OR old.epsg IS NOT new.epsg OR old.reason_kind IS NOT new.reason_kind
		OR old.is_envelope IS NOT new.is_envelope OR old.dead_lettered_at IS NOT new.dead_lettered_at
		OR (old.acked_at IS NULL) <> (new.acked_at IS NULL) BEGIN
	UPDATE dlq_hour_counts SET n = n - 1 WHERE destination = old.destination AND failure_class = COALESCE(old.failure_class, '')
		AND failed_stage = COALESCE(old.failed_stage, '') AND epsg = COALESCE(old.epsg, 0) AND reason_kind = COALESCE(old.reason_kind, '')
		AND is_envelope = old.is_envelope AND hour = {oldhour} AND acked = (old.acked_at IS NOT NULL);
	INSERT INTO dlq_hour_counts VALUES (new.destination, COALESCE(new.failure_class, ''), COALESCE(new.failed_stage, ''),
		COALESCE(new.epsg, 0), COALESCE(new.reason_kind, ''), new.is_envelope, {newhour}, new.acked_at IS NOT NULL, 1)
	ON CONFLICT DO UPDATE SET n = n + 1;
END;
`

// noHour is dlq_hour_counts' hour of a record without a dead-letter time.
const noHour = -9223372036854775807

// hourOf is the SQL of dlq_hour_counts' hour of column t.
func hourOf(t string) string {
	const h = "3600000000000"
	return "COALESCE(" + t + " - ((" + t + " % " + h + ") + " + h + ") % " + h + ", " + strconv.Itoa(noHour) + ")"
}

// schemaV5SQL is schemaV5 with its hours written out.
var schemaV5SQL = strings.NewReplacer("{hour}", hourOf("dead_lettered_at"), "{newhour}", hourOf("new.dead_lettered_at"),
	"{oldhour}", hourOf("old.dead_lettered_at")).Replace(schemaV5)

// columns are the columns a table must have to be a store's.
var columns = []string{"id", "destination", "msg_key", "headers", "body", "is_envelope", "event_id",
	"idempotency_key", "failure_class", "failed_stage", "epsg", "reason_kind", "loc_x", "loc_y",
	"source_topic", "dead_lettered_at", "published_at", "lease_token", "lease_until", "deliveries", "acked_at"}

// open opens the driver over path. create allows creating the file and the
// table; o.ReadOnly opens read-only (and never creates).
func open(ctx context.Context, path string, o *Options, create bool) (*drv, error) {
	if path == "" {
		return nil, fmt.Errorf("sqlite: empty path: %w", broker.ErrInvalidArgument)
	}
	d := &drv{path: path, ttl: 30 * time.Second, limit: defaultMaxBytes, now: time.Now, log: o.Logger, sem: make(chan struct{}, 1),
		common: commonMatches}
	if o.LeaseTTL > 0 {
		d.ttl = o.LeaseTTL
	}
	if o.MaxMessageBytes > 0 {
		d.limit = min(o.MaxMessageBytes, maxRowBytes)
	}
	if o.Now != nil {
		d.now = o.Now
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.busy = 10 * time.Second
	if o.BusyTimeout > 0 {
		d.busy = o.BusyTimeout
	}
	synchronous := "FULL"
	switch strings.ToUpper(o.Synchronous) {
	case "", "FULL":
	case "NORMAL":
		synchronous = "NORMAL"
	default:
		return nil, fmt.Errorf("sqlite: Synchronous must be FULL or NORMAL, got %q: %w", o.Synchronous, broker.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", path, err)
	}
	pragmas := []string{"busy_timeout(" + strconv.FormatInt(busyQuantum.Milliseconds(), 10) + ")"}
	if o.ReadOnly {
		d.ro = &roDB{path: path, abs: abs, pragmas: append(pragmas, "query_only(1)"), retry: d.retry}
		if _, _, err := d.ro.get(ctx); err != nil {
			return nil, err
		}
		return d, nil
	}
	if d.db, err = d.openRW(ctx, abs, append(pragmas, "synchronous("+synchronous+")"), create); err != nil {
		return nil, err
	}
	if err := d.indexSources(ctx, o.SourcePointers); err != nil {
		_ = d.db.Close()
		return nil, err
	}
	if err := d.prepare(ctx); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

// sourceIndex is the name of the index of the source at pointer (see
// Options.SourcePointers): dlq_source_ and 16 hex digits of the pointer's
// SHA-256.
func sourceIndex(pointer string) string {
	h := sha256.Sum256([]byte(pointer))
	return "dlq_source_" + hex.EncodeToString(h[:8])
}

// indexSources creates the index of the source at each pointer, one
// transaction each, unless it exists. The index holds [sourceExpr], the
// expression a filter's Sources are compared with, so SQLite reads it for
// them.
func (d *drv) indexSources(ctx context.Context, pointers []string) error {
	for _, p := range pointers {
		if err := broker.ValidSourcePointer(p); err != nil {
			return fmt.Errorf("sqlite: Options.SourcePointers: %w", err)
		}
	}
	for _, p := range pointers {
		if defaultPointer(p) {
			continue // the source column
		}
		err := d.retry(ctx, func() error {
			_, err := d.db.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS `+sourceIndex(p)+` ON `+table+` (`+sourceExpr(p)+`)`)
			return err
		})
		if err != nil {
			return fmt.Errorf("sqlite: indexing the source at %s: %w", p, err)
		}
	}
	return nil
}

// openRW opens d.path read-write: it refuses what is not a store (unless
// create), makes the file WAL and creates the table and its indexes.
func (d *drv) openRW(ctx context.Context, abs string, pragmas []string, create bool) (*sql.DB, error) {
	path := d.path
	st, err := probe(path)
	switch {
	case st.missing && !create:
		return nil, fmt.Errorf("sqlite: %w: %w", broker.ErrNoStore, err)
	case err != nil && !st.missing:
		return nil, err
	case st.empty && !create:
		return nil, fmt.Errorf("sqlite: %w: %s is an empty file", broker.ErrNoStore, path)
	}
	mode := "rw"
	if st.missing {
		mode = "rwc"
	}
	db, err := connect(ctx, path, dsn(abs, mode, pragmas))
	if err != nil {
		return nil, err
	}
	ok, err := hasTable(ctx, db, path, d.retry)
	if err == nil && !ok && !create {
		err = fmt.Errorf("sqlite: %w: %s is a SQLite database without a %s table", broker.ErrNoStore, path, table)
	}
	if err == nil {
		// WAL is a property of the file: set once, kept by every opener.
		err = d.retry(ctx, func() error {
			_, err := db.ExecContext(ctx, "PRAGMA journal_mode=WAL")
			return err
		})
	}
	if err == nil {
		err = d.migrate(ctx, db, ok)
	}
	if err != nil {
		_ = db.Close()
		if !errors.Is(err, broker.ErrNoStore) && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("sqlite: migrate %s: %w", path, err)
		}
		return nil, err
	}
	if mode == "rw" {
		return db, nil
	}
	// The file exists now: reconnect without the right to create it, so
	// that a file removed under a running store is not quietly recreated
	// empty when the pool reconnects.
	_ = db.Close()
	return connect(ctx, path, dsn(abs, "rw", pragmas))
}

// userVersion reads the file's PRAGMA user_version: the layout of its
// table (see [schemaVersion]).
func userVersion(ctx context.Context, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int, error) {
	var v int
	err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

// migrate brings the file to [schemaVersion], in one write transaction: it
// creates the table when there is none (have false), rebuilds a version 0
// table in the new layout (copying every row, ids and the id sequence
// kept), and creates the indexes, the search index and its triggers. Then
// it fills in, a batch per transaction, the summary, attributes, search
// text and sort values of the rows that lack them (the rebuilt ones, and
// any an older geodlq wrote since). A file newer than this package is
// refused.
func (d *drv) migrate(ctx context.Context, db *sql.DB, have bool) error {
	v, err := userVersion(ctx, db)
	if err != nil {
		return err
	}
	if v > schemaVersion {
		return fmt.Errorf("sqlite: %s is at schema version %d, newer than this package's %d", d.path, v, schemaVersion)
	}
	if v < schemaVersion || !have {
		err := d.retry(ctx, func() error {
			c, err := db.Conn(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				return err
			}
			if err := upgrade(ctx, c); err != nil {
				rollback(c)
				return err
			}
			if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
				rollback(c)
				return err
			}
			return nil
		})
		if err != nil {
			if ctx.Err() != nil && v > 0 {
				// Building a new version's indexes reads every record: on
				// a large file, longer than a connect timeout. Say so, and
				// what to do; the file is left at its version, whole.
				return fmt.Errorf("sqlite: upgrading %s from schema version %d to %d (indexes built over every record) did not finish in time and was rolled back; open it read-write once with a longer timeout (the first command that writes, with geodlq --connect-timeout 30m; OpenOptions.ConnectTimeout or the context's deadline in code); read-only opens list it meanwhile: %w",
					d.path, v, schemaVersion, err)
			}
			return err
		}
	}
	return d.backfill(ctx, db)
}

// upgrade is migrate's transaction, on c: it reads the version again (a
// concurrent opener may have migrated meanwhile).
func upgrade(ctx context.Context, c *sql.Conn) error {
	v, err := userVersion(ctx, c)
	if err != nil {
		return err
	}
	var tables int
	if err := c.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, table).Scan(&tables); err != nil {
		return err
	}
	create := strings.ReplaceAll(recordsTable, "{t}", table)
	switch {
	case tables == 0:
		if _, err := c.ExecContext(ctx, create); err != nil {
			return err
		}
		v = 0
	case v >= 2 && v < schemaVersion:
		// The layout of version 2: only the later versions' tables and
		// indexes are missing.
	case v < 2:
		// Version 0: the body came before the columns added since. Rebuild
		// (SQLite's recommended ALTER procedure): copy every row into the
		// new layout, keep the AUTOINCREMENT sequence, swap the tables.
		var seq sql.NullInt64
		if err := c.QueryRowContext(ctx, `SELECT seq FROM sqlite_sequence WHERE name = ?`, table).Scan(&seq); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		cols := strings.Join(columns, ", ")
		for _, q := range []string{
			strings.ReplaceAll(recordsTable, "{t}", table+"_v2"),
			`INSERT INTO ` + table + `_v2 (` + cols + `) SELECT ` + cols + ` FROM ` + table,
			`DROP TABLE ` + table,
			`ALTER TABLE ` + table + `_v2 RENAME TO ` + table,
		} {
			if _, err := c.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("rebuilding the table in the layout of version 2: %w", err)
			}
		}
		if seq.Valid {
			if _, err := c.ExecContext(ctx, `UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?`, seq.Int64, table); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	if v < 2 {
		if _, err := c.ExecContext(ctx, schema); err != nil {
			return err
		}
	}
	if v < 3 {
		if _, err := c.ExecContext(ctx, schemaV3); err != nil {
			return fmt.Errorf("adding the counts and the text index of version 3: %w", err)
		}
	}
	if _, err := c.ExecContext(ctx, schemaV4); err != nil {
		return fmt.Errorf("adding the indexes of version 4: %w", err)
	}
	if v < 5 {
		if _, err := c.ExecContext(ctx, schemaV5SQL); err != nil {
			return fmt.Errorf("adding the hourly counts of version 5: %w", err)
		}
	}
	_, err = c.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(schemaVersion))
	return err
}

// backfillBatch is the rows one backfill transaction indexes.
const backfillBatch = 500

// backfill indexes the rows that have no summary yet, a batch per
// transaction (so that writers wait at most one batch), oldest first.
func (d *drv) backfill(ctx context.Context, db *sql.DB) error {
	var after int64
	for {
		type todo struct {
			id      int64
			headers string
			body    []byte
		}
		var batch []todo
		err := d.retry(ctx, func() error {
			batch = batch[:0]
			rows, err := db.QueryContext(ctx, `SELECT id, headers, body FROM `+table+` WHERE summary IS NULL AND id > ? ORDER BY id LIMIT ?`, after, backfillBatch)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var t todo
				if err := rows.Scan(&t.id, &t.headers, &t.body); err != nil {
					return err
				}
				batch = append(batch, t)
			}
			return rows.Err()
		})
		if err != nil || len(batch) == 0 {
			return err
		}
		err = d.retry(ctx, func() error {
			c, err := db.Conn(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				return err
			}
			for _, t := range batch {
				var h map[string]string
				_ = json.Unmarshal([]byte(t.headers), &h)
				ix := indexOf(&broker.Message{Body: t.body, Headers: h})
				if _, err := c.ExecContext(ctx, `UPDATE `+table+` SET vertex_count = ?, geometry_bytes = ?, attempts = ?, source = ?,
					offload_uri = ?, raw_offload_uri = ?, summary = ?, attrs = ?, search = ? WHERE id = ?`,
					ix.vertices, ix.geomBytes, ix.attempts, ix.source, ix.offload, ix.rawOffload, ix.summary, ix.attrs, ix.search, t.id); err != nil {
					rollback(c)
					return err
				}
			}
			if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
				rollback(c)
				return err
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("indexing the records written before schema version %d: %w", schemaVersion, err)
		}
		after = batch[len(batch)-1].id
	}
}

// dsn is the driver's URI for the file at abs.
func dsn(abs, mode string, pragmas []string) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	return "file:" + (&url.URL{Path: abs}).EscapedPath() + "?mode=" + mode + "&" + q.Encode()
}

// connect opens a one-connection pool on dsn and connects it within ctx.
// Opening a file can block in the kernel (a FIFO put at the path after the
// probe looked): that wait is left behind, not waited for.
func connect(ctx context.Context, path, dsn string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// One connection per handle: SQLite has one writer at a time, and a
	// single connection turns in-process contention into queueing (see
	// [drv.lock]) instead of SQLITE_BUSY. Other connections are waited for
	// by [drv.retry].
	db.SetMaxOpenConns(1)
	done := make(chan error, 1)
	go func() { done <- db.PingContext(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			_ = db.Close()
			if isNotADB(err) {
				return nil, fmt.Errorf("sqlite: %w: %s is not a SQLite database (%w)", broker.ErrNoStore, path, err)
			}
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		return db, nil
	case <-ctx.Done():
		go func() {
			<-done
			_ = db.Close()
		}()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, ctx.Err())
	}
}

// hasTable reports whether db holds the store's table. A table of that
// name without the store's columns, or a file SQLite cannot read as a
// database, is an error wrapping [broker.ErrNoStore].
func hasTable(ctx context.Context, db *sql.DB, path string, retry func(context.Context, func() error) error) (bool, error) {
	have := map[string]bool{}
	err := retry(ctx, func() error {
		clear(have)
		rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				return err
			}
			have[name] = true
		}
		return rows.Err()
	})
	if err != nil {
		return false, schemaErr(path, err)
	}
	if len(have) == 0 {
		return false, nil
	}
	for _, c := range columns {
		if !have[c] {
			return false, fmt.Errorf("sqlite: %w: table %s in %s has no column %s", broker.ErrNoStore, table, path, c)
		}
	}
	return true, nil
}

func schemaErr(path string, err error) error {
	if isNotADB(err) {
		return fmt.Errorf("sqlite: %w: %s is not a SQLite database (%w)", broker.ErrNoStore, path, err)
	}
	return fmt.Errorf("sqlite: reading the schema of %s: %w", path, err)
}

// isNotADB reports whether err is SQLite's SQLITE_NOTADB: the file is not
// a database.
func isNotADB(err error) bool {
	var se *sqlitedrv.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_NOTADB
}

// fileState is what [probe] found at a path.
type fileState struct {
	missing bool
	empty   bool
	info    fs.FileInfo
}

// probe looks at path before SQLite opens it, without opening it: a FIFO,
// a device or a directory is refused with an error wrapping
// [broker.ErrNoStore] (SQLite's open of a FIFO waits for a writer forever;
// /dev/null reads as an empty database). For a missing path, st.missing is
// set and err is the stat error. What is in the file is SQLite's to judge
// (SQLITE_NOTADB, see [hasTable]): opening the file here and closing it
// again would drop the POSIX locks SQLite holds on it for other handles in
// this process.
func probe(path string) (st fileState, err error) {
	st.info, err = os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileState{missing: true}, err
	}
	if err != nil {
		return st, fmt.Errorf("sqlite: %w", err)
	}
	if !st.info.Mode().IsRegular() {
		return st, fmt.Errorf("sqlite: %w: %s is not a regular file but %s", broker.ErrNoStore, path, kind(st.info.Mode()))
	}
	st.empty = st.info.Size() == 0
	return st, nil
}

// kind names the type of a file that is not a regular one.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file (" + m.Type().String() + ")"
}

// roDB is the database of a read-only handle.
//
// SQLite's read-only mode (mode=ro) creates the -wal and -shm files of a
// WAL database when they are missing and cannot remove them afterwards.
// So a database that no process has open (no -wal file) is opened
// immutable instead, which creates nothing and takes no locks; then every
// read checks afterwards that the file is the same (inode, size,
// modification time) and still has no -wal file, and if another process
// wrote meanwhile the read is done again on a fresh connection (mode=ro
// while that process keeps the -wal file). A writer changes the file only
// while it has the -wal file or when it closes, which changes the
// modification time: since Linux 6.13 (multigrain timestamps) always to a
// new value; with coarse timestamps a writer that opens, writes and
// closes within one clock tick (about 4 ms) of the previous change could
// go unseen, and a read then return a stale or torn view. The file itself
// is never at risk.
type roDB struct {
	path, abs string
	pragmas   []string
	retry     func(context.Context, func() error) error

	mu        sync.Mutex
	db        *sql.DB
	version   int // the file's schema version, read with db
	immutable bool
	id        fs.FileInfo // the file when db was opened immutable
	closed    bool
}

// get returns the current database, reopening it when the file changed
// under an immutable one.
func (r *roDB) get(ctx context.Context) (*sql.DB, bool, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, false, fmt.Errorf("sqlite: %w", broker.ErrClosed)
	}
	if r.db != nil && (!r.immutable || r.unchanged()) {
		db, imm := r.db, r.immutable
		r.mu.Unlock()
		return db, imm, nil
	}
	old := r.db
	r.db = nil
	defer func() {
		if old != nil {
			_ = old.Close()
		}
	}()
	defer r.mu.Unlock()
	st, err := probe(r.path)
	switch {
	case st.missing:
		return nil, false, fmt.Errorf("sqlite: %w: %w", broker.ErrNoStore, err)
	case err != nil:
		return nil, false, err
	case st.empty:
		return nil, false, fmt.Errorf("sqlite: %w: %s is an empty file", broker.ErrNoStore, r.path)
	}
	// A -wal file means that a process has the database open in WAL mode
	// (or crashed with it open): mode=ro then uses the files it made.
	immutable := !exists(r.path + "-wal")
	mode := "ro"
	if immutable {
		mode = "ro&immutable=1"
	}
	db, err := connect(ctx, r.path, dsn(r.abs, mode, r.pragmas))
	if err != nil {
		return nil, false, err
	}
	ok, err := hasTable(ctx, db, r.path, r.retry)
	if err == nil && !ok {
		err = fmt.Errorf("sqlite: %w: %s is a SQLite database without a %s table", broker.ErrNoStore, r.path, table)
	}
	var v int
	if err == nil {
		err = r.retry(ctx, func() (err error) {
			v, err = userVersion(ctx, db)
			return err
		})
	}
	if err != nil {
		_ = db.Close()
		return nil, false, err
	}
	r.db, r.immutable, r.id, r.version = db, immutable, st.info, v
	return db, immutable, nil
}

// unchanged reports whether the file is still the one an immutable db was
// opened on, unmodified and without a -wal file.
func (r *roDB) unchanged() bool {
	fi, err := os.Stat(r.path)
	return err == nil && os.SameFile(fi, r.id) && fi.Size() == r.id.Size() && fi.ModTime().Equal(r.id.ModTime()) &&
		!exists(r.path+"-wal")
}

// stale drops db if it is still the current database, so that the next
// get reopens the file.
func (r *roDB) stale(db *sql.DB) {
	r.mu.Lock()
	if r.db != db {
		r.mu.Unlock()
		return
	}
	r.db = nil
	r.mu.Unlock()
	_ = db.Close()
}

func (r *roDB) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.db == nil {
		return nil
	}
	err := r.db.Close()
	r.db = nil
	return err
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// readAttempts bounds how often a read-only handle reads again because
// another process kept changing the file under it.
const readAttempts = 4

// read runs fn on the handle's database: the read-write one, or the
// read-only one, again when the file changed under an immutable read.
func read[T any](ctx context.Context, d *drv, fn func(ctx context.Context, db *sql.DB) (T, error)) (T, error) {
	var v T
	if d.ro == nil {
		if err := d.lock(ctx); err != nil {
			return v, err
		}
		defer d.unlock()
		err := d.retry(ctx, func() (err error) {
			v, err = fn(ctx, d.db)
			return err
		})
		return v, err
	}
	var zero T
	for range readAttempts {
		db, immutable, err := d.ro.get(ctx)
		if err != nil {
			return zero, err
		}
		err = d.retry(ctx, func() (err error) {
			v, err = fn(ctx, db)
			return err
		})
		d.ro.mu.Lock()
		fresh := !immutable || d.ro.unchanged()
		d.ro.mu.Unlock()
		if fresh {
			return v, err
		}
		d.ro.stale(db)
	}
	return zero, fmt.Errorf("sqlite: %s changed under %d reads in a row; try again", d.path, readAttempts)
}

// busyQuantum is SQLite's busy_timeout on every connection: SQLite's own
// busy handler waits up to this long for a lock (sleeping 1, 2, 5, 10, 15,
// 20 and 25 ms between tries), then [drv.retry] checks the context and
// tries again, up to Options.BusyTimeout. So a wait for another
// connection's transaction ends within busyQuantum of the context's end,
// even for a statement that runs without the context's cancellation (see
// [drv.write]), while SQLite's schedule keeps the polling cheap: a shorter
// quantum with finer steps waited no less on this suite's 8 handles and
// spent a third more CPU.
const busyQuantum = 100 * time.Millisecond

// retry calls fn until it does not fail with SQLITE_BUSY, or until ctx
// ends. Like SQLite's busy_timeout, the budget, d.busy, counts the time
// spent waiting (SQLite's own waits of busyQuantum and the pauses here),
// not the time fn runs: on a machine short of CPU, where every
// transaction takes longer, a waiter does not give up sooner.
func (d *drv) retry(ctx context.Context, fn func() error) error {
	var waited time.Duration
	for {
		err := fn()
		if err == nil || !isBusy(err) || waited >= d.busy {
			return err
		}
		pause := rand.N(time.Millisecond) // spread the handles that woke together
		waited += busyQuantum + pause
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (waiting for another connection's transaction: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY: another connection
// holds the lock.
func isBusy(err error) bool {
	var se *sqlitedrv.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// The sqlite:// scheme of [broker.OpenStore].
func init() { broker.RegisterStore("sqlite", openURL) }

// openURL opens sqlite://PATH[?lease_ttl=…&max_message_bytes=…&busy_timeout=…&synchronous=…&source_pointer=…].
func openURL(ctx context.Context, _ *url.URL, raw string, oo broker.OpenOptions) (*broker.Store, error) {
	_, rest, _ := strings.Cut(raw, "://")
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return nil, fmt.Errorf("sqlite: empty path (want sqlite://./dlq.db or sqlite:///abs/dlq.db): %w", broker.ErrInvalidArgument)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("sqlite: query: %w: %w", err, broker.ErrInvalidArgument)
	}
	o := Options{StoreOptions: oo.Store}
	o.ReadOnly = o.ReadOnly || oo.ReadOnly
	for k, vs := range q {
		v := vs[len(vs)-1]
		var err error
		switch k {
		case "lease_ttl":
			o.LeaseTTL, err = positiveDuration(v)
		case "busy_timeout":
			o.BusyTimeout, err = positiveDuration(v)
		case "max_message_bytes":
			o.MaxMessageBytes, err = strconv.Atoi(v)
			if err == nil && o.MaxMessageBytes <= 0 {
				err = errors.New("not positive")
			}
		case "synchronous":
			o.Synchronous = v
		case "source_pointer":
			o.SourcePointers = vs
		default:
			err = errors.New("unknown parameter (known: lease_ttl, max_message_bytes, busy_timeout, synchronous, source_pointer)")
		}
		if err != nil {
			return nil, fmt.Errorf("sqlite: %s=%q: %w: %w", k, v, err, broker.ErrInvalidArgument)
		}
	}
	if oo.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, oo.ConnectTimeout)
		defer cancel()
	}
	d, err := open(ctx, path, &o, oo.Create && !oo.ReadOnly)
	if err != nil {
		return nil, err
	}
	return broker.NewStore("sqlite", d, &o.StoreOptions), nil
}

func positiveDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil && d <= 0 {
		err = errors.New("not positive")
	}
	return d, err
}
