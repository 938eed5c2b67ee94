package mysql

import (
	"strings"

	"github.com/geodlq/geodlq/broker/mysql/internal/schema"
)

// SchemaVersion is the version of the table this package reads and
// writes: the number of its migrations. [New] brings an older table up to
// it (unless ReadOnly) and refuses a newer one.
const SchemaVersion = 2

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
}}

func (d *driver) target() schema.Target {
	return schema.Target{Prefix: "mysql", Table: d.name, Render: d.render}
}

// render substitutes {t} (the quoted table), {s} (the quoted search
// table) and {n} (the bare table name).
func (d *driver) render(q string) string {
	return strings.NewReplacer("{t}", d.table, "{s}", d.search, "{n}", d.name).Replace(q)
}
