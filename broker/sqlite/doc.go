// Package sqlite is geodlq's embedded dead-letter store: one SQLite file
// (through the pure-Go modernc.org/sqlite, so no cgo and no server), in WAL
// mode with synchronous=FULL, so that a write is on disk when Publish
// returns. It is a [broker.Publisher], a [broker.DeadLetterSource] and a
// [broker.Limiter], and passes broker/brokertest like every other adapter.
//
// Records keep the envelope's exact bytes and, beside them, indexed columns
// for class, stage, EPSG, dead-letter time and the geometry error's
// location, so triage queries ([Store.List], [Store.Stats]) need no
// decoding. Acknowledged records are kept, marked replayed, until purged.
//
// SQLite was chosen over a pure key-value file (bbolt, pebble) because the
// operator's questions are queries: "invalid geometries in EPSG:3857 since
// Monday", "counts by class and stage". Any destination name works, so one
// file can also serve as the source queue and re-injection target of a
// small pipeline, as the quickstart does.
//
// # Guarantees
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Fetch returns the oldest rows (lowest id) first: publish order
//	            per destination.
//	Durability  A write is one INSERT in its own transaction, in WAL mode with
//	            synchronous=FULL by default: on disk when Publish returns, and
//	            it survives power loss. Options.Synchronous "NORMAL" survives a
//	            process crash only.
//	Redelivery  Fetch leases rows for Options.LeaseTTL (30 s) by the local
//	            clock (Options.Now; processes sharing the file compare their own
//	            clocks): a crashed replayer's rows are fetchable again once it
//	            passes. Ack and Release check the lease token: they work after
//	            the lease ran out until another Fetch takes the row, then fail
//	            with ErrLeaseLost.
//	Size limit  Body at most Options.MaxMessageBytes, 64 MiB by default. Over
//	            it: *classify.TooLargeError and nothing is stored. Never truncated.
//	Headers     Every header of the message (on a dead-letter write,
//	            broker.Headers: idempotency-key, dlq-event-id, dlq-class,
//	            dlq-stage, dlq-destination, dlq-schema, dlq-epsg when known) as
//	            one JSON object in the headers column (encoding/json: invalid
//	            UTF-8 becomes U+FFFD). No budget. The key is the BLOB msg_key.
//	Body        The dlq.v1 envelope, byte for byte, in the BLOB column body,
//	            beside the indexed triage columns.
//	Attempts    The deliveries column, incremented by every Fetch that leases
//	            the row: Record.Deliveries and Message.DeliveryAttempt.
//	Duplicates  Not deduplicated: every Publish inserts a row. The envelope's
//	            idempotency key makes a copy harmless. Ack marks a row replayed
//	            and keeps it until Purge deletes it.
package sqlite
