// Package postgis is a geodlq dead-letter store in a PostgreSQL table with
// PostGIS, over a *pgxpool.Pool (pgx v5). [New] returns the portable
// [*broker.Store] — a Publisher, a DeadLetterSource, a Limiter, and a
// Lister, Statser and Purger done in SQL — and the package passes
// broker/brokertest like every other adapter. [NewConsumer] consumes a
// destination of the table as a work queue.
//
// # Guarantees
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Fetch returns the oldest rows (lowest id, a bigserial) first, so
//	            records one publisher wrote in sequence, with the same key or
//	            not, come back in that order.
//	Durability  A write is one INSERT, committed on its own: Publish returns once
//	            PostgreSQL committed it, as durable as synchronous_commit makes
//	            commits ("on", the default, waits for the WAL flush and any
//	            synchronous standbys). A caller's cancellation does not abandon
//	            an INSERT once sent: Publish waits for its outcome (up to
//	            StoreOptions.CancelGrace, 2 s; then ErrOutcomeUnknown), so a
//	            write is never reported failed yet committed.
//	Redelivery  Fetch leases rows with SELECT ... FOR UPDATE SKIP LOCKED and
//	            lease_until = now() + LeaseTTL (30 s) on the database's clock.
//	            A replayer that crashes loses nothing: its rows are fetchable
//	            again once lease_until passes. Renew moves lease_until to
//	            LeaseTTL from now. Renew, Ack and Release check the lease
//	            token: they work after lease_until until another Fetch takes the
//	            row, then fail with broker.ErrLeaseLost. RenewBatch and AckBatch
//	            (broker.BatchSettler) do the same for many records in one
//	            UPDATE, each row fenced by its own token in its WHERE.
//	            Serialization failures, deadlocks and lock timeouts are run
//	            again.
//	Size limit  Body at most MaxMessageBytes, 64 MiB by default (the row holds
//	            the body twice; keep it well under PostgreSQL's 1 GB field
//	            limit), reported as the store's broker.Limiter. Over it:
//	            *classify.TooLargeError and nothing is stored. Never truncated.
//	Headers     Every header of the message (on a dead-letter write,
//	            broker.Headers: idempotency-key, dlq-event-id, dlq-class,
//	            dlq-stage, dlq-destination, dlq-schema, dlq-epsg when known) in
//	            the jsonb column headers; a key or value that is not clean text
//	            (invalid UTF-8, NUL) goes base64 in binary_headers, so all come
//	            back byte for byte. No budget. The key is the bytea msg_key.
//	Body        The dlq.v1 envelope, byte for byte, in the bytea column body
//	            (replay restores from it); again as jsonb in envelope (NULL when
//	            jsonb refuses it), with triage columns and the geom and location
//	            geometries. Any other body is stored as it is.
//	Attempts    The deliveries column, incremented by every Fetch that leases
//	            the row: Record.Deliveries and Message.DeliveryAttempt.
//	Duplicates  At most one pending or leased row per destination and
//	            idempotency key (a unique partial index; a body that is not an
//	            envelope is keyed by its idempotency-key header, when it has
//	            one): a second write is a no-op that succeeds and is counted on
//	            the row (duplicates). One that arrives while the row is leased
//	            makes Ack fail with ErrDeadLetteredAgain (wrapping ErrLeaseLost)
//	            and returns the row to pending. A replayed row frees its key.
//
// # The table
//
// Each message is one row: the body byte for byte (bytea — the envelope's
// exact encoding, which replay restores from; jsonb would not keep the
// bytes), the envelope again as jsonb for ad-hoc queries, indexed triage
// columns (failure_class, failed_stage, epsg, reason_kind, event_id,
// idempotency_key, source_topic, dead_lettered_at), the replay state
// (status pending, leased or replayed; lease_until, deliveries,
// replayed_at, duplicates), and two PostGIS columns:
//
//   - geom geometry: the envelope's inline geometry as ST_GeomFromGeoJSON
//     parses it, with the SRID the envelope records (broker.EPSGOf: the
//     geometry error's EPSG for a CRS mismatch, else source_epsg), 4326
//     when the payload declared no CRS (RFC 7946's OGC:CRS84), 0 when it
//     declared one nobody could resolve or whose code is beyond PostGIS's
//     SRIDs. Invalid geometries are stored as they are — PostGIS allows it,
//     and ST_IsValidDetail(geom) then gives GEOS's own verdict. The column
//     is plain geometry, not geometry(Geometry): that typmod refuses Z
//     coordinates, which GeoJSON allows. PostGIS 3.3 parses bare NaN and
//     Infinity tokens, so such geometries are stored, and ST_IsValidDetail
//     reports their "Invalid Coordinate".
//   - geom_status says why geom is set or not: parsed; offloaded (the
//     geometry was offloaded and offload_uri keeps the pointer — the store
//     never fetches blobs); missing (the event had none); not_text (not
//     UTF-8 text); unparseable (PostGIS refused it: geom_error has its
//     message — wrong nesting, an unknown type); none (the body is not a
//     dlq.v1 envelope).
//   - location geometry(Point): the geometry error's location, in the
//     same SRID.
//
// The indexes — GiST on geom and on ST_SetSRID(location, 0), B-trees on
// the triage columns — cover the records not yet replayed, the working
// set: leasing a row changes no indexed column (so PostgreSQL can update it
// in place, HOT; large values are toasted out of line and the table's
// fillfactor is 80 to leave room), acknowledging one touches two indexes,
// and replayed rows are history, kept until a purge.
//
// # Semantics
//
// Leases: Fetch takes rows with SELECT … FOR UPDATE SKIP LOCKED and marks
// them leased in the same statement, with a fresh token and lease_until =
// now() + LeaseTTL on the database's clock, so workers on any number of
// machines never hold the same row and need no synchronised clocks. Ack
// marks the row replayed and keeps it; Purge deletes old ones.
//
// Duplicates: writing a duplicate of a pending or leased record is a no-op
// that succeeds — a dead-letter write retried after a timeout stores
// nothing twice. Replayed records free their key, so a later failure of a
// replayed event is a new record; and a duplicate that arrives while the
// record is leased makes the replayer's Ack fail with
// [ErrDeadLetteredAgain], returning the record to pending, so the new
// failure is not lost.
//
// Filters: every [broker.Filter] field is a SQL condition, matching
// exactly what Filter.MatchRecord accepts: record ids, classes, stages,
// reason kinds, EPSG codes (0 = unknown), event ids, the dead-letter time
// to the nanosecond (dead_lettered_ns keeps what timestamptz cannot), and
// BBox against the geometry error's location (edges included, coordinates
// compared whatever the SRID, as Match does): a GiST-indexed && with the
// box, then exact coordinate comparisons — not ST_Intersects, whose
// floating-point side-of-edge test counts points just outside tiny or huge
// boxes as on their boundary. Records that are not envelopes match only
// filters on IDs alone. To select by the stored geometry itself, with
// ST_Intersects, use [ListIntersecting].
//
// Triage: List pages by id both ways, with an opaque cursor; Stats counts
// from the counts of version 4 where they answer (see below), else with
// one GROUP BY by destination, class, stage, EPSG, reason kind and,
// with a Bucket, date_bin over dead_lettered_at; Purge selects, deletes
// and checks blob references in one transaction that holds off writers,
// never deletes a leased record, and reads only indexes for the check.
//
// # Migrations
//
// Options.Create (or broker.OpenStore with Create) creates the schema,
// the table and its indexes, and records each applied step of
// [Migrations] in {table}_migrations; it is idempotent and safe to run
// concurrently. PostGIS must be installed in a schema on the connections'
// search_path (public, by default); migrating creates the extension when
// it is missing and the role may, and pg_trgm too (without it the text
// search reads every row).
//
// Version 3 keeps beside each body what [broker.IndexOf] computes when the
// record is written — its summary, attributes and search text — and its
// vertex count, geometry size, attempts and dead-letter time in indexed
// columns, with a trigram index (pg_trgm, GIN) on the search text: every
// [broker.SortKey] pages with a keyset cursor, a page of summaries reads
// no body, Filter.Text is a LIKE the trigram index serves, and the source
// at any pointer is cut from the attributes in SQL (the default pointer's
// is a column of its own). Migrating to it fills in those columns for the
// rows already there, 500 per statement, after the schema step commits
// (about a minute per million rows); rows an older geodlq writes later
// are summarised from their bodies when listed, and indexed by the next
// migration run. A handle on a table of an older version (not migrated)
// lists the old way, and the portable store sorts, counts and searches by
// reading every record; it notices a migration within 10 seconds.
//
// Version 4 keeps counts: {table}_counts holds the records by destination,
// class, stage, EPSG, reason kind, default source, whether they are
// envelopes and whether they are replayed, and statement triggers append
// every change (over the statement's transition tables, a row per group)
// to {table}_count_log, which a handle folds into the counts under an
// advisory lock once it has written, acknowledged or deleted 4,096 rows,
// so that concurrent writers never wait on a shared counter row. Stats
// without a Bucket, and Page.Total, for filters on those fields only,
// read the counts and the log (a few thousand rows), and take the records
// under a live lease from {table}_leased (a partial index on lease_until
// of the leased rows): Stats costs the same at a million records as at a
// thousand. Other filters, a Bucket or another source pointer group the
// records as before. The migration counts the rows already there.
//
// # URL
//
// Importing the package registers the schemes postgres and postgresql
// with [broker.OpenStore]:
//
//	postgres://USER[:PASSWORD]@HOST[:PORT]/DB?geodlq_schema=S&geodlq_table=T&lease_ttl=30s&max_message_bytes=67108864
//
// names the table S.T (default geodlq.dead_letters). lease_ttl and
// max_message_bytes set Options.LeaseTTL and MaxMessageBytes; every other
// parameter (sslmode, pool_max_conns, connect_timeout, …) goes to pgx. The
// store owns the pool it opens and closes it on Close. OpenOptions apply:
// every connection the pool makes gives up after ConnectTimeout (10 s by
// default; pgx's own default would wait two minutes on a server that
// accepts and never answers), and the open fails within it. Create
// migrates. Without Create nothing is written, and a database without the
// table is refused with an error wrapping [broker.ErrNoStore] (so is a
// database that does not exist). ReadOnly opens read-only sessions
// (default_transaction_read_only): the server refuses every write, so
// Publish, Fetch, Renew, Ack, Release and a Purge that is not a dry run fail.
//
// # As
//
// [broker.Store.As] sets a **pgxpool.Pool to the store's pool, and
// [Table] names the table for your own SQL, for example
//
//	SELECT id, ST_SRID(geom), ST_IsValidReason(geom), ST_AsText(location)
//	FROM geodlq.dead_letters
//	WHERE replayed_at IS NULL AND failure_class = 'invalid_geometry' AND NOT ST_IsValid(geom);
//
// (The table mixes SRIDs: compare geometries with ST_Intersects only among
// rows of one SRID, as [ListIntersecting] does.)
package postgis
