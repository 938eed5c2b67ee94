// Package mysql is a geodlq dead-letter store in a MySQL or MariaDB
// (InnoDB) table, over the caller's *sql.DB with
// github.com/go-sql-driver/mysql. [New] returns the portable
// [*broker.Store]: a [broker.Publisher], [broker.DeadLetterSource] and
// [broker.Limiter] that lists, counts and purges in SQL, and passes
// broker/brokertest like every other adapter. [NewConsumer] reads a
// destination of the table as a work queue. Its claims store for
// exactly-once replay is the package broker/mysql/mysqlclaims, in the same
// module.
//
// It needs MariaDB 10.6 or MySQL 8.0.1 or later (FOR UPDATE SKIP LOCKED).
//
// # Guarantees
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Fetch returns the oldest rows (lowest id, AUTO_INCREMENT) first,
//	            so records one publisher wrote in sequence, with the same key or
//	            not, come back in that order.
//	Durability  A write is one INSERT in its own transaction: Publish returns
//	            once InnoDB committed it, as durable as the server's
//	            innodb_flush_log_at_trx_commit makes commits (1, the default,
//	            flushes the redo log at every commit). Its outcome is certain: an
//	            error means nothing was stored (a COMMIT whose answer was lost
//	            is checked), except an error wrapping broker.ErrOutcomeUnknown
//	            when the server could not be asked.
//	Redelivery  Fetch leases rows with SELECT ... FOR UPDATE SKIP LOCKED and
//	            lease_until = UTC_TIMESTAMP(6) + LeaseTTL (30 s) on the
//	            database's clock. A replayer that crashes loses nothing: its rows
//	            are fetchable again once lease_until passes. Renew moves
//	            lease_until to LeaseTTL from now. Renew, Ack and Release check
//	            the lease token: they work after lease_until until another
//	            Fetch takes the row, then fail with broker.ErrLeaseLost.
//	            Deadlock victims and lock-wait timeouts are run again.
//	Size limit  Body at most MaxMessageBytes: by default the server's
//	            max_allowed_packet, read by New, less 1 MiB (15 MiB on a default
//	            MariaDB, 16 MiB packet), at most 64 MiB. The whole row (body,
//	            key, headers, triage columns) must fit max_allowed_packet too.
//	            Over either: *classify.TooLargeError and nothing is stored.
//	            Never truncated. Raise max_allowed_packet to store more.
//	Headers     Every header of the message, byte for byte: those that are
//	            valid UTF-8 as a JSON object (column headers), the others base64
//	            (binary_headers). No budget beyond the packet. The key is the
//	            LONGBLOB msg_key (NULL for a nil key).
//	Body        The dlq.v1 envelope, byte for byte, in the LONGBLOB body
//	            (replay restores from it), with indexed triage columns beside it.
//	Attempts    The deliveries column, incremented by every Fetch that leases
//	            the row: Record.Deliveries and Message.DeliveryAttempt.
//	Duplicates  Not deduplicated: every Publish that returns nil stored one row,
//	            and a Publish that returns an error stored none, so a retry adds
//	            no copy. A write whose response the caller lost anyway is a
//	            second row; the envelope's idempotency key (and a claims store)
//	            makes its replay harmless.
//
// # Table
//
// One row per dead-lettered message, in the table Options.Table (default
// geodlq_dead_letters) of the connection's database: the body, key and
// headers; indexed triage columns — destination, failure_class,
// failed_stage, epsg ([broker.EPSGOf]), reason_kind, dead_lettered_us (the
// envelope's dead_lettered_at in microseconds since the Unix epoch, UTC,
// with the nanoseconds beyond in dead_lettered_ns, so time filters are
// exact), event_id, idempotency_key, the geometry error's location loc_x,
// loc_y, and the offload URIs geometry_uri and raw_payload_uri; and the
// queue state — published_at, deliveries, lease_token, lease_until,
// acked_at (UTC DATETIME(6), the database's clock). Text is stored as
// bytes (VARBINARY, BLOB): comparisons are exact, never case- or
// trailing-space-insensitive, and no connection character set can change
// a byte. A body that is not an envelope, or whose envelope has a field
// longer than its column (envelope.Decode's limits keep every valid one
// within), has NULL triage columns and matches only the zero filter.
//
// Acknowledged rows are kept, as replayed history, until [broker.Store.Purge]
// deletes them.
//
// # Filters, listing, counting, purging
//
// Every [broker.Filter] field is a SQL condition, exactly as
// Filter.MatchRecord decides: record ids, event ids, classes, stages,
// reason kinds, EPSG codes, the dead-letter time to the nanosecond, and
// BBox against the geometry error's location (edges included). List pages
// by id in both directions (the cursor is the last id). Stats without a
// Bucket, and Page.Total, whose filter holds only classes, stages, reason
// kinds, EPSG codes and sources at the default pointer, are read from the
// counts (see Counts); any other Stats is one GROUP BY over the triage
// columns and, with a Bucket, the dead-letter time floored to a multiple
// of it since the epoch (in whole microseconds), and any other Page.Total
// a COUNT(*).
// Purge runs in one REPEATABLE READ transaction: SELECT … FOR UPDATE of
// the matching rows that are replayed (or, with IncludePending, not under
// a live lease), DELETE, and locking reads of the offload URIs they
// referenced in the remaining rows, whose next-key locks keep a writer
// from adding a reference before the transaction ends; a dry run is the
// same transaction rolled back.
//
// # Counts
//
// Since schema version 3 the table's records are counted by their fields
// (destination, class, stage, EPSG, reason kind, source, envelope or not,
// replayed or not; NULL as the empty string or 0) in {table}_counts, kept exact by row
// triggers on the table: every insert, delete, and update of a counted
// field (an acknowledgement, the index backfill; not a lease, a renewal or
// a release) appends ±1 rows to {table}_count_log (AUTO_INCREMENT seq), so
// writers never lock a row they share and never wait for one another. A
// handle folds the log into the counts after every 4096 rows it writes,
// acknowledges or purges, and at each read-write open: one READ COMMITTED
// transaction per 4096 log rows takes the committed ones with FOR UPDATE
// SKIP LOCKED (a writer's uncommitted rows are left for a later fold),
// adds their sums to the counts and deletes exactly those rows. A count
// reads the counts UNION ALL the log in one statement, hence one snapshot:
// each change is seen once, in the log or in the counts. Stats moves the
// records under a live lease (the leased index on lease_until finds them)
// from pending to leased, in the same REPEATABLE READ snapshot. A count
// thus reads a few thousand rows, not the table: geodlq stats at a million
// records takes about a second for the whole process, against 19 s
// before (see docs/benchmarks.md). The triggers need the TRIGGER
// privilege, and the migration LOCK TABLES.
//
// # Write outcome
//
// go-sql-driver interrupts a statement whose context ends by closing its
// connection: for an autocommit INSERT the server may still commit it.
// Publish and Ack run their statement in a transaction instead, so a
// write cut before its COMMIT (a context deadline, a driver readTimeout,
// a broken connection) is rolled back by the server and reported as not
// committed; a COMMIT whose answer is lost is checked on another
// connection with a locking read, which waits for the interrupted
// transaction to end. The portable store gives them a context without the
// caller's cancellation, bounded by StoreOptions.WriteTimeout.
//
// # URL
//
// Importing the package registers the mysql scheme with
// [broker.OpenStore]:
//
//	mysql://user:password@host:3306/database?geodlq_table=dead_letters&lease_ttl=30s&max_message_bytes=1048576
//
// geodlq_table, lease_ttl and max_message_bytes set [Options]; every other
// parameter is go-sql-driver's (tls, charset, readTimeout, …). The opener
// sets parseTime=true, readTimeout=2m and writeTimeout=2m unless the URL
// does (they bound a silent server for calls without a deadline; Stats
// over a very large table may need a longer readTimeout), and timeout to
// OpenOptions.ConnectTimeout, which also bounds the whole open: the
// connection, the server checks and the store check. OpenOptions.Create
// creates a missing table; OpenOptions.ReadOnly runs no migration and
// refuses writes. A database without the table (or that does not exist,
// or whose table of that name is not geodlq's) is an error wrapping
// [broker.ErrNoStore]. Closing a store the opener made closes its pool.
//
// # Migrations
//
// New brings the table up to [SchemaVersion] under the server-wide lock
// GET_LOCK('geodlq-migrate') and records each step in
// {table}_migrations; it is idempotent and safe to run from many
// processes at once. It creates a missing table only with Options.Create,
// never touches a table of the same name that has no bookkeeping table,
// and runs nothing with StoreOptions.ReadOnly (a read-only open of a table
// at another version is refused).
//
// Version 2 keeps beside each body what [broker.IndexOf] computes when the
// record is written — its summary and attributes, and its vertex count,
// geometry size, attempts and dead-letter time in indexed columns, with a
// covering index for Stats — and its search text in a narrow table of its
// own, {table}_search (deleted with the record, by a foreign key): every
// [broker.SortKey] pages with a keyset cursor, a page of summaries reads
// no body, and Filter.Text reads the narrow table (MySQL has no substring
// index), not the bodies. Migrating to it indexes the rows already there,
// 500 per transaction, before New returns (about two minutes per million
// rows); rows an older geodlq writes later are summarised from their
// bodies when listed, and indexed by the next read-write open.
//
// Version 3 adds the counts (see Counts) and the leased index. Migrating
// to it adds the index (online), then under LOCK TABLES … WRITE — no
// other session writes the table meanwhile — creates the triggers and
// rebuilds the counts from the records with one GROUP BY over the covering
// stats index. Every statement of the step can run again: a migration cut
// short (a crash, a lost connection, a context deadline; MySQL has no
// transactional DDL) leaves it unrecorded, and the next one drops and
// recreates the triggers and rebuilds the counts under the lock, so each
// record is counted exactly once whatever a cut-short run left and
// whatever was written through its triggers since. On a 1,000,000-row
// table the index takes about a minute and the GROUP BY holds writers off
// for tens of seconds on a loaded machine: open with a long enough
// deadline and readTimeout (OpenOptions.ConnectTimeout bounds the whole
// open, migration included).
//
// # As
//
// [broker.Store.As] sets a **sql.DB to the store's pool, for your own SQL:
//
//	SELECT failure_class, COUNT(*) FROM geodlq_dead_letters
//	WHERE acked_at IS NULL GROUP BY failure_class;
package mysql
