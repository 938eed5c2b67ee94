package mysql

import (
	"strings"

	"github.com/geodlq/geodlq/broker/mysql/internal/schema"
)

// SchemaVersion is the version of the table this package reads and
// writes: the number of its migrations. [New] brings an older table up to
// it (unless ReadOnly) and refuses a newer one.
const SchemaVersion = 3

// migrations are the table's steps, oldest first; {t} is the quoted table
// name. A step is a list of statements MySQL runs one by one; each must be
// atomic on its own (a CREATE TABLE with its indexes is), because MySQL has
// no transactional DDL.
var migrations = []schema.Step{{
	Version: 1,
	Name:    "dead-letter table with triage indexes",
	Statements: []string{`
CREATE TABLE {t} (
	id               BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
	destination      VARBINARY(255)  NOT NULL,
	msg_key          LONGBLOB        NULL,
	headers          LONGBLOB        NOT NULL COMMENT 'JSON object of the headers that are valid UTF-8',
	binary_headers   LONGBLOB        NULL     COMMENT 'JSON array of base64 [key, value] pairs of the other headers',
	body             LONGBLOB        NOT NULL COMMENT 'the message body byte for byte: the dlq.v1 envelope',
	is_envelope      BOOLEAN         NOT NULL DEFAULT FALSE,
	event_id         VARBINARY(4096) NULL,
	idempotency_key  MEDIUMBLOB      NULL,
	failure_class    VARBINARY(64)   NULL,
	failed_stage     VARBINARY(64)   NULL,
	epsg             BIGINT          NULL     COMMENT 'broker.EPSGOf: the geometry error EPSG, else source_epsg; 0 unknown',
	reason_kind      VARBINARY(256)  NULL,
	dead_lettered_us BIGINT          NULL     COMMENT 'dead_lettered_at, microseconds since the Unix epoch (UTC)',
	dead_lettered_ns SMALLINT        NULL     COMMENT 'nanoseconds of dead_lettered_at beyond its microsecond',
	loc_x            DOUBLE          NULL     COMMENT 'geometry_error.location',
	loc_y            DOUBLE          NULL,
	geometry_uri     VARBINARY(8192) NULL     COMMENT 'geometry.offload_uri',
	raw_payload_uri  VARBINARY(8192) NULL     COMMENT 'raw_payload_offload_uri',
	published_at     DATETIME(6)     NOT NULL COMMENT 'UTC, the database clock',
	deliveries       INT UNSIGNED    NOT NULL DEFAULT 0,
	lease_token      BINARY(16)      NULL,
	lease_until      DATETIME(6)     NULL     COMMENT 'UTC, the database clock',
	acked_at         DATETIME(6)     NULL     COMMENT 'UTC, the database clock; set: replayed',
	PRIMARY KEY (id),
	KEY ready (destination, acked_at, id),
	KEY triage_class (destination, failure_class, failed_stage),
	KEY triage_epsg (destination, epsg),
	KEY triage_kind (destination, reason_kind),
	KEY triage_time (destination, dead_lettered_us),
	KEY triage_event (event_id(255)),
	KEY triage_idempotency (idempotency_key(255)),
	KEY triage_location (loc_x, loc_y),
	KEY blob_geometry (geometry_uri(255)),
	KEY blob_raw_payload (raw_payload_uri(255)),
	KEY replayed (acked_at)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC COMMENT='geodlq dead-letter store (broker/mysql): one row per dead-lettered message'`},
}, {
	Version: 2,
	Name:    "summaries and attributes beside the body, sort and stats indexes, the search table",
	Statements: []string{`
ALTER TABLE {t}
	ADD COLUMN vertex_count        INT             NOT NULL DEFAULT 0,
	ADD COLUMN geometry_bytes      BIGINT          NOT NULL DEFAULT 0,
	ADD COLUMN attempts            INT             NOT NULL DEFAULT 0,
	ADD COLUMN dead_lettered_nanos BIGINT          NOT NULL DEFAULT -9223372036854775807,
	ADD COLUMN source              VARBINARY(512)  NULL COMMENT 'the event source at broker.DefaultSourcePointer',
	ADD COLUMN summary             MEDIUMBLOB      NULL COMMENT 'broker.Summary as JSON; NULL: written before schema version 2',
	ADD COLUMN attrs               BLOB            NULL COMMENT 'broker.Indexed.Attrs',
	ADD COLUMN indexed             BOOLEAN         NOT NULL DEFAULT FALSE COMMENT 'the columns above are set (false: written before schema version 2)',
	ADD KEY sort_time (dead_lettered_nanos, id),
	ADD KEY sort_vertices (vertex_count, id),
	ADD KEY sort_bytes (geometry_bytes, id),
	ADD KEY sort_attempts (attempts, id),
	ADD KEY stats (destination, failure_class, failed_stage, epsg, reason_kind, source, dead_lettered_us, acked_at, lease_until, is_envelope),
	ADD KEY unindexed (indexed, id)`, `
CREATE TABLE {s} (
	id     BIGINT UNSIGNED NOT NULL,
	search MEDIUMBLOB      NOT NULL COMMENT 'broker.Indexed.Search: what Filter.Text searches',
	PRIMARY KEY (id),
	CONSTRAINT {n}_search_record FOREIGN KEY (id) REFERENCES {t} (id) ON DELETE CASCADE
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC COMMENT='geodlq (broker/mysql): the search text of each record, narrow, for Filter.Text'`},
}, {
	Version: 3,
	Name:    "counts kept by triggers for Stats and Page.Total; an index of the leased rows",
	// Every statement can run again: a step cut short (MySQL has no
	// transactional DDL) is run from its start by the next migration.
	// The counts are rebuilt from the records under LOCK TABLES, with the
	// triggers created under the same lock, so they count every record
	// exactly once however many times this runs.
	Statements: []string{`
CREATE TABLE IF NOT EXISTS {c} (
	destination   VARBINARY(255) NOT NULL,
	failure_class VARBINARY(64)  NOT NULL,
	failed_stage  VARBINARY(64)  NOT NULL,
	epsg          BIGINT         NOT NULL,
	reason_kind   VARBINARY(256) NOT NULL,
	source        VARBINARY(512) NOT NULL,
	is_envelope   BOOLEAN        NOT NULL,
	replayed      BOOLEAN        NOT NULL,
	n             BIGINT         NOT NULL,
	PRIMARY KEY (destination, failure_class, failed_stage, epsg, reason_kind, source, is_envelope, replayed)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC COMMENT='geodlq (broker/mysql): the records of {n} by their fields (with {n}_count_log), for Stats and Page.Total'`, `
CREATE TABLE IF NOT EXISTS {l} (
	seq           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
	destination   VARBINARY(255) NOT NULL,
	failure_class VARBINARY(64)  NOT NULL,
	failed_stage  VARBINARY(64)  NOT NULL,
	epsg          BIGINT         NOT NULL,
	reason_kind   VARBINARY(256) NOT NULL,
	source        VARBINARY(512) NOT NULL,
	is_envelope   BOOLEAN        NOT NULL,
	replayed      BOOLEAN        NOT NULL,
	n             INT            NOT NULL,
	PRIMARY KEY (seq)
) ENGINE=InnoDB ROW_FORMAT=DYNAMIC COMMENT='geodlq (broker/mysql): changes to {n}_counts not yet folded into it, appended by the triggers of {n}'`,
		// Stats moves the records under a live lease from pending to
		// leased: few rows, found by this index (added unless a cut-short
		// run added it already).
		`SET @geodlq_ddl = IF(EXISTS(SELECT 1 FROM information_schema.STATISTICS
	WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{n}' AND INDEX_NAME = 'leased'),
	'DO 0', 'ALTER TABLE {t} ADD KEY leased (lease_until)')`,
		`PREPARE geodlq_ddl FROM @geodlq_ddl`,
		`EXECUTE geodlq_ddl`,
		`DEALLOCATE PREPARE geodlq_ddl`,
		// The table will be locked: the count below reads it without row
		// locks (in REPEATABLE READ an INSERT … SELECT would lock every row
		// it reads, and reach each one's clustered record to do so, rather
		// than read the covering stats index alone). Set before LOCK
		// TABLES, whose InnoDB transaction keeps the level it began with;
		// the session is the migration's own: its connection is not used
		// again (see schema.Migrate).
		`SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED`,
		// From here to UNLOCK TABLES no other session writes the table:
		// the counts rebuilt below are those of every record, and every
		// later write goes through the triggers.
		`LOCK TABLES {t} WRITE, {s} WRITE, {c} WRITE, {l} WRITE`,
		`DROP TRIGGER IF EXISTS {n}_count_insert`,
		`DROP TRIGGER IF EXISTS {n}_count_update`,
		`DROP TRIGGER IF EXISTS {n}_count_delete`,
		`
CREATE TRIGGER {n}_count_insert AFTER INSERT ON {t} FOR EACH ROW
INSERT INTO {l} (destination, failure_class, failed_stage, epsg, reason_kind, source, is_envelope, replayed, n)
VALUES (NEW.destination, COALESCE(NEW.failure_class, ''), COALESCE(NEW.failed_stage, ''), COALESCE(NEW.epsg, 0),
	COALESCE(NEW.reason_kind, ''), COALESCE(NEW.source, ''), NEW.is_envelope, NEW.acked_at IS NOT NULL, 1)`,
		`
CREATE TRIGGER {n}_count_delete AFTER DELETE ON {t} FOR EACH ROW
INSERT INTO {l} (destination, failure_class, failed_stage, epsg, reason_kind, source, is_envelope, replayed, n)
VALUES (OLD.destination, COALESCE(OLD.failure_class, ''), COALESCE(OLD.failed_stage, ''), COALESCE(OLD.epsg, 0),
	COALESCE(OLD.reason_kind, ''), COALESCE(OLD.source, ''), OLD.is_envelope, OLD.acked_at IS NOT NULL, -1)`,
		// An update is counted only when a counted field changes (an
		// acknowledgement: replayed; the index backfill: source); a lease,
		// a renewal or a release changes none.
		`
CREATE TRIGGER {n}_count_update AFTER UPDATE ON {t} FOR EACH ROW
IF NOT (OLD.destination <=> NEW.destination AND OLD.failure_class <=> NEW.failure_class AND OLD.failed_stage <=> NEW.failed_stage
	AND OLD.epsg <=> NEW.epsg AND OLD.reason_kind <=> NEW.reason_kind AND OLD.source <=> NEW.source
	AND OLD.is_envelope <=> NEW.is_envelope AND (OLD.acked_at IS NULL) = (NEW.acked_at IS NULL)) THEN
	INSERT INTO {l} (destination, failure_class, failed_stage, epsg, reason_kind, source, is_envelope, replayed, n)
	VALUES (OLD.destination, COALESCE(OLD.failure_class, ''), COALESCE(OLD.failed_stage, ''), COALESCE(OLD.epsg, 0),
		COALESCE(OLD.reason_kind, ''), COALESCE(OLD.source, ''), OLD.is_envelope, OLD.acked_at IS NOT NULL, -1),
	(NEW.destination, COALESCE(NEW.failure_class, ''), COALESCE(NEW.failed_stage, ''), COALESCE(NEW.epsg, 0),
		COALESCE(NEW.reason_kind, ''), COALESCE(NEW.source, ''), NEW.is_envelope, NEW.acked_at IS NOT NULL, 1);
END IF`,
		`DELETE FROM {l}`,
		`DELETE FROM {c}`,
		`
INSERT INTO {c} (destination, failure_class, failed_stage, epsg, reason_kind, source, is_envelope, replayed, n)
SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0), COALESCE(reason_kind, ''),
	COALESCE(source, ''), is_envelope, acked_at IS NOT NULL, COUNT(*)
FROM {t} FORCE INDEX (stats) GROUP BY 1, 2, 3, 4, 5, 6, 7, 8`,
		`UNLOCK TABLES`,
	},
}}

func (d *driver) target() schema.Target {
	return schema.Target{Prefix: "mysql", Table: d.name, Render: d.render}
}

// render substitutes {t} (the quoted table), {s} (the quoted search
// table), {c} and {l} (the quoted counts and count log), and {n} (the bare
// table name).
func (d *driver) render(q string) string {
	return strings.NewReplacer("{t}", d.table, "{s}", d.search, "{n}", d.name,
		"{c}", schema.Quote(d.name+"_counts"), "{l}", schema.Quote(d.name+"_count_log")).Replace(q)
}
