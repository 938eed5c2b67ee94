// Package pubsub is geodlq's adapter for Google Cloud Pub/Sub
// (cloud.google.com/go/pubsub/v2): a dead-letter store on topics and
// subscriptions ([New], the portable *broker.Store), a consumer of source
// subscriptions ([NewConsumer], the portable *broker.Consumer), and a
// helper that builds and checks a subscription's dead-letter policy
// ([DeadLetterConfig]). Package pubsub/pubsubpush runs the same
// dead-letter path as an http.Handler for push subscriptions (Cloud Run,
// Cloud Functions 2nd gen, Eventarc).
//
//	import geopubsub "github.com/geodlq/geodlq/broker/pubsub"
//
// # Guarantees
//
// What the store [New] returns (dead-letter topics) and the consumer
// [NewConsumer] returns (a source subscription) promise; the sections
// below give the details.
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    None across pulls: the store publishes without an ordering key,
//	            so Pub/Sub's message ordering does not apply. Fetch sorts the
//	            messages of each Pull (up to 100) by publish time; a Fetch may
//	            pull several times.
//	Durability  Publish returns once Pub/Sub acknowledged the publish. Pub/Sub
//	            keeps a message only for subscriptions that exist then, so
//	            Publish refuses a topic without one with *NoSubscriptionError
//	            (checked until a store's first write there succeeds;
//	            Options.CreateTopics creates topic and subscription instead). A
//	            consumer acks a source message only after the handler succeeded
//	            or the dead-letter Publish returned nil.
//	Redelivery  A lease is the ack deadline: Fetch sets Options.LeaseTTL (60 s;
//	            whole seconds, 1 s to 600 s) with ModifyAckDeadline right after
//	            Pull. A crashed replayer's messages are redelivered once it
//	            passes. Renew is ModifyAckDeadline LeaseTTL. Renew, Ack and
//	            Release refuse, with ErrLeaseLost and without calling Pub/Sub,
//	            an ack id with less than a tenth of the lease (at most 1 s)
//	            left by the local clock, or one this store settled; with
//	            exactly-once delivery, Pub/Sub's rejection maps to ErrLeaseLost
//	            too.
//	Size limit  Options.MaxMessageBytes: 10,000,000 bytes (Pub/Sub's 10 MB) of
//	            data, attribute keys and values by default. The data may use
//	            MaxMessageBytes - HeaderBudget (64 KiB): 9,934,464 bytes by
//	            default, what MaxMessageBytes reports. Over either:
//	            *classify.TooLargeError. Never truncated.
//	Attributes  Every header of the message as an attribute (on a dead-letter
//	            write, broker.Headers: idempotency-key, dlq-event-id, dlq-class,
//	            dlq-stage, dlq-destination, dlq-schema, dlq-epsg when known),
//	            plus geodlq-key (the key, base64). When they break Pub/Sub's
//	            rules (100 attributes, 256-byte keys, 1024-byte values, no "goog"
//	            prefix, UTF-8) all headers travel as one JSON attribute,
//	            geodlq-headers; if that exceeds 1024 bytes Publish fails with an
//	            error. Budget: HeaderBudget (64 KiB).
//	Body        The dlq.v1 envelope, byte for byte, as the message data.
//	Attempts    The delivery attempt, which Pub/Sub reports only on
//	            subscriptions with a dead-letter policy (0 otherwise, and the
//	            Processor starts at 1): Record.Deliveries, and where a
//	            consumer's Processor starts counting.
//	Duplicates  Not deduplicated: Pub/Sub delivers at least once, and a publish
//	            retried after an error may be stored twice. The envelope's
//	            idempotency key makes any copy harmless.
//
// # Dead-letter store
//
// [New] returns a *broker.Store (Publisher, Limiter, DeadLetterSource)
// over a *pubsub.Client. A destination is a topic; Fetch reads one
// subscription of it (Options.Subscription, by default "<topic>-geodlq").
// Pub/Sub cannot read a subscription without pulling (leasing) its
// messages, so the store does not list, count or purge: List, Stats and
// Purge answer errors.ErrUnsupported.
//
//   - Durability: Publish returns once Pub/Sub acknowledged the publish.
//     Pub/Sub keeps a message only for the subscriptions that exist when it
//     is published, so before the first write to a destination the store
//     checks that the topic has a subscription and refuses with a
//     *[NoSubscriptionError] when it has none (Options.CreateTopics creates
//     topic and subscription instead). The check is made once per
//     destination per store.
//   - Body: the data, byte for byte. Headers become attributes, or one JSON
//     attribute, geodlq-headers, when they break Pub/Sub's rules (100
//     attributes, 256-byte keys, 1024-byte values, no "goog" prefix); the
//     key travels base64 in [HeaderKey].
//   - Size: 10 MB (10,000,000 bytes) of data, attributes and ordering key.
//     The store reports 10 MB − 64 KiB (Options.HeaderBudget) through
//     broker.Limiter; anything over is refused with a *classify.TooLargeError.
//   - Lease = ack deadline: Fetch is Pull (ReturnImmediately) followed by
//     ModifyAckDeadline(Options.LeaseTTL, 1–600 s); Ack is Acknowledge; Release
//     is ModifyAckDeadline 0 (a nack). Record.ID is the message id;
//     Record.Deliveries the delivery attempt, which Pub/Sub reports only on
//     subscriptions with a dead-letter policy (0 otherwise).
//   - Lost leases: without exactly-once delivery Pub/Sub ignores an expired
//     ack id silently, so the store refuses, with broker.ErrLeaseLost and
//     without calling Pub/Sub, an ack id whose deadline has run out by its
//     own clock (less a tenth of the lease, at most 1 s). With exactly-once
//     delivery, Pub/Sub's rejection of an ack id maps to broker.ErrLeaseLost
//     too.
//   - Filters: a filtered Fetch pulls, decodes and applies
//     broker.Filter.Match; non-matching messages are held until the scan
//     ends (so matches behind them are reached, not starved) and then
//     nacked at once; never acknowledged. One scan looks at up to
//     Options.FilterScanLimit messages and stops after half the lease.
//   - Ordering: the messages of each Pull (up to 100; a Fetch may pull
//     several times) are sorted by publish time. Across pulls nothing is
//     ordered: the store publishes without an ordering key, so a
//     subscription's message ordering does not apply to its records.
//   - Provenance: a message that Pub/Sub's own dead-letter policy forwarded
//     carries CloudPubSubDeadLetterSource* attributes; the store and
//     [MessageOf] map them (source subscription, delivery count, original
//     publish time) into the record's and the consumer's provenance.
//
// # Consumer
//
// [NewConsumer] receives from a source subscription (streaming pull; the
// client extends ack deadlines until a message is settled), runs a
// broker.Processor, acknowledges a message only after the outcome allows
// it — the handler succeeded, or the envelope's publish was confirmed —
// and nacks it otherwise, so Pub/Sub redelivers it and, after
// maxDeliveryAttempts, forwards it to the subscription's dead-letter topic.
// Attempts start at the delivery attempt.
//
// # Dead-letter policy
//
// [DeadLetterConfig] builds a dead-letter policy (maxDeliveryAttempts 5–100,
// default 5; outside, a *[MaxDeliveryAttemptsError]) and applies it only
// when the dead-letter topic has a subscription; [CheckDeadLetterPolicy]
// reports a missing policy, an out-of-range count, and a dead-letter topic
// that nobody reads.
//
// # As
//
// The store's As accepts a **pubsub.Client.
//
// # Tested against
//
// pstest (cloud.google.com/go/pubsub/v2/pstest), Pub/Sub's in-process fake,
// through the real client: broker/brokertest's RunConformanceTests
// (10,000 envelopes) and RunConsumerTests, and this package's tests. pstest honours dead-letter policies and delivery
// attempts but adds no CloudPubSubDeadLetterSource* attributes (their
// mapping is tested on recorded attribute sets), does not enforce Pub/Sub's
// size limits (the store does), and its own listener accepts only 4 MiB
// messages (the tests serve it with a 16 MiB limit). Not run against
// Google Cloud itself.
package pubsub
