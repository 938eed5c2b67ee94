// Package jetstream is a geodlq dead-letter store on NATS JetStream
// (nats.go's jetstream API): a [broker.Publisher], [broker.DeadLetterSource]
// and [broker.Limiter] over one stream, plus a source-side [Consumer] that
// wires a stream's pull consumer, its max_deliver and the server's
// MAX_DELIVERIES advisory into a [broker.Processor].
//
// # Guarantees
//
// What a [Store] (dead-letter subjects) and a [Consumer] (source stream)
// promise; the sections below give the details.
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Stream order, which is publish order; a released or expired
//	            record is redelivered before newer ones.
//	Durability  Publish returns once the stream acknowledged the message
//	            (PubAck), stored per its storage and replicas: file storage and
//	            1 replica by default, which nats-server fsyncs every
//	            sync_interval (2 min by default; use sync_interval: always, or
//	            replicas, if a machine crash must not lose an acknowledged
//	            write). A stream New creates has work-queue retention, no
//	            limits and discard "new": a full stream refuses writes rather
//	            than drop records.
//	Redelivery  A lease is the durable pull consumer's ack wait (AckWait, 30 s;
//	            max_deliver unlimited): a record not acknowledged is redelivered
//	            once it passes, whether its holder crashed or is slow. The store
//	            refuses Ack and Release, with ErrLeaseLost, Store.Lease (AckWait
//	            less a tenth, the cut at most 5 s: 27 s) after the Fetch that
//	            returned the record began, and a lease this handle settled.
//	Size limit  Body at most the server's max_payload (the connection's
//	            MaxPayload, 1 MiB by default) or the stream's max_msg_size if
//	            smaller, less Options.HeaderBytes (4096): 1,044,480 bytes by
//	            default; Options.MaxMessageBytes may lower it. A larger body, or
//	            one whose encoded headers push the message past max_payload:
//	            *classify.TooLargeError before anything is sent (a server refusal
//	            maps to it too). Never truncated.
//	Headers     Every header of the message as a NATS header (on a dead-letter
//	            write, broker.Headers: idempotency-key, dlq-event-id, dlq-class,
//	            dlq-stage, dlq-destination, dlq-schema, dlq-epsg when known); one
//	            NATS cannot carry (empty name, ':' or whitespace in the name, a
//	            line break) is refused with an error, not mangled. Added:
//	            Geodlq-Key (the key, base64) and, when the message has an
//	            idempotency key, Nats-Msg-Id. Budget: HeaderBytes is reserved
//	            for them; body and headers together must fit max_payload.
//	Body        The dlq.v1 envelope, stored exactly as the message data.
//	Attempts    The server's NumDelivered: Record.Deliveries and
//	            Message.DeliveryAttempt, and where a Consumer's Processor starts
//	            counting. After max_deliver, the MAX_DELIVERIES advisory's count.
//	            A filtered Fetch's pass-overs count as deliveries.
//	Duplicates  Publish sets Nats-Msg-Id (MsgID: destination, idempotency key,
//	            source position or dlq-replay-of), so a retried write within the
//	            duplicate window (2 min) is absorbed; when the original was
//	            already acknowledged and deleted, the new failure is stored under
//	            a chained id. Past the window a retry is a duplicate, which the
//	            idempotency key makes harmless.
//
// # Layout
//
// Every destination lives in one stream (Options.Stream, default "GEODLQ"),
// under the subject "<prefix>.<token>" where the token is the destination
// with every byte other than ASCII letters, digits and '-' escaped as
// "_XX" ([SubjectToken]): destinations such as "parcels.poison.dlt" contain
// dots, which would otherwise split the subject. [New] creates the stream
// when it is missing and adds "<prefix>.>" to an existing one that lacks
// it; it never changes anything else. One stream rather than a stream per
// destination keeps the server's stream count flat however many source
// topics fail, and one duplicate window covers every destination.
//
// The stream has work-queue retention: acknowledging a record deletes it.
// It is created without size or age limits and with discard policy "new",
// so if an operator adds limits, a full stream refuses new dead-letter
// writes (Publish fails, the source is not acknowledged) instead of
// silently dropping old, un-replayed records.
// [New] refuses an existing stream with limits retention, where an
// acknowledgement would only move a consumer's floor and a re-dead-lettered
// event could be mistaken for a duplicate (see below).
//
// # Durability
//
// Publish returns once the stream acknowledged the message (PubAck): stored
// with the stream's storage and replicas — file storage by default, which
// nats-server syncs to disk every sync_interval (2 minutes by default);
// run the server with sync_interval: always, or use replicas, when a
// machine crash must not lose an acknowledged write.
//
// The body is stored exactly; headers become NATS headers (a header whose
// name or value NATS cannot carry — a line break, a colon or whitespace in
// the name — is refused, not mangled); the ordering key travels base64 in
// [HeaderKey]. Publish sets [HeaderMsgID] from the destination, the
// idempotency key and the source position ([MsgID]), so a retried
// dead-letter write inside the stream's duplicate window (2 minutes by
// default) is absorbed. When the server reports a duplicate whose original
// is no longer in the stream — it was replayed and acknowledged, and the
// event failed again — Publish stores the message anyway under an id
// chained to the deleted one: the duplicate window never drops a
// dead-letter write whose predecessor was already consumed.
//
// # Leases
//
// Each destination is read through a durable pull consumer,
// "<Replayer>_<token>", with explicit acks, ack_wait = Options.AckWait,
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
// enforces the lease itself: Ack and Release refuse, with
// [broker.ErrLeaseLost], a record once [Store.Lease] has passed since the
// Fetch that returned it began (AckWait less a tenth, the cut at most 5s:
// the margin covers the ack's trip to the server), and a lease this handle
// already settled. A lease is a
// JetStream ack subject, so another handle of the same replayer may settle
// it; a second settlement through another handle is not detected.
//
// Filters are evaluated by the store with [broker.Filter.Match] on the
// decoded envelope. Pushing them to the server would need a consumer per
// filter (per-class subjects and filter_subjects, nats-server 2.10+), and
// consumers keep separate ack state: a record leased through one would
// still be delivered through another, and an ack through one would not
// remove it from the other. A filtered Fetch instead pulls through the
// shared consumer, keeps the records that match and, before it returns,
// Naks (waited for) everything it passed over, so non-matching records
// are never lost nor held. Each pass-over counts in NumDelivered, and a
// filtered Fetch sees at most MaxAckPending records past the oldest
// un-acked one.
//
// # Ordering
//
// Records come back in stream order, which is publish order; a released or
// expired record is redelivered before newer ones.
//
// # Limits
//
// The body limit ([Store.MaxMessageBytes]) is the server's max_payload
// (the connection's MaxPayload, 1 MiB by default) or the stream's
// max_msg_size if smaller, less Options.HeaderBytes reserved for headers.
// A larger body, or a body whose headers push the message past
// max_payload, is refused with a [*classify.TooLargeError] before anything
// is sent.
//
// # Source side: max_deliver and its advisory
//
// [Consumer] processes a source stream's pull consumer with a
// [broker.Processor]. Message.DeliveryAttempt is the server's NumDelivered,
// so the Processor's attempts start there; a message is double-acked only
// when it was processed or its dead-letter write was acknowledged, and is
// Nak'ed otherwise. After the consumer's max_deliver the server stops
// delivering it and publishes a MAX_DELIVERIES advisory: the Consumer
// fetches the message from the stream by sequence and dead-letters it with
// attempts = the advisory's delivery count and the failure it last
// recorded for that sequence (class unknown when the deliveries went to
// processes that crashed). Advisories are core NATS messages: one sent
// while no Consumer watches is not repeated, but the message stays in the
// stream and [Consumer.DeadLetterGivenUp] can dead-letter it later.
// Several processes watching the same consumer each dead-letter a
// given-up message; the writes share a message id and the duplicate
// window keeps one.
//
// # As
//
// The store keeps the caller's client: [Store.JetStream], and [Store.As]
// with a *natsjs.JetStream, **nats.Conn or *natsjs.Stream (natsjs being
// github.com/nats-io/nats.go/jetstream). [Store.Close] does not close the
// connection.
package jetstream
