// Package jetstream is a geodlq dead-letter store on NATS JetStream
// (nats.go's jetstream API), and a consumer of JetStream pull consumers.
// [New] returns the portable [*broker.Store] over one stream: a
// [broker.Publisher], [broker.DeadLetterSource] and [broker.Limiter] that
// lists its records without leasing them and passes broker/brokertest.
// [NewConsumer] runs a source stream's pull consumer through a
// [broker.Processor], wiring the server's delivery count, its max_deliver
// and the MAX_DELIVERIES advisory into the dead-letter path.
// [SourcePublisher] publishes to a source stream's subjects as NewConsumer
// reads them: the replayer's target for re-injecting dead letters where
// they came from.
//
// # Guarantees
//
// What the store (dead-letter subjects) and the consumer (a source
// stream's pull consumer) promise; the sections below give the details.
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Stream order, which is publish order; a released or expired
//	            record is redelivered before newer ones. The consumer keeps no
//	            per-key order across a Nak (see Consumer).
//	Durability  Publish returns once the stream acknowledged the message
//	            (PubAck), stored per its storage and replicas: file storage and
//	            1 replica by default, which nats-server fsyncs every
//	            sync_interval (2 min by default; use sync_interval: always, or
//	            replicas, if a machine crash must not lose an acknowledged
//	            write). A stream New creates has work-queue retention, no
//	            limits and discard "new": a full stream refuses writes rather
//	            than drop records.
//	Redelivery  A lease is the durable pull consumer's ack wait (LeaseTTL, 30 s;
//	            max_deliver unlimited): a record not acknowledged is redelivered
//	            once it passes, whether its holder crashed or is slow. Renew is
//	            an in-progress ack (+WPI, waited for), which restarts the ack
//	            wait. The store refuses Renew, Ack and Release, with
//	            broker.ErrLeaseLost, LeaseTTL less a tenth (the cut at most
//	            5 s: 27 s) after the Fetch (or Renew) that returned or renewed
//	            the record began, and a record this handle settled.
//	Size limit  Body at most the server's max_payload (the connection's
//	            MaxPayload, 1 MiB by default) or the stream's max_msg_size if
//	            smaller, less Options.HeaderBudget (4096): 1,044,480 bytes by
//	            default; MaxMessageBytes may lower it. A larger body, or one
//	            whose encoded headers push the message past max_payload:
//	            *classify.TooLargeError before anything is sent (a server refusal
//	            maps to it too). Never truncated.
//	Headers     Every header of the message as a NATS header (on a dead-letter
//	            write, broker.Headers: idempotency-key, dlq-event-id, dlq-class,
//	            dlq-stage, dlq-destination, dlq-schema, dlq-epsg when known); one
//	            NATS cannot carry (empty name, ':' or whitespace in the name, a
//	            line break) is refused with an error, not mangled. Added:
//	            Geodlq-Key (HeaderKey: the key, base64) and, when the message
//	            has an idempotency key, Nats-Msg-Id. Budget: HeaderBudget is
//	            reserved for them; body and headers together must fit
//	            max_payload.
//	Body        The dlq.v1 envelope, stored exactly as the message data.
//	Attempts    The server's NumDelivered: Record.Deliveries and
//	            Message.DeliveryAttempt, and where a consumer's Processor starts
//	            counting. After max_deliver, the MAX_DELIVERIES advisory's count.
//	            A filtered Fetch's pass-overs count as deliveries.
//	Duplicates  Publish sets Nats-Msg-Id (destination, idempotency key, source
//	            position or dlq-replay-of), so a retried write within the
//	            duplicate window (2 min) is absorbed; when the original was
//	            already acknowledged and deleted, the new failure is stored under
//	            a chained id. Past the window a retry is a duplicate, which the
//	            idempotency key makes harmless.
//
// # Layout
//
// Every destination lives in one stream (Options.Stream, default "GEODLQ"),
// under the subject "<prefix>.<token>", where the token is the destination
// with every byte other than ASCII letters, digits and '-' escaped as "_"
// and two upper-case hex digits: "parcels.poison.dlt" is stored under
// "geodlq.dlq.parcels_2Epoison_2Edlt" (destinations contain dots, which
// would otherwise split the subject). One stream rather than a stream per
// destination keeps the server's stream count flat however many source
// topics fail, and one duplicate window covers every destination.
//
// The stream has work-queue retention: acknowledging a record deletes it.
// With Options.Create, [New] creates it when missing — without size or age
// limits and with discard policy "new", so if an operator adds limits, a
// full stream refuses new dead-letter writes (Publish fails, the source is
// not acknowledged) instead of silently dropping old, un-replayed records
// — and adds "<prefix>.>" to an existing stream that lacks it; it never
// changes anything else. Without Create a missing stream, and always a
// stream with limits retention (where an acknowledgement would only move
// a consumer's floor and a re-dead-lettered event could be mistaken for a
// duplicate) or one that does not capture the prefix, is refused with an
// error wrapping [broker.ErrNoStore].
//
// # Durability
//
// Publish returns once the stream acknowledged the message (PubAck): stored
// with the stream's storage and replicas — file storage by default, which
// nats-server syncs to disk every sync_interval (2 minutes by default);
// run the server with sync_interval: always, or use replicas, when a
// machine crash must not lose an acknowledged write. The portable store
// runs a started Publish to its end whatever its caller's context does
// (bounded by StoreOptions.WriteTimeout), so the outcome it reports is the
// PubAck's.
//
// The body is stored exactly; headers become NATS headers (a header whose
// name or value NATS cannot carry — a line break, a colon or whitespace in
// the name — is refused, not mangled); the ordering key travels base64 in
// [HeaderKey]. Publish sets Nats-Msg-Id from the destination, the
// idempotency key and what tells a retried write from a new failure of
// the same event — the dlq-replay-of header of a re-injected message, else
// the envelope's source position (system, topic, partition, offset,
// message id) — so a retried dead-letter write inside the stream's
// duplicate window (2 minutes by default) is absorbed. When the server
// reports a duplicate whose original is no longer in the stream — it was
// replayed and acknowledged, and the event failed again — Publish stores
// the message anyway under an id chained to the deleted one: the duplicate
// window never drops a dead-letter write whose predecessor was already
// consumed.
//
// # Leases
//
// Each destination is read through a durable pull consumer,
// "<Replayer>_<token>", with explicit acks, ack_wait = LeaseTTL,
// max_deliver unlimited and max_ack_pending = Options.MaxAckPending. Every
// handle with the same Replayer shares it, so handles in several processes
// share the work and the server never hands one record to two of them at
// once. A lease is the consumer's ack wait: a record fetched and not
// acknowledged is redelivered once ack_wait passes, whether its holder
// crashed or is slow. Record.ID is the stream sequence (stable across
// redeliveries); Record.Deliveries and Message.DeliveryAttempt are the
// server's NumDelivered.
//
// Ack is a double ack (the server confirms it); Release is a Nak, waited
// for as well, so the next Fetch sees the record again. nats-server 2.9
// accepts a late ack of a record it already redelivered, so the store
// enforces the lease itself: Renew, Ack and Release refuse, with
// [broker.ErrLeaseLost], a record once LeaseTTL less a tenth (at most 5s:
// the margin covers the ack's trip to the server) has passed since the
// Fetch that returned it (or the latest Renew) began, and a record this
// handle already settled. Renew sends "+WPI" (the in-progress ack) and
// waits for the server's answer: the server restarts the record's ack
// wait, and the store its own deadline.
// A lease is a JetStream ack subject, so another handle of the same
// replayer may settle it; a second settlement through another handle is
// not detected.
//
// Filters are evaluated by the store with [broker.Filter.MatchRecord].
// Pushing them to the server would need a consumer per filter (per-class
// subjects and filter_subjects, nats-server 2.10+), and consumers keep
// separate ack state: a record leased through one would still be
// delivered through another, and an ack through one would not remove it
// from the other. A filtered Fetch instead pulls through the shared
// consumer, keeps the records that match and, before it returns, Naks
// (waited for) everything it passed over, so non-matching records are
// never lost nor held. Each pass-over counts in NumDelivered, and a
// filtered Fetch sees at most MaxAckPending records past the oldest
// un-acked one.
//
// # Listing
//
// List reads records with the stream's message-get API (a direct get where
// the stream allows it): the next message on a subject at or after a
// sequence, one request per record. It creates no consumer and leases
// nothing, so it works on a read-only store and does not disturb
// replayers; the cursor is a stream sequence. Newest first reads windows
// of sequences backwards. Every record in the work-queue stream is
// un-acknowledged, and whether one is leased is not known without a
// consumer, so Entry.Status is "". Destinations come from the stream's
// per-subject counts; Stats counts by listing.
//
// The store has no [broker.Purger]: a purge must never delete a record
// under a live lease, and which records a consumer has leased is not
// something a stream can be asked, nor can a delete be made atomic with
// the writers of the stream. Acknowledged records are deleted by the
// work-queue retention; an operator can remove others with the nats CLI.
//
// # Ordering
//
// Records come back in stream order, which is publish order; a released or
// expired record is redelivered before newer ones.
//
// # Consumer and max_deliver
//
// [NewConsumer] returns the portable [*broker.Consumer] over a source
// stream's pull consumer, which the caller creates with explicit acks (its
// ack_wait and max_deliver are the caller's choice). Each pull asks for up
// to MaxBatch messages (default Concurrency, so that no pulled message
// waits for a worker while its ack wait runs); Message.DeliveryAttempt is
// the server's NumDelivered, so the Processor's attempts start there. A
// message is double-acked only when it was processed or its dead-letter
// write was acknowledged, and Nak'ed with NackDelay (1s) otherwise; a
// message being processed is reported in progress (+WPI) every Progress,
// which restarts its ack wait. A source stream keeps no per-key order
// across a Nak: the server delivers newer messages while a Nak'ed one
// waits, so the consumer does not hold a key's later messages back. For
// per-subject order, give the pull consumer max_ack_pending 1.
//
// After the pull consumer's max_deliver the server stops delivering a
// message and publishes a MAX_DELIVERIES advisory. From NewConsumer until
// Close, the consumer watches it: it reads the message from the stream by
// sequence and runs it through the Processor one last time with the
// failure it last recorded for that sequence (class unknown when the
// deliveries went to processes that crashed), so the envelope has
// attempts = the advisory's delivery count, the recorded class and stage,
// and the Processor's destination and idempotency key. It is dead-lettered
// at once, whatever its class: the server made every delivery it will. A
// failed write is retried with backoff until Close. Advisories are core
// NATS messages: one sent while no consumer watches is not repeated, but
// the message stays in the stream (unless its retention removes it), and
// a consumer created with a start sequence at it delivers it again.
// Several processes watching the same pull consumer each dead-letter a
// given-up message; with this package's store the writes share a message
// id and the duplicate window keeps one. ConsumerOptions.DeleteGivenUp
// deletes a dead-lettered message from the source stream;
// IgnoreGivenUp turns the watch off.
//
// # URL
//
// Importing the package registers the nats scheme with
// [broker.OpenStore]:
//
//	nats://user:password@host:4222?geodlq_stream=GEODLQ&geodlq_prefix=geodlq.dlq&geodlq_replayer=geodlq-replay&lease_ttl=30s&max_message_bytes=1044480
//
// Every parameter is optional (the port defaults to 4222); geodlq_stream,
// geodlq_prefix and geodlq_replayer set Options.Stream, SubjectPrefix and
// Replayer, lease_ttl and max_message_bytes the StoreOptions; any other
// parameter is refused. OpenOptions.ConnectTimeout bounds the whole open:
// the dial, the server's handshake (a server that accepts the connection
// and never answers fails within it) and the stream check. The connection
// does not reconnect. OpenOptions.Create creates a missing stream;
// OpenOptions.ReadOnly creates and changes nothing, and the store refuses
// writes and leases with [broker.ErrReadOnly]. A server without the stream (or without
// JetStream), or whose stream is not a dead-letter store, is an error
// wrapping [broker.ErrNoStore]. Closing a store the opener made closes its
// connection.
//
// # As
//
// [broker.Store.As] reaches the client the store uses:
//
//   - *natsjs.JetStream (natsjs being github.com/nats-io/nats.go/jetstream)
//   - **nats.Conn
//   - *natsjs.Stream, the store's stream
//
// A store made by [New] keeps the caller's connection: closing the store
// does not close it.
package jetstream
