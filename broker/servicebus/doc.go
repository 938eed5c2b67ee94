// Package servicebus is geodlq's adapter for Azure Service Bus
// (github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus).
//
// NOT RUN AGAINST A REAL NAMESPACE. No Service Bus server can run on
// geodlq's test machines (the emulator needs Docker), so this package is
// tested only against an in-memory fake of the SDK's sender and receiver
// (the [Sender] and [Receiver] interfaces, which *azservicebus.Sender and
// *azservicebus.Receiver satisfy). The fake implements the semantics the
// adapter relies on — PeekLock with lock tokens and expiry, DeliveryCount,
// MaxDeliveryCount, DeadLetterMessage into $DeadLetterQueue, lost locks —
// but the AMQP wire, the SDK's own retries and link recovery, and the
// service's size accounting have not been exercised. Try it on a
// non-production namespace first.
//
// # Consumer and native dead-lettering
//
// [Consumer] receives from a source queue (PeekLock) and runs a
// broker.Processor; attempts start at DeliveryCount, and the message lock
// is renewed while the handler runs. Give the processor a [DeadLetterer]
// as its publisher to dead-letter the Service Bus way: the failed message
// is moved to the queue's $DeadLetterQueue sub-queue (DeadLetterMessage)
// with
//
//   - DeadLetterReason = "<class>/<stage>", e.g.
//     "invalid_geometry/topology_validation";
//   - DeadLetterErrorDescription = the error message (at most 4,096 bytes);
//   - application properties: the dead-letter headers and the encoded dlq.v1
//     envelope in [PropEnvelope]. The body is left as it was: Service Bus
//     does not let a dead-lettering change it. The envelope therefore shares
//     the message size with the original body (the DeadLetterer reports half
//     the limit to the envelope builder, and refuses what still does not fit).
//
// Or give the processor a [Store] to send the envelope, as the body of a new
// message, to a separate queue, after which the source is completed. If
// the dead-letter write fails the message is abandoned, never completed:
// Service Bus redelivers it and, after the queue's MaxDeliveryCount, moves
// it to $DeadLetterQueue itself (reason MaxDeliveryCountExceeded, no
// envelope). Nothing is lost either way.
//
// # Dead-letter store and replay source
//
// [Store] is a broker.Publisher, broker.Limiter and broker.DeadLetterSource.
// A destination is a queue, or a queue's dead-letter sub-queue
// ([DeadLetterQueue]: "vector-jobs/$DeadLetterQueue"), which is how a
// replayer reads what the consumer dead-lettered.
//
//   - Durability: Publish returns once SendMessage succeeded.
//   - Body: the envelope bytes exactly (for a sub-queue record, the
//     envelope from [PropEnvelope]); headers are string application
//     properties; the key travels base64 in [PropKey].
//   - Size: 256 KiB on the Standard tier, body and properties together;
//     Premium entities allow more (Options.MaxMessageBytes). The store
//     reports the limit less 8 KiB for properties through broker.Limiter;
//     anything over is refused with a *broker.TooLargeError.
//   - Lease = message lock: its length is the queue's LockDuration (set on
//     the queue, not per receive; see [QueueConfig]). Ack is CompleteMessage,
//     Release is AbandonMessage. A lost lock (azservicebus.CodeLockLost) is
//     reported by Service Bus and maps to broker.ErrLeaseLost. A record must
//     be settled through the Store that fetched it: Service Bus settles a
//     message on the link that received it.
//   - Deliveries: every Fetch that locks a message counts as a delivery,
//     filtered scans included (a filtered Fetch abandons what does not
//     match), so a queue used as a dead-letter store needs a MaxDeliveryCount
//     far above the number of scans, or Service Bus dead-letters its records.
//     Sub-queues have no MaxDeliveryCount.
//   - Ordering: a queue is FIFO by sequence number; Record.ID is the
//     sequence number.
//
// # Queue settings
//
// [QueueConfig.Settings] builds MaxDeliveryCount (at least 1, default 4; a
// warning outside the seed's 3–5) and LockDuration (6× the longest spatial
// operation, within Service Bus's 5 s–5 min) as admin.QueueProperties,
// with dead-lettering on expiry on.
package servicebus
