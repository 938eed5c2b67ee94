// Package postgis is a geodlq dead-letter store in a PostgreSQL table with
// PostGIS, over the caller's *pgxpool.Pool (pgx v5). A [Store] is a
// [broker.Publisher], a [broker.Limiter] and a [broker.DeadLetterSource],
// and passes broker/brokertest like every other adapter.
//
// # Guarantees
//
// The sections below give the details.
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Fetch returns the oldest rows (lowest id, a bigserial) first, so
//	            records one publisher wrote in sequence, with the same key or
//	            not, come back in that order.
//	Durability  A write is one INSERT, committed on its own: Publish returns once
//	            PostgreSQL committed it, as durable as synchronous_commit makes
//	            commits ("on", the default, waits for the WAL flush and any
//	            synchronous standbys). PublishBatch: one transaction, all or none.
//	Redelivery  Fetch leases rows with SELECT ... FOR UPDATE SKIP LOCKED and
//	            lease_until = now() + LeaseTTL (30 s) on the database's clock.
//	            A replayer that crashes loses nothing: its rows are fetchable
//	            again once lease_until passes. Ack and Release check the lease
//	            token: they work after lease_until until another Fetch takes the
//	            row, then fail with ErrLeaseLost.
//	Size limit  Body at most Options.MaxMessageBytes, 64 MiB by default
//	            (DefaultMaxMessageBytes; the row holds the body twice, keep it
//	            well under PostgreSQL's 1 GB field limit). Over it:
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
//	            geometries.
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
// Each dead-lettered message is one row: the body byte for byte (bytea —
// the envelope's exact encoding, which replay restores from; jsonb would
// not keep the bytes), the envelope again as jsonb for ad-hoc queries,
// indexed triage columns (failure class, failed stage, EPSG, reason kind,
// event id, idempotency key, source topic, dead-letter time), the replay
// state, and two PostGIS columns:
//
//   - geom geometry: the envelope's inline geometry as ST_GeomFromGeoJSON
//     parses it, with the SRID the envelope records (broker.EPSGOf: the
//     geometry error's EPSG for a CRS mismatch, else source_epsg), 4326
//     when the payload declared no CRS (RFC 7946's OGC:CRS84), 0 when it
//     declared one nobody could resolve. Invalid geometries are stored as
//     they are — PostGIS allows it, and ST_IsValidDetail(geom) then gives
//     GEOS's own verdict. The column is plain geometry, not
//     geometry(Geometry): that typmod refuses Z coordinates, which GeoJSON
//     allows. geom is NULL, and geom_status says why, when the geometry
//     was offloaded (offload_uri keeps the pointer; the store never
//     fetches blobs), missing from the event, not UTF-8 text, or refused by
//     PostGIS (geom_error has its message: wrong nesting, an unknown type).
//     PostGIS 3.3 does parse bare NaN and Infinity tokens, so such
//     geometries are stored, and ST_IsValidDetail reports their "Invalid
//     Coordinate".
//   - location geometry(Point): the geometry error's location, in the
//     same SRID.
//
// The indexes — GiST on geom and on ST_SetSRID(location, 0), B-trees on
// the triage columns — cover the records not yet replayed, the working
// set: leasing a row changes no indexed column (so PostgreSQL can update it
// in place, HOT; large values are toasted out of line and the table's
// fillfactor is 80 to leave room), acknowledging one touches two indexes,
// and replayed rows are history, kept until [Store.Purge].
//
// # Semantics
//
// Durability: a write is one INSERT committed on its own, so Publish
// returns once PostgreSQL has committed it, as durable as the server's
// synchronous_commit makes commits ("on", the default, waits for the WAL
// flush and synchronous standbys). Do not turn it off for this table's
// database.
//
// Duplicates: at most one pending-or-leased record per destination and
// idempotency key (a unique partial index). Writing a duplicate is a no-op
// that succeeds — a dead-letter write retried after a timeout stores
// nothing twice — and counts the duplicate on the existing row. Replayed
// records free their key, so a later failure of a replayed event is a new
// record; and a duplicate that arrives while the record is leased makes
// the replayer's Ack fail with [ErrDeadLetteredAgain] and returns the
// record to pending, so the new failure is not lost. Bodies that are not
// envelopes are keyed by their idempotency-key header, if any.
//
// Leases: Fetch takes rows with SELECT … FOR UPDATE SKIP LOCKED and marks
// them leased in the same statement, with a fresh token and lease_until =
// now() + LeaseTTL on the database's clock, so workers on any number of
// machines never hold the same row and need no synchronised clocks. A
// lease that expires makes its row fetchable again (with deliveries
// incremented); Ack and Release check the token, and fail with an error
// wrapping [broker.ErrLeaseLost] once another worker fetched the row. Ack
// marks the row replayed and keeps it ([Store.Purge] deletes old ones).
//
// Ordering: Fetch returns the oldest rows (lowest id) first, so records a
// single publisher wrote with the same key come back in publish order.
//
// Filters: every [broker.Filter] field is a SQL condition, matching exactly
// what Filter.Match accepts: classes, stages, EPSG codes (0 = unknown),
// event ids, the dead-letter time to the nanosecond, and BBox against the
// geometry error's location (edges included, coordinates compared whatever
// the SRID, as Match does): a GiST-indexed && with the box, then exact
// coordinate comparisons — not ST_Intersects, whose floating-point
// side-of-edge test counts points just outside tiny or huge boxes as on
// their boundary. Records that are not envelopes match only the zero
// filter. To select by the geometry itself, with ST_Intersects, use
// [ListOptions].Intersects.
//
// Limits: bodies over MaxMessageBytes (default 64 MiB) are refused with a
// [*classify.TooLargeError] and nothing is stored.
//
// Triage: [Store.List] and [Store.Stats] query without leasing, by the
// same filters, and Stats counts by class, stage, EPSG, reason kind and
// time bucket.
//
// # Migrations
//
// [Store.Migrate] (or Options.Migrate) creates the schema, the table and
// its indexes, and records each applied step of [Migrations] in
// {table}_migrations; it is idempotent and safe to run concurrently.
// PostGIS must be installed in a schema on the connections' search_path
// (public, by default); Migrate creates the extension when it is missing
// and the role may.
//
// # As
//
// The store works on the caller's pool, which [Store.Pool] returns and
// [Store.As] sets through a **pgxpool.Pool; [Store.Table] names the table
// for your own SQL, for example
//
//	SELECT id, ST_SRID(geom), ST_IsValidReason(geom), ST_AsText(location)
//	FROM geodlq.dead_letters
//	WHERE replayed_at IS NULL AND failure_class = 'invalid_geometry' AND NOT ST_IsValid(geom);
//
// (The table mixes SRIDs: compare geometries with ST_Intersects only among
// rows of one SRID, as [ListOptions].Intersects does.)
package postgis
