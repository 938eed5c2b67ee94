// Package kafka is geodlq's Kafka adapter (franz-go): a dead-letter store
// that writes envelopes to dead-letter topics, reads them back for replay
// through a consumer group and lists them without leasing, and a
// source-topic consumer that commits a record's offset only after its
// outcome allows it.
//
//	cl, _ := kgo.NewClient(append(kafka.ProducerOpts(nil), kgo.SeedBrokers("kafka:9092"))...)
//	store, _ := kafka.New(cl, nil) // a *broker.Store
//	proc, _ := broker.NewProcessor(&broker.ProcessorOptions{Publisher: store, Destination: kafka.Destination})
//	src, _ := kgo.NewClient(append(kafka.ConsumerOpts("spatial-app", "spatial.events"), kgo.SeedBrokers("kafka:9092"))...)
//	c, _ := kafka.NewConsumer(src, proc, nil)
//	err := c.Run(ctx, handler)
//
// Or open the store by URL, with this package imported:
//
//	store, err := broker.OpenStore(ctx, "kafka://kafka-1:9092,kafka-2:9092?lease_ttl=5m", nil)
//
// # Guarantees
//
// What the store (dead-letter topics) and [NewConsumer] (source topics)
// promise; the sections below give the details.
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Per key. A dead-letter record keeps the source record's key, so
//	            with a key-hashing partitioner (kgo's default) an entity's
//	            records share a partition of the dead-letter topic, in publish
//	            order. Fetch and List: offset order within a partition,
//	            dlq-published-at (else the record timestamp) across partitions.
//	            NewConsumer: one record at a time per partition, in offset
//	            order.
//	Durability  Publish returns once every in-sync replica has the record
//	            (acks=all): New refuses a client without acks=all and the
//	            idempotent producer, or a transactional one. Once sent, a
//	            record's outcome is the broker's: the caller's cancellation
//	            does not make it uncertain. The consumer commits a source offset
//	            only after the handler succeeded or the dead-letter Publish
//	            returned nil.
//	Redelivery  Replay leases through a consumer group ("geodlq-replay.<topic>"):
//	            one member per partition. Renew restarts a lease (refused while
//	            its partition is being handed to another member). A store that
//	            holds a lease past LeaseTTL (5 min), or leaves a topic untouched
//	            that long, leaves its group: its leases are lost (ErrLeaseLost)
//	            and the records go to another member. A crashed process is evicted after
//	            session.timeout.ms (kgo: 45 s). The committed offset is the
//	            oldest unacknowledged record, so a crash redelivers every
//	            unacknowledged record. The consumer re-reads a partition from a
//	            record that was not acknowledged, after NackDelay (1 s).
//	Size limit  Envelope (record value) at most MaxMessageBytes: by default
//	            min(1048588, the client's ProducerBatchMaxBytes) - HeaderBudget
//	            (8 KiB) - 1 KiB of record framing = 1,039,372 bytes with
//	            ProducerOpts, 990,796 with kgo's default batch size; the store
//	            reports it (broker.Limiter), so the envelope builder offloads
//	            to stay under it. Over it: *classify.TooLargeError before
//	            anything is produced; a record the client or broker refuses as
//	            too large maps to the same error. Never truncated.
//	Headers     The message's headers (on a dead-letter write, broker.Headers:
//	            idempotency-key, dlq-event-id, dlq-class, dlq-stage,
//	            dlq-destination, dlq-schema, dlq-epsg when known), plus
//	            dlq-original-topic, -partition, -offset, -timestamp (decimal text,
//	            from the envelope's source) and dlq-published-at. Budget:
//	            Options.HeaderBudget (8 KiB, at least 256) of key and value bytes,
//	            filled in that priority order, then other dlq-* headers, then the
//	            rest; a header that does not fit is left out whole and counted in
//	            dlq-headers-dropped.
//	Body        The dlq.v1 envelope, byte for byte, as the record value.
//	Attempts    Kafka keeps no delivery count: the consumer starts the
//	            Processor's attempts at 1 on every consumption, and
//	            Record.Deliveries is 0.
//	Duplicates  The idempotent producer never duplicates a record within a
//	            session; a Publish that reports an error did not write (but a
//	            WriteTimeout, 30 s, with no answer is ErrOutcomeUnknown). The
//	            topic does not deduplicate; the envelope's idempotency key makes
//	            a copy harmless. Replay is at least once: acknowledged offsets
//	            past the committed one are kept in 3 KiB of commit metadata, and
//	            any beyond that are redelivered.
//
// # Dead-letter topics and records
//
// Events of source topic T go to "T.retry.dlt" (replayable: transient,
// unknown) and "T.poison.dlt" (deterministic failures): pass [Destination]
// as the Processor's Destination (for other names, pass a function of your
// own). A dead-letter record's key is the source record's key, so an
// entity's events share a partition of the dead-letter topic and keep
// their order; its value is the dlq.v1 envelope; its headers are the
// envelope's ([broker.Headers]: class, stage, destination, schema, event
// id, idempotency key, EPSG) plus the source record's provenance in the
// manner of Spring Kafka's kafka_dlt-original-* headers —
// [HeaderOriginalTopic], [HeaderOriginalPartition], [HeaderOriginalOffset],
// [HeaderOriginalTimestamp], as decimal text — and [HeaderPublishedAt].
// Headers are bounded by [Options.HeaderBudget] (8 KiB): whatever does not
// fit is left out and counted in [HeaderHeadersDropped]. The provenance is
// taken from the envelope, and every header the store computes replaces an
// incoming one of the same name, so a record dead-lettered again (from the
// retry topic to the poison topic, say) keeps its original provenance and
// its headers never grow.
//
// Topics must exist, or the store must be allowed to create them: with
// [Options.Topics] (the URL opener's Create) Publish creates a missing
// topic once, with a max.message.bytes that fits the store's records, and
// a missing topic is an empty destination; without it, Publish, Fetch and
// List of a topic that does not exist fail with an error wrapping
// [broker.ErrNoStore].
//
// # Leases, in Kafka terms
//
// Fetch, Ack and Release read a dead-letter topic through a consumer group
// ([Options.ReplayGroup], "geodlq-replay.<topic>" by default), one kgo
// consumer per topic per store. Kafka gives each partition to one member
// of the group, and that is what makes leases exclusive: a store leases
// records only from partitions it holds, and when a rebalance takes a
// partition away it first waits for the leases there to be acknowledged or
// released (up to LeaseTTL), then commits and hands the partition over.
//
// A lease's expiry is the group's notion of a failed member; Renew restarts
// a lease (the replayer's heartbeat), except while the rebalance hands its
// partition to another member, when it is refused with ErrLeaseLost so
// that the rebalance is not held up. A store that holds a lease longer
// than LeaseTTL without renewing it, or that stops fetching from a topic
// for that long, leaves the topic's group, as a Java consumer past
// max.poll.interval.ms does: its leases are lost (Ack and Release return
// [broker.ErrLeaseLost]) and its partitions, with every unacknowledged
// record, go to the other members, or back to this store on its next
// Fetch, which rejoins. A process that dies outright is evicted after the
// group's session.timeout.ms, with the same effect. Close a store when its
// replay run is over: until it leaves, the group keeps giving it a share
// of the partitions, and other replayers see only the rest.
//
// The group's committed offset of a partition is the oldest record not yet
// acknowledged: a crash redelivers every unacknowledged record. Offsets
// acknowledged past it are listed in the commit's metadata
// ("geodlq.acked.v1:3-4,9"), so the next member skips them; when the list
// outgrows 3 KiB (Kafka's offset.metadata.max.bytes is 4 KiB), the rest are
// redelivered: at least once, never lost. Acknowledgements are committed in
// the background within about 100ms, before a List, on rebalance and on
// Close. A store that only fetched and released commits nothing.
//
// Records a filter does not match are neither returned nor leased: they
// stay in the store's buffer, unacknowledged, and hold their partition's
// committed offset back until a Fetch that matches them leases them and
// they are acknowledged. A filtered replay therefore never loses what it
// skips, and always ends, because a Fetch reads only up to the end offsets
// it found when called. The buffer is bounded ([Options.MaxBufferedBytes]):
// a filter that skips more than that sees only the first part of the topic
// until earlier records are acknowledged.
//
// Fetch returns records oldest first: in offset order within a partition
// (so per key), and by [HeaderPublishedAt] (else the record timestamp)
// across partitions. An empty result means nothing is available to this
// member now: every record is acknowledged, leased, not matching, or in a
// partition another member holds. Record.ID is "<partition>/<offset>";
// Record.Deliveries is 0, as Kafka keeps no delivery count.
//
// Kafka 4's share groups (KIP-932) lease records natively, but archive a
// record after share.delivery.count.limit deliveries (at most 10); a
// dead-letter store must not drop a record that replays keep skipping, so
// this adapter uses a classic consumer group.
//
// # Listing without leases
//
// The store is a [broker.Lister]: List, Destinations and (by listing)
// Stats read topics with Fetch requests of their own, sent to each
// partition's leader through the store's client — no consumer group,
// nothing committed, nothing leased, nothing written — so they work on a
// store opened read-only and never disturb a replay. A record below the
// replay group's committed offset, or listed in its commit metadata, is
// replayed (Kafka keeps it until retention deletes it); one this store
// holds a lease on is leased; the rest are pending (another process's
// leases are not visible). Pages follow Fetch's order (newest first: the
// reverse), hold at most 16 MiB of records and examine at most 20,000;
// memory is bounded by about 1 MiB per partition besides the page. A
// cursor is the position in each partition, so acknowledgements and new
// records never shift a page. Destinations lists the topics with pending
// records a geodlq store wrote (judged by the first pending record of the
// lowest partition holding one: it carries dlq-published-at): the
// dead-letter topics, and source topics that replay re-injected into
// before anything else was written there. The store is not a
// [broker.Purger]: Kafka deletes records by retention (retention.ms) and
// by offset prefix only, not the records a purge selects.
//
// # URL
//
// Importing this package registers the kafka scheme with
// [broker.OpenStore]:
//
//	kafka://HOST:PORT[,HOST:PORT…][?PARAMS]
//
// with the parameters lease_ttl (a duration, default 5m), join_wait
// (default 10s), max_message_bytes and header_budget (as in [Options]),
// and, for the topics Create makes, partitions and replication_factor
// (default: the broker's). Unknown parameters are refused. The opener
// makes its own client ([ProducerOpts], seeds from the URL, a dial
// timeout of OpenOptions.ConnectTimeout) and closes it with the store; it
// asks the cluster for its brokers within ConnectTimeout (10 s), so a
// server that accepts connections but never answers fails the open. With
// OpenOptions.Create, missing topics are created (as [Options.Topics]);
// with ReadOnly nothing is ever created or committed: Publish, Fetch,
// Ack and Release fail with an error wrapping broker.ErrReadOnly, and
// List, Destinations and Stats work. For TLS or SASL, build the client
// yourself and call [New].
//
// # Consumer
//
// [NewConsumer] returns the [broker.Consumer] of a source group consumer:
// a poll is a batch, a partition is an ordering key, an acknowledged
// record's offset is committed (synchronously, at the end of the poll,
// before a rebalance may proceed), and a record that was not acknowledged
// seeks its partition back to it. See NewConsumer for the client it needs.
//
// # As
//
// The store produces with the *kgo.Client passed to [New] and never closes
// it (a store the URL opener made closes its own). broker.Store.As sets
//
//   - a **kgo.Client to that client,
//   - a **kadm.Client to an admin client over it.
//
// The replay consumers are built from that client's connection options
// (seed brokers, TLS, SASL, dialer; not its producer, consumer or group
// options) plus [Options.ConsumerOpts].
package kafka
