// Package redisstream is a dead-letter store on Redis Streams (go-redis
// v9; Redis 6.2 or later for XAUTOCLAIM, tested on 7.0): a [broker.Publisher],
// [broker.DeadLetterSource] and [broker.Limiter] over the client you give
// it. It passes broker/brokertest like every other adapter.
//
// # Guarantees
//
// The sections below give the details.
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    A destination's entries are totally ordered by stream id; Fetch
//	            returns the oldest available first (expired or released pending
//	            entries, then new ones), so one replayer sees a key's records in
//	            publish order. Concurrent replayers interleave.
//	Durability  Publish returns once the entry is in the primary's memory (XADD).
//	            What survives a crash is what persistence keeps: appendfsync
//	            always loses nothing acknowledged; everysec, about a second; RDB
//	            or none, up to everything. Options.WaitReplicas (WAIT) and
//	            WaitAOF (WAITAOF, Redis 7.2+) make Publish wait, or fail with
//	            ErrDurabilityUnconfirmed (the entry is written). Off by default.
//	Redelivery  A lease is an entry in the consumer group's pending entries list
//	            (PEL). Fetch takes over entries idle for LeaseTTL (30 s, on the
//	            Redis server's clock; XAUTOCLAIM), so a crashed or stalled
//	            replayer's entries come back. Ack and Release check consumer and
//	            delivery count in Lua: a stale holder gets ErrLeaseLost; a holder
//	            whose lease expired but was not taken over may still settle.
//	Size limit  Body at most Options.MaxMessageBytes, 64 MiB by default
//	            (DefaultMaxMessageBytes). Over it: *classify.TooLargeError before
//	            anything is written. Never truncated, never trimmed (no MAXLEN or
//	            MINID); with Options.MaxEntries a full stream refuses the write
//	            with *StoreFullError (ErrStoreFull).
//	Headers     One field "h:<name>" per header of the message, exact (on a
//	            dead-letter write, broker.Headers: idempotency-key, dlq-event-id,
//	            dlq-class, dlq-stage, dlq-destination, dlq-schema, dlq-epsg when
//	            known). No budget. The key is the field "key"; an envelope adds
//	            index fields (class, stage, epsg, event_id, dlq_at_s, dlq_at_ns,
//	            loc_x, loc_y) that filters read inside Redis.
//	Body        The dlq.v1 envelope, exact bytes, in the field "body".
//	Attempts    The PEL's delivery count, this delivery included:
//	            Record.Deliveries and Message.DeliveryAttempt.
//	Duplicates  Not deduplicated. A Publish whose reply was lost may have
//	            written, and go-redis's retries can write twice; a lost Ack
//	            brings the entry back. Either way the copy carries the same
//	            idempotency key, and replay's claims make it a no-op.
//
// # Layout
//
// Each destination is one stream, "<Prefix>:<destination>" (default
// prefix "geodlq"): the parked stream the seeds name. Publish XADDs one
// entry per message, readable with XRANGE:
//
//	v         layout version, "1"
//	body      the message body, exact bytes
//	key       the ordering key, exact bytes (absent when the key is nil)
//	h:<name>  one field per header
//
// and, when the body decodes as a dlq.v1 envelope, index fields that let
// Fetch filter inside Redis without decoding:
//
//	env                  "1"
//	class, stage         failure class and failed stage
//	epsg                 broker.EPSGOf(envelope), decimal
//	event_id             the event id
//	dlq_at_s, dlq_at_ns  dead_lettered_at in Unix seconds and nanoseconds
//	loc_x, loc_y         the geometry error's location, when it has one
//
// # Replay: consumer groups and leases
//
// Fetch reads through a consumer group ([Options.Group], one per logical
// replayer, created at the stream's first entry on first use), as this
// handle's consumer ([Options.Consumer], unique per handle). What the
// broker interfaces call a lease is an entry in the group's pending
// entries list (PEL) owned by the consumer:
//
//   - Fetch first takes over pending entries idle for at least
//     [Options.LeaseTTL] (XAUTOCLAIM with that min-idle-time, on the Redis
//     server's clock): the entries of a crashed or stalled replayer come
//     back to whoever fetches next.
//     Then it reads new entries (XREADGROUP ">"). Both steps run in one
//     Lua script, so the result is oldest first and no entry is handed to
//     two live leases.
//   - A record's Lease is "<delivery count>:<consumer>". Ack and Release
//     check, atomically in Lua against XPENDING, that the entry is still
//     pending for that consumer with that delivery count; a takeover
//     changes both (XAUTOCLAIM and XCLAIM increment the count), so a stale
//     holder gets [broker.ErrLeaseLost]. A holder whose lease expired but
//     that nobody took over may still settle it. Any handle of the group
//     may settle a record whose Lease it is given.
//   - Ack is XACK followed by XDEL: an acknowledged entry is gone and never
//     delivered again, for any group. With [Options.KeepAcked] it is only
//     XACKed: it stays in the stream, is never redelivered to this group
//     (it is behind the group's last-delivered id and off its PEL), but a
//     different group, or this one recreated, would replay it again.
//   - Release hands the entry to the reserved consumer [ParkConsumer] with
//     an idle time of decades (XCLAIM IDLE … JUSTID, keeping the delivery
//     count): the next Fetch of any consumer takes it over at once, and
//     the releasing lease no longer matches.
//   - Record.Deliveries and Message.DeliveryAttempt are the PEL's delivery
//     count, this delivery included.
//
// # Filters
//
// A filter is evaluated in the Lua script on the index fields with the
// exact semantics of [broker.Filter.Match] (a property test checks them
// against Match). A filtered Fetch takes over only matching pending
// entries (XPENDING IDLE, XRANGE, then XCLAIM of the matching ids), and of
// the new entries it reads it keeps the matching ones and parks the rest
// on [ParkConsumer], idle and with their delivery count reset, so they
// are neither returned nor stranded in this consumer's PEL: the next
// Fetch, filtered or not, finds them. One script call examines at most
// about a thousand entries; Fetch repeats the call until it has max
// records or has seen the whole stream. Entries that are not envelopes
// (or were written by something other than Publish) match only the zero
// filter. Without secondary indexes, a selective filter costs a scan of
// the stream's pending entries on every Fetch; for triage queries over
// large stores the PostgreSQL adapter's indexed columns fit better.
//
// # Ordering
//
// A destination's entries are totally ordered by stream id, and Fetch
// returns the oldest available ones first, so records with the same key
// come back in publish order to a single replayer. Concurrent replayers
// interleave, as with any shared queue.
//
// # Limits
//
// Bodies over [Options.MaxMessageBytes] (default 64 MiB) are refused with
// a [classify.TooLargeError] before anything is written; [Store.MaxMessageBytes]
// reports the limit, so the Processor offloads geometry first.
//
// Nothing is ever trimmed: Publish never passes MAXLEN or MINID, unlike
// queues that silently drop the oldest entries (asynq keeps 10,000 or 90
// days). If [Options.MaxEntries] is set, a write to a stream already that
// long is refused with a [StoreFullError] (errors.Is(err, [ErrStoreFull])),
// the check and the XADD being one Lua script; the Processor then leaves
// the source message unacknowledged, and the pressure shows upstream
// instead of as lost records.
//
// # Durability
//
// Redis acknowledges XADD once the entry is in the primary's memory. What
// survives a crash is what its persistence is configured to keep:
//
//   - appendonly yes, appendfsync always: the entry is fsynced before
//     Publish returns; a server crash loses nothing acknowledged, short of
//     the disk failing.
//   - appendonly yes, appendfsync everysec (Redis's default when AOF is
//     on): a crash of the server or machine can lose about the last second
//     of acknowledged writes.
//   - RDB snapshots only, or no persistence: a crash loses everything
//     since the last snapshot, or everything.
//
// Replication is asynchronous. [Options.WaitReplicas] makes Publish follow
// the write with WAIT on the same connection, and [Options.WaitAOF] with
// WAITAOF (Redis 7.2+), which waits for the fsync to the AOF locally and
// on replicas; when they do not confirm in time Publish fails with
// [ErrDurabilityUnconfirmed] (the entry is written; the caller must not
// acknowledge its source). Even WAIT does not make Redis strongly
// consistent: a failover can still promote a replica that missed a write.
// Both are off by default. For a dead-letter store that must not lose an
// acknowledged record, run Redis with appendonly yes and appendfsync
// always, or use WaitAOF, or choose the PostgreSQL or Kafka adapter.
//
// An Ack is as durable as a Publish: one lost in a crash makes its entry
// come back and be replayed again. A Publish whose reply is lost in a
// network failure may have written the entry, and go-redis's retries can
// then write it twice. Either way the duplicate carries the same
// idempotency key, and replay's claims make it a no-op.
//
// # Housekeeping
//
// Every handle joins the group as a consumer. [Store.Close] removes its
// consumer when it holds no entries; one that crashed stays listed in
// XINFO CONSUMERS with its entries until they are taken over (then remove
// it with XGROUP DELCONSUMER, or give handles stable consumer names).
// [ParkConsumer] holds the released and passed-over entries and must not
// be deleted: deleting a consumer drops its pending entries from the PEL,
// and they would never be redelivered.
//
// # Client access
//
// The store uses the client it is given and never closes it.
// [Store.Client] returns it, and [Store.As] fills a *redis.UniversalClient,
// or a **redis.Client, **redis.ClusterClient or **redis.Ring of the
// client's concrete type. On Redis Cluster every script touches one
// stream, so each runs on the stream's node.
package redisstream
