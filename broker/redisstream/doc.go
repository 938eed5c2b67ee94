// Package redisstream is a dead-letter store on Redis Streams (go-redis
// v9; Redis 6.2 or later for XAUTOCLAIM, tested on 7.0). [New] returns the
// portable [*broker.Store] over the client you give it; [broker.OpenStore]
// opens one by URL once this package is imported; [NewConsumer] consumes a
// destination, or a producer's own stream, with the dead-letter path. It
// passes broker/brokertest like every other adapter.
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
//	Outcome     Publish, Ack and Release report what Redis did. A write whose
//	            reply is lost (a dropped connection, a reply after the client's
//	            ReadTimeout) is retried until Redis answers, and the retry finds
//	            the first attempt's effect: a message's digest for Publish
//	            (Options.DedupWindow, 2 minutes), a per-call mark for Ack and
//	            Release. A write cut short (WriteTimeout, or CancelGrace after
//	            the caller gave up) fails with broker.ErrOutcomeUnknown, and a
//	            retry of the same message within the window is stored once.
//	Redelivery  A lease is an entry in the consumer group's pending entries list
//	            (PEL). Fetch takes over entries idle for LeaseTTL (30 s, on the
//	            Redis server's clock; XAUTOCLAIM), so a crashed or stalled
//	            replayer's entries come back. Renew resets the entry's idle
//	            time. Renew, Ack and Release check consumer and delivery count
//	            in Lua: a stale holder gets broker.ErrLeaseLost; a holder whose
//	            lease expired but was not taken over may still renew or settle.
//	Size limit  Body at most Options.MaxMessageBytes, 64 MiB by default. Over
//	            it: *classify.TooLargeError before anything is written. Never
//	            truncated, never trimmed (no MAXLEN or MINID); with
//	            Options.MaxEntries a full stream refuses the write with
//	            *StoreFullError (ErrStoreFull).
//	Headers     One field "h:<name>" per header of the message, exact (on a
//	            dead-letter write, broker.Headers: idempotency-key, dlq-event-id,
//	            dlq-class, dlq-stage, dlq-destination, dlq-schema, dlq-epsg when
//	            known). No byte budget; at most about 3,500 headers. The key is
//	            the field "key"; an envelope adds index fields (class, stage,
//	            epsg, event_id, dlq_at_s, dlq_at_ns, loc_x, loc_y) that filters
//	            read inside Redis.
//	Body        The dlq.v1 envelope, exact bytes, in the field "body".
//	Attempts    The PEL's delivery count, this delivery included:
//	            Record.Deliveries and Message.DeliveryAttempt.
//	Duplicates  A byte-identical message (key, headers, body) published to a
//	            destination again within Options.DedupWindow is stored once,
//	            even if the first was acknowledged meanwhile. A redelivered
//	            event whose envelope is built anew differs (dead_lettered_at):
//	            it is stored again, with the same idempotency key, and replay's
//	            claims make it a no-op. A lost Ack brings the entry back.
//	Listing     List and Destinations read without leasing (XRANGE, XREVRANGE,
//	            the catalog); Stats counts by listing; Purge deletes (XDEL).
//
// # URL
//
// Importing the package registers the schemes redis:// and rediss:// (TLS)
// with [broker.OpenStore]:
//
//	redis://[user:password@]host:port[/db][?geodlq_prefix=P&geodlq_group=G&lease_ttl=30s&max_message_bytes=N&…]
//
// geodlq_prefix and geodlq_group set [Options.Prefix] and [Options.Group],
// lease_ttl and max_message_bytes the [broker.StoreOptions]; every other
// parameter is go-redis's (redis.ParseURL: dial_timeout, read_timeout,
// write_timeout, pool_size, protocol, client_name, …). The opener connects
// within [broker.OpenOptions.ConnectTimeout] (default 10s; it also caps
// dial_timeout) and checks that a store is there: the catalog at the key
// "<prefix>", or streams of the store's layout under "<prefix>:". Without
// one it fails with an error wrapping [broker.ErrNoStore] ("no geodlq store
// here"), unless OpenOptions.Create lets it create the catalog. A store
// opened ReadOnly writes nothing — it creates no catalog, stream or
// consumer group — and the portable store refuses Publish, Fetch, Ack,
// Release and a Purge that is not a dry run with an error wrapping
// [broker.ErrReadOnly].
// The store owns the client the opener made and closes it on Close; its
// socket reads honour the store's deadlines (ContextTimeoutEnabled).
//
// go-redis has no per-client logger: it reports failed dials and pool
// trouble through a process-wide one (redis.SetLogger), which prints
// "redis: …" lines on stderr. The package never changes it — that is the
// application's setting. The opener dials the server itself before
// go-redis does, so that an unreachable server is reported once, in the
// returned error, and not also in go-redis's log; a server that fails
// later is logged by go-redis as the application configured. (The geodlq
// command routes go-redis's lines to its own -v log.)
//
// # As
//
// [broker.Store.As] reaches the client: target may be a
// *redis.UniversalClient, or a **redis.Client, **redis.ClusterClient or
// **redis.Ring of the client's concrete type.
//
// # Layout
//
// Each destination is one stream, "<Prefix>:<destination>" (default prefix
// "geodlq"): the parked stream the seeds name. The key "<Prefix>" is the
// store's catalog, a hash with the field "layout" ("1") and a field
// "d:<destination>" per destination published to, which List and
// Destinations read. Publish XADDs one entry per message, readable with
// XRANGE:
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
// Two kinds of short-lived bookkeeping keys live in each stream's hash slot
// ("{<stream key>}:…", or "<stream key>:…" when the key has a hash tag):
// "…:dedup:<digest>" holds the entry id a message became, for DedupWindow;
// "…:settled:<entry id>" marks the Ack or Release call that settled an
// entry, for the same time. On Redis Cluster every script touches one
// stream and keys of its slot, so each runs on the stream's node; a
// destination name containing "}" without a hash tag cannot share its
// slot, and its writes fail there with CROSSSLOT (use braces as a hash tag,
// or none).
//
// With [Options.RawKeys] the destination is the stream key itself and
// there is no catalog: a store over a stream another program writes.
//
// # Write outcomes
//
// The portable store lets a started Publish or Ack run on for CancelGrace
// (2s) after its caller gives up, bounded by WriteTimeout (30s), so that
// the caller learns the outcome. Inside that bound the driver makes the
// outcome certain against go-redis's own behaviour too: go-redis retries a
// command whose connection dropped or whose reply came after ReadTimeout
// (5s by default, shorter than WriteTimeout), and a retried XADD writes a
// second entry — or, without retries, a written entry is reported failed.
// So Publish sends its XADD in a script that first looks up the message's
// digest (SHA-256 of key, headers and body) and returns the entry a
// previous attempt wrote, and remembers the new entry's id under the digest
// for DedupWindow; Ack and Release leave a per-call mark. Every attempt,
// go-redis's or the store's (which retries an attempt whose outcome it did
// not see until Redis answers or the deadline passes), is then harmless,
// and the outcome reported is the outcome Redis had. What remains
// uncertain is a write cut short before Redis answered — every attempt
// failed until WriteTimeout, or the grace after a cancellation ran out:
// its error wraps [broker.ErrOutcomeUnknown], and because the digest
// outlives it, the caller's retry of the same message within DedupWindow
// is still stored once. A Fetch whose reply is lost leases entries nobody sees; they
// come back after LeaseTTL. With DedupWindow negative, Publish sends a bare
// XADD and these guarantees do not hold.
//
// The cost, at the default window: one small key per write, kept two
// minutes (about 130 bytes; 15 MB at 1,000 writes a second), and the
// script. For a 2 KiB envelope, BenchmarkRedisTime measures 50 µs of the
// Redis server's CPU per write against 29 µs for the bare XADD, and the
// client's CPU grows by a quarter (74 µs against 59).
//
// # Replay: consumer groups and leases
//
// Fetch reads through a consumer group ([Options.Group], one per logical
// replayer, created at the stream's first entry on first use), as this
// handle's consumer ([Options.Consumer], unique per handle). What the
// broker interfaces call a lease is an entry in the group's pending
// entries list (PEL) owned by the consumer:
//
//   - Fetch first takes over pending entries idle for at least LeaseTTL
//     (XAUTOCLAIM with that min-idle-time, on the Redis server's clock):
//     the entries of a crashed or stalled replayer come back to whoever
//     fetches next. Then it reads new entries (XREADGROUP ">"). Both steps
//     run in one Lua script, so the result is oldest first and no entry is
//     handed to two live leases. A lease is live for the LeaseTTL of the
//     handle that looks at it: give every handle of a group the same one.
//   - A record's Lease is "<delivery count>:<consumer>". Ack and Release
//     check, atomically in Lua against XPENDING, that the entry is still
//     pending for that consumer with that delivery count; a takeover
//     changes both (XAUTOCLAIM and XCLAIM increment the count), so a stale
//     holder gets [broker.ErrLeaseLost]. A holder whose lease expired but
//     that nobody took over may still settle it. Any handle of the group
//     may settle a record whose Lease it is given.
//   - Renew resets the idle time of the entry (XCLAIM to the same consumer,
//     min-idle-time 0, JUSTID: the delivery count is kept) after the same
//     check, so that no Fetch takes it over for another LeaseTTL; a
//     record's LeaseExpires is the time its Fetch or Renew was sent plus
//     LeaseTTL.
//   - Ack is XACK followed by XDEL: an acknowledged entry is gone and never
//     delivered again, for any group. With [Options.KeepAcked] it is only
//     XACKed: it stays in the stream (List shows it as replayed), is never
//     redelivered to this group (it is behind the group's last-delivered id
//     and off its PEL), but a different group, or this one recreated, would
//     replay it again.
//   - Release hands the entry to the reserved consumer "geodlq:parked" with
//     an idle time of decades (XCLAIM IDLE … JUSTID, keeping the delivery
//     count): the next Fetch of any consumer takes it over at once, and the
//     releasing lease no longer matches.
//
// # Filters
//
// A filter is evaluated in the Lua script on the index fields with the
// exact semantics of [broker.Filter.Match] (a property test checks them
// against Match). A filtered Fetch takes over only matching pending
// entries (XPENDING IDLE, XRANGE, then XCLAIM of the matching ids), and of
// the new entries it reads it keeps the matching ones and parks the rest
// on "geodlq:parked", idle and with their delivery count reset, so they
// are neither returned nor stranded in this consumer's PEL: the next
// Fetch, filtered or not, finds them. One script call examines at most
// about a thousand entries; Fetch repeats the call until it has max
// records or has seen the whole stream. Entries that are not envelopes
// (or were written by something other than Publish) match only the zero
// filter but by record id. Reason kinds are not indexed: the portable
// store releases what a fetch leased that does not match them (the
// release keeps the delivery count, but the next lease counts). Without
// secondary indexes, a selective
// filter costs a scan of the stream's pending entries on every Fetch; for
// triage queries over large stores the PostgreSQL adapter's indexed
// columns fit better.
//
// # Listing, counting, purging
//
// List reads pages with XRANGE (XREVRANGE newest first), the cursor being
// the stream id (and destination) of the last position a page covers;
// without a destination it merges every destination of the catalog by
// stream id. Nothing is leased. Each entry's status comes from the group
// where that is cheap (one XINFO GROUPS and one XPENDING per destination
// and page): leased while a consumer other than "geodlq:parked" holds it
// for less than LeaseTTL, replayed when it was delivered and acknowledged
// (KeepAcked), pending otherwise. One page examines at most about
// max(1000, 2×Limit) entries per destination, so a selective filter may
// return short pages with a cursor to go on. Redis has no index to count
// by, so Stats counts by listing (the portable fallback).
//
// Purge selects entries by reading and decoding them, then deletes them
// per destination in a Lua script that checks each again — still there,
// not under a live lease, acknowledged unless IncludePending — and XACKs
// (if pending) and XDELs it: nothing can lease an entry between that
// check and its deletion. The selection itself is not atomic with
// writers (an entry written after it is not deleted), and neither is the
// orphan check, which reads every destination after the deletions: a
// record published after it may reference a blob it reports orphaned.
// PurgeResult.Orphaned is therefore advisory; offload.Sweep, which
// enumerates the live set itself and quarantines before deleting, is the
// safe way to delete blobs.
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
// # Limits
//
// Nothing is ever trimmed: Publish never passes MAXLEN or MINID, unlike
// queues that silently drop the oldest entries (asynq keeps 10,000 or 90
// days). If [Options.MaxEntries] is set, a write to a stream already that
// long is refused with a [StoreFullError] (errors.Is(err, [ErrStoreFull])),
// the check and the XADD being one Lua script; the Processor then leaves
// the source message unacknowledged, and the pressure shows upstream
// instead of as lost records.
//
// # Housekeeping
//
// Every handle that fetches joins the group as a consumer. Close removes
// its consumer when it holds no entries; one that crashed stays listed in
// XINFO CONSUMERS with its entries until they are taken over (then remove
// it with XGROUP DELCONSUMER, or give handles stable consumer names).
// "geodlq:parked" holds the released and passed-over entries and must not
// be deleted: deleting a consumer drops its pending entries from the PEL,
// and they would never be redelivered.
package redisstream
