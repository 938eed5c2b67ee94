// Package servicebus is geodlq's adapter for Azure Service Bus
// (github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus).
//
// NOT RUN AGAINST A REAL NAMESPACE. No Service Bus server can run on
// geodlq's test machines (the emulator needs Docker), so this package is
// tested only against an in-memory fake of the SDK's sender and receiver
// (the boundary *azservicebus.Sender and *azservicebus.Receiver sit at;
// [Receiver] is the receiver's part the consumer uses). The fake implements the semantics the
// adapter relies on — PeekLock with lock tokens and expiry, DeliveryCount,
// MaxDeliveryCount, DeadLetterMessage into $DeadLetterQueue, lost locks —
// but the AMQP wire, the SDK's own retries and link recovery, and the
// service's size accounting have not been exercised. Try it on a
// non-production namespace first.
//
// # Guarantees
//
// What the store [New] returns (a queue or a dead-letter sub-queue), a
// [DeadLetterer] (native dead-lettering) and the consumer [NewConsumer]
// returns (a source queue) promise, as
// implemented against the SDK's interfaces; the sections below give the
// details.
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Fetch returns messages as Service Bus delivers them, by sequence
//	            number (Record.ID); the store uses no sessions, without which
//	            Service Bus does not guarantee FIFO. An abandoned message comes
//	            back.
//	Durability  Store: Publish returns once SendMessage succeeded. DeadLetterer:
//	            once DeadLetterMessage succeeded. A consumer settles a source
//	            message (completes it, or the DeadLetterer moved it) only after
//	            the handler succeeded or the envelope was written; otherwise it
//	            abandons it.
//	Redelivery  A lease is the message lock, the queue's LockDuration (Service
//	            Bus's default 60 s; QueueConfig derives one). A crashed
//	            replayer's messages come back when their locks expire, with
//	            DeliveryCount incremented; after a queue's MaxDeliveryCount
//	            Service Bus moves them to $DeadLetterQueue (sub-queues have
//	            none). Renew is RenewMessageLock. A lost lock (CodeLockLost),
//	            or a record not leased through this store, gives ErrLeaseLost.
//	            Options.LeaseTTL does not apply: the lock's length is the
//	            queue's. Record.LeaseExpires is LockedUntil (Service Bus's
//	            clock) less a tenth of the lock, at most 1 s, for skew.
//	Size limit  Options.MaxMessageBytes: 256 KiB by default (Standard tier;
//	            Premium allows more), body and properties together. Store: the
//	            body may use MaxMessageBytes - HeaderBudget (8 KiB): 253,952
//	            bytes by default. DeadLetterer (DeadLettererOptions, same
//	            defaults): the envelope shares the message with the original
//	            body, so it reports half that (126,976) and refuses a total of
//	            body, envelope and properties over MaxMessageBytes. Over:
//	            *classify.TooLargeError. Never truncated.
//	Properties  Every header of the message as a string application property (on
//	            a dead-letter write, broker.Headers: idempotency-key,
//	            dlq-event-id, dlq-class, dlq-stage, dlq-destination, dlq-schema,
//	            dlq-epsg when known), plus geodlq-key (the key, base64); Subject
//	            is dlq-class. DeadLetterer: also geodlq-envelope, with
//	            DeadLetterReason "<class>/<stage>" and DeadLetterErrorDescription
//	            the error message (at most 4,096 bytes). Budget: HeaderBudget
//	            (8 KiB).
//	Body        Store: the dlq.v1 envelope, exactly. DeadLetterer: the original
//	            payload, untouched; the envelope is in geodlq-envelope, and a
//	            sub-queue record's Message.Body is that envelope.
//	Attempts    DeliveryCount: Record.Deliveries, and where a consumer's
//	            Processor starts counting. Every Fetch that locks a message
//	            counts, filtered pass-overs included.
//	Duplicates  Not deduplicated by the store (it sets no MessageID for Service
//	            Bus duplicate detection): a send repeated after an error can
//	            store a second message. The envelope's idempotency key makes the
//	            copy harmless.
//
// # Consumer and native dead-lettering
//
// [NewConsumer] receives from a source queue (PeekLock) and runs a
// broker.Processor; attempts start at DeliveryCount, and the message lock
// is renewed while the handler runs. Give the processor a [DeadLetterer]
// as its publisher (and the consumer the same DeadLetterer in
// ConsumerOptions.DeadLetterer) to dead-letter the Service Bus way: the
// failed message
// is moved to the queue's $DeadLetterQueue sub-queue (DeadLetterMessage)
// with
//
//   - DeadLetterReason = "<class>/<stage>", e.g.
//     "invalid_geometry/topology_validation";
//   - DeadLetterErrorDescription = the error message (at most 4,096 bytes);
//   - application properties: the dead-letter headers and the encoded dlq.v1
//     envelope in [HeaderEnvelope]. The body is left as it was: Service Bus
//     does not let a dead-lettering change it. The envelope therefore shares
//     the message size with the original body (the DeadLetterer reports half
//     of the limit less the property budget to the envelope builder, and
//     refuses what still does not fit).
//
// Or give the processor the store [New] returns, to send the envelope, as the body of a new
// message, to a separate queue, after which the source is completed. If
// the dead-letter write fails the message is abandoned, never completed:
// Service Bus redelivers it and, after the queue's MaxDeliveryCount, moves
// it to $DeadLetterQueue itself (reason MaxDeliveryCountExceeded, no
// envelope). Nothing is lost either way.
//
// # Dead-letter store and replay source
//
// [New] returns a *broker.Store (Publisher, Limiter, DeadLetterSource)
// over an *azservicebus.Client. The store does not list, count or purge
// (List, Stats and Purge answer errors.ErrUnsupported); Service Bus could
// peek without locking, which is left for later.
// A destination is a queue, or a queue's dead-letter sub-queue
// ([DeadLetterQueue]: "vector-jobs/$DeadLetterQueue"), which is how a
// replayer reads what the consumer dead-lettered.
//
//   - Durability: Publish returns once SendMessage succeeded.
//   - Body: the envelope bytes exactly (for a sub-queue record, the
//     envelope from [HeaderEnvelope]); headers are string application
//     properties; the key travels base64 in [HeaderKey].
//   - Size: 256 KiB on the Standard tier, body and properties together;
//     Premium entities allow more (Options.MaxMessageBytes). The store
//     reports the limit less 8 KiB for properties through broker.Limiter;
//     anything over is refused with a *classify.TooLargeError.
//   - Lease = message lock: its length is the queue's LockDuration (set on
//     the queue, not per receive; see [QueueConfig]). Ack is CompleteMessage,
//     Release is AbandonMessage. A lost lock (azservicebus.CodeLockLost) is
//     reported by Service Bus and maps to broker.ErrLeaseLost. A record must
//     be settled through the store that fetched it: Service Bus settles a
//     message on the link that received it.
//   - Deliveries: every Fetch that locks a message counts as a delivery,
//     filtered scans included (a filtered Fetch abandons what does not
//     match), so a queue used as a dead-letter store needs a MaxDeliveryCount
//     far above the number of scans, or Service Bus dead-letters its records.
//     Sub-queues have no MaxDeliveryCount.
//   - Ordering: messages come in the order Service Bus delivers them, by
//     sequence number; without sessions, which the store does not use,
//     Service Bus does not guarantee FIFO. Record.ID is the sequence number.
//
// # Queue settings
//
// [QueueConfig.Settings] builds MaxDeliveryCount (at least 1, default 4; a
// warning outside the seed's 3–5) and LockDuration (6× the longest spatial
// operation, within Service Bus's 5 s–5 min) as admin.QueueProperties,
// with dead-lettering on expiry on.
//
// # As
//
// The store's As accepts a **azservicebus.Client.
package servicebus
