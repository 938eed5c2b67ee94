// Package kafka is geodlq's Kafka adapter (franz-go): a dead-letter store
// that writes envelopes to dead-letter topics and reads them back for
// replay, and [Consume], a source-topic loop that commits a record's offset
// only after its outcome allows it.
//
//	cl, _ := kgo.NewClient(append(kafka.ProducerOpts(nil), kgo.SeedBrokers("kafka:9092"))...)
//	store, _ := kafka.New(cl, nil)
//	proc, _ := broker.NewProcessor(broker.ProcessorOptions{Publisher: store, Destination: store.Destination})
//	src, _ := kgo.NewClient(append(kafka.ConsumerOpts("spatial-app", "spatial.events"), kgo.SeedBrokers("kafka:9092"))...)
//	err := kafka.Consume(ctx, src, proc, handler, nil)
//
// # Guarantees
//
// What a [Store] (dead-letter topics) and [Consume] (source topics)
// promise; the sections below give the details.
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Per key. A dead-letter record keeps the source record's key, so
//	            with a key-hashing partitioner (kgo's default) an entity's
//	            records share a partition of the dead-letter topic, in publish
//	            order. Fetch: offset order within a partition, dlq-published-at
//	            (else the record timestamp) across partitions. Consume: one
//	            record at a time per partition, in offset order.
//	Durability  Publish returns once every in-sync replica has the record
//	            (acks=all): New refuses a client without acks=all and the
//	            idempotent producer, or a transactional one. Consume commits a
//	            source offset only after the handler succeeded or the
//	            dead-letter Publish returned nil.
//	Redelivery  Replay leases through a consumer group ("geodlq-replay.<topic>"):
//	            one member per partition. A Store that holds a lease past
//	            LeaseTTL (5 min), or leaves a topic untouched that long, leaves
//	            its group: its leases are lost (ErrLeaseLost) and the records go
//	            to another member. A crashed process is evicted after
//	            session.timeout.ms (kgo: 45 s). The committed offset is the
//	            oldest unacknowledged record, so a crash redelivers every
//	            unacknowledged record. Consume re-reads a partition from a
//	            record that was not acknowledged.
//	Size limit  Envelope (record value) at most Store.MaxMessageBytes: by default
//	            min(1048588, the client's ProducerBatchMaxBytes) - HeaderBudget
//	            (8 KiB) - RecordOverhead (1 KiB) = 1,039,372 bytes with
//	            ProducerOpts, 990,796 with kgo's default batch size; set with
//	            Options.MaxMessageBytes. Over it: *classify.TooLargeError before
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
//	Attempts    Kafka keeps no delivery count: Consume starts the Processor's
//	            attempts at 1 on every consumption, and Record.Deliveries is 0.
//	Duplicates  The idempotent producer never duplicates a record within a
//	            session, but a Publish whose context ends after sending may still
//	            write, and a retry then writes again: the topic does not
//	            deduplicate; the envelope's idempotency key makes the copy
//	            harmless. Replay is at least once: acknowledged offsets past the
//	            committed one are kept in 3 KiB of commit metadata, and any beyond
//	            that are redelivered.
//
// # Dead-letter topics and records
//
// Events of source topic T go to "T.retry.dlt" (replayable: transient,
// unknown) and "T.poison.dlt" (deterministic failures), or wherever
// [Options.Naming] says; [Store.Destination] plugs the naming into a
// [broker.Processor]. A dead-letter record's key is the source record's
// key, so an entity's events share a partition of the dead-letter topic
// and keep their order; its value is the dlq.v1 envelope; its headers are
// the envelope's ([broker.Headers]: class, stage, destination, schema,
// event id, idempotency key, EPSG) plus the source record's provenance in
// the manner of Spring Kafka's kafka_dlt-original-* headers —
// [HeaderOriginalTopic], [HeaderOriginalPartition], [HeaderOriginalOffset],
// [HeaderOriginalTimestamp], as decimal text — and [HeaderPublishedAt].
// Headers are bounded by [Options.HeaderBudget] (8 KiB): whatever does not
// fit is left out and counted in [HeaderHeadersDropped]. The provenance is
// taken from the envelope, and every header the Store computes replaces an
// incoming one of the same name, so a record dead-lettered again (from the
// retry topic to the poison topic, say) keeps its original provenance and
// its headers never grow.
//
// # Durability
//
// Publish returns nil only when the record is acknowledged by every
// in-sync replica: [New] refuses a client that does not produce with
// acks=all and the idempotent producer, or that is transactional. The
// producer's retries therefore never duplicate a record within a session;
// a Publish whose context ends after the record was sent reports an error
// although the record may still be written, and the envelope's idempotency
// key makes that duplicate harmless.
//
// [Consume] commits a source record's offset only when the
// [broker.Processor] outcome says Ack, that is, after the handler
// succeeded or the envelope's write was acknowledged; a partition whose
// record was not acknowledged is sought back to it and read again, and
// nothing from it on is committed, so a restarted consumer starts there.
// Kafka keeps no delivery count: attempts start at 1 on every consumption.
//
// # Limits
//
// [Store.MaxMessageBytes] (the [broker.Limiter] the Processor hands to the
// envelope builder, which offloads to stay under it) is the largest
// envelope Publish accepts: by default Kafka's max.message.bytes (1048588)
// or the client's ProducerBatchMaxBytes, whichever is smaller, less the
// header budget and [RecordOverhead], because Kafka applies the limit to
// the whole record batch. A larger envelope is refused with
// [*classify.TooLargeError] before anything is produced; a record the client
// or broker refuses as too large maps to the same error. Nothing is ever
// truncated. With [Options.Topics] set, Publish creates missing topics with
// a max.message.bytes that fits.
//
// # Leases, in Kafka terms
//
// Fetch, Ack and Release read a dead-letter topic through a consumer group
// ([Options.ReplayGroup], "geodlq-replay.<topic>" by default), one kgo
// consumer per topic per Store. Kafka gives each partition to one member
// of the group, and that is what makes leases exclusive: a Store leases
// records only from partitions it holds, and when a rebalance takes a
// partition away it first waits for the leases there to be acknowledged or
// released (up to LeaseTTL), then commits and hands the partition over.
//
// A lease's expiry is the group's notion of a failed member. A Store that
// holds a lease longer than [Options.LeaseTTL], or that stops fetching
// from a topic for that long, leaves the topic's group, as a Java consumer
// past max.poll.interval.ms does: its leases are lost (Ack and Release
// return [broker.ErrLeaseLost]) and its partitions, with every
// unacknowledged record, go to the other members, or back to this Store on
// its next Fetch, which rejoins. A process that dies outright is evicted
// after the group's session.timeout.ms, with the same effect. Close a Store
// when its replay run is over: until it leaves, the group keeps giving it
// a share of the partitions, and other replayers see only the rest.
//
// The group's committed offset of a partition is the oldest record not yet
// acknowledged: a crash redelivers every unacknowledged record. Offsets
// acknowledged past it are listed in the commit's metadata
// ("geodlq.acked.v1:3-4,9"), so the next member skips them; when the list
// outgrows 3 KiB (Kafka's offset.metadata.max.bytes is 4 KiB), the rest are
// redelivered: at least once, never lost. Acknowledgements are committed in
// the background within about 100ms, on rebalance and on [Store.Close];
// [Store.Commit] commits at once.
//
// Records a filter does not match are neither returned nor leased: they
// stay in the Store's buffer, unacknowledged, and hold their partition's
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
// # As
//
// The Store produces with the *kgo.Client passed to [New] and never closes
// it; [Store.Client] returns it and [Store.As] sets a **kgo.Client or a
// **kadm.Client. The replay consumers are built from that client's
// connection options (seed brokers, TLS, SASL, dialer; not its producer,
// consumer or group options) plus [Options.ConsumerOpts].
package kafka
