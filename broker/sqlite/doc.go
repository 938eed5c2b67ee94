// Package sqlite is geodlq's embedded dead-letter store: one SQLite file
// (through the pure-Go modernc.org/sqlite, so no cgo and no server), in WAL
// mode with synchronous=FULL, so that a write is on disk when Publish
// returns. [Open] returns the portable [*broker.Store]: a publisher, a
// dead-letter source, a [broker.Limiter], and a [broker.Lister],
// [broker.Statser] and [broker.Purger] that answer in SQL. It passes
// broker/brokertest like every other adapter.
//
// Records keep the envelope's exact bytes and, beside them, indexed columns
// for class, stage, EPSG, reason kind, dead-letter time and the geometry
// error's location, so that every [broker.Filter] field, List, Stats
// (GROUP BY, with an optional time bucket) and Purge run in SQL without
// decoding. Acknowledged records are kept, marked replayed, until purged.
//
// Each record also keeps what [broker.IndexOf] computes when it is
// written: its summary (JSON), its attributes and its search text, with
// its vertex count, geometry size and attempts in indexed columns, and
// the search text in an FTS5 trigram index (dlq_text). Triggers keep
// dlq_counts: the records by destination, class, stage, EPSG, reason
// kind, source and replayed or not. So a listing sorted by any
// [broker.SortKey] pages with a keyset cursor across all pages, a page of
// summaries reads no body, Stats and Page.Total read the counts (or, for
// a filter or bucket the counts do not cover, an index), and Filter.Text
// finds a substring through the trigram index. The body is the table's
// last column, so reading the others never reads it.
//
// # Schema versions
//
// The file's PRAGMA user_version is its layout: 4 today. Opening a file
// of version 3 read-write adds the indexes of a listing sorted by attempts
// under a class, reason kind or EPSG filter (about 5 s per million
// records); one of version 2 also adds the counts and the text index; a file of
// version 0 (made before the summaries) read-write rebuilds its table
// in one transaction — every row copied, ids, statuses and the id
// sequence kept — and then indexes every row, a batch of 500 per
// transaction; it takes about a minute per million records, and needs
// the file's size again in free disk space while it runs. A read-only
// handle never migrates: on a file of version 3 it lists in SQL without
// version 4's indexes; on an older one it lists the old way, and
// the portable store sorts, counts, summarises and searches by reading
// every record. Rows an older geodlq writes into a file of version 2 (it
// fills in only the columns it knows) are summarised from their bodies
// when listed, and indexed by the next read-write open.
//
// SQLite was chosen over a pure key-value file (bbolt, pebble) because the
// operator's questions are queries: "invalid geometries in EPSG:3857 since
// Monday", "counts by class and stage". Any destination name works, so one
// file can also serve as the source queue and re-injection target of a
// small pipeline, as the quickstart does; [NewConsumer] consumes a
// destination.
//
// # URL
//
// Importing the package registers the sqlite scheme with
// [broker.OpenStore]:
//
//	sqlite://./dlq.db                  relative to the working directory
//	sqlite:///var/lib/geodlq/dlq.db    absolute
//	sqlite://./dlq.db?lease_ttl=1m&max_message_bytes=1048576&busy_timeout=5s&synchronous=NORMAL
//	sqlite://./dlq.db?source_pointer=/properties/provider   index the source there (Options.SourcePointers; repeatable)
//
// The path is taken verbatim (no percent-decoding). OpenOptions.Create
// allows creating the file and its table; without it a missing or empty
// file is refused with [broker.ErrNoStore]. OpenOptions.ReadOnly opens as
// StoreOptions.ReadOnly does. A path that is not a regular file (a FIFO, a
// device such as /dev/null, a directory), a file that is not a SQLite
// database, and a database without the store's table are refused with
// [broker.ErrNoStore] before anything is written, and opening is bounded by
// OpenOptions.ConnectTimeout.
//
// # Read-only
//
// A read-only store (StoreOptions.ReadOnly) never creates, migrates or writes,
// and leaves no -journal, -wal or -shm file behind. SQLite's read-only mode
// would create the -wal and -shm files of a WAL database no process has
// open, and could not remove them, so such a database is opened immutable
// (no files, no locks); each read then checks that the file did not change
// meanwhile and, if another process wrote, reads again on a fresh
// connection.
//
// # As
//
// [broker.Store.As] accepts a **database/sql.DB: the pool on the file (one
// connection; read-only for a read-only store, and then replaced when
// another process changes the file). Queries are fine; writes bypass the
// store's guarantees.
//
// # Guarantees
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Fetch returns the oldest rows (lowest id) first: publish order
//	            per destination.
//	Durability  A write is one statement in its own transaction, in WAL mode
//	            with synchronous=FULL by default: on disk when Publish returns,
//	            and it survives power loss. Options.Synchronous "NORMAL"
//	            survives a process crash only.
//	Outcome     Certain: once a write has SQLite's write lock, neither
//	            cancellation nor a deadline interrupts it. Publish, Fetch, Renew,
//	            Ack and Release return nil exactly when their transaction
//	            committed; otherwise nothing changed. Only the wait for the
//	            lock (up to Options.BusyTimeout, 10 s) ends with the context,
//	            within 0.1 s.
//	Redelivery  Fetch leases rows for Options.LeaseTTL (30 s) by the local
//	            clock (Options.Now; processes sharing the file compare their own
//	            clocks): a crashed replayer's rows are fetchable again once it
//	            passes. Renew sets the row's lease to LeaseTTL from now. Renew,
//	            Ack and Release check the lease token: they work after the
//	            lease ran out until another Fetch takes the row, then fail
//	            with ErrLeaseLost. Record.LeaseExpires is the lease's end.
//	Size limit  Body at most Options.MaxMessageBytes, 64 MiB by default (at most
//	            999 MiB with its headers and key: SQLite's row limit). Over it:
//	            *classify.TooLargeError and nothing is stored. Never truncated.
//	Headers     Every header of the message (on a dead-letter write,
//	            broker.Headers: idempotency-key, dlq-event-id, dlq-class,
//	            dlq-stage, dlq-destination, dlq-schema, dlq-epsg when known) as
//	            one JSON object in the headers column (encoding/json: invalid
//	            UTF-8 becomes U+FFFD). No budget. The key is the BLOB msg_key.
//	Body        The dlq.v1 envelope, byte for byte, in the BLOB column body,
//	            beside the indexed triage columns. Any bytes are accepted.
//	Attempts    The deliveries column, incremented by every Fetch that leases
//	            the row: Record.Deliveries and Message.DeliveryAttempt.
//	Duplicates  Not deduplicated: every Publish inserts a row (and, its outcome
//	            being certain, a retry follows only a write that did not
//	            happen). The envelope's idempotency key makes a copy harmless.
//	            Ack marks a row replayed and keeps it until Purge deletes it.
package sqlite
