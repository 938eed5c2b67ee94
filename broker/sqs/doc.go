// Package sqs is geodlq's adapter for Amazon SQS (aws-sdk-go-v2
// service/sqs): a dead-letter store on SQS queues ([New], the portable
// *broker.Store), a consumer of source queues ([NewConsumer], the portable
// *broker.Consumer), and a helper that builds and checks a source queue's
// RedrivePolicy and VisibilityTimeout ([RedriveConfig]). Package
// sqs/sqslambda runs the same dead-letter path in an AWS Lambda function
// fed by an SQS event source mapping, and the ingress rules behind Amazon
// API Gateway.
//
// Import it under another name when you also import the SDK's package:
//
//	import geosqs "github.com/geodlq/geodlq/broker/sqs"
//
// # Guarantees
//
// What the store [New] returns (dead-letter queues) and the consumer
// [NewConsumer] returns (a source queue) promise; the sections below give
// the details.
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Standard queues: best effort. FIFO queues: the order of a message
//	            group (the source's MessageGroupId, else the key or its
//	            SHA-256, else "geodlq"); a consumer processes one FIFO group's
//	            messages one after another, in order.
//	Durability  Publish returns once SendMessage (or the SendMessageBatch entry)
//	            succeeded; SQS stores messages redundantly before it answers. SQS
//	            deletes them after MessageRetentionPeriod (4 days by default;
//	            queues CreateQueues makes: 14 days, the maximum). A consumer
//	            deletes a source message only after the handler succeeded or
//	            the dead-letter Publish returned nil.
//	Redelivery  A lease is the visibility timeout: Options.LeaseTTL (30 s; whole
//	            seconds, 1 s to 12 h). A crashed replayer's messages reappear
//	            when it ends. Renew is ChangeMessageVisibility LeaseTTL. Renew,
//	            Ack and Release refuse, with ErrLeaseLost and without calling
//	            SQS, a lease with less than a tenth of it (at most 1 s) left by
//	            the local clock, or a handle this store settled; a receipt
//	            handle SQS rejects maps to ErrLeaseLost too.
//	Size limit  Options.MaxMessageBytes, the queue's MaximumMessageSize: 256 KiB
//	            by default (DefaultMaxMessageBytes), at most 1 MiB; counted as
//	            SQS counts, body plus every attribute's name, type and value.
//	            The body (as sent) may use MaxMessageBytes - HeaderBudget
//	            (4 KiB): 258,048 bytes by default, what MaxMessageBytes
//	            reports. Over either: *classify.TooLargeError. Never truncated.
//	Attributes  Every header of the message as a String message attribute (on
//	            a dead-letter write, broker.Headers: idempotency-key,
//	            dlq-event-id, dlq-class, dlq-stage, dlq-destination, dlq-schema,
//	            dlq-epsg when known), plus geodlq-key (the key, base64) and
//	            geodlq-body-encoding when the body is base64. When that would
//	            exceed SQS's 10 attributes, or a name or value SQS refuses (or an
//	            empty value) is among them, all headers travel as one JSON
//	            attribute, geodlq-headers. Budget: HeaderBudget (4 KiB).
//	Body        The dlq.v1 envelope, exactly; base64 (geodlq-body-encoding)
//	            when it holds characters SQS refuses, decoded on receipt.
//	Attempts    ApproximateReceiveCount: Record.Deliveries, and where a
//	            consumer's Processor starts counting attempts.
//	Duplicates  Standard queues: not deduplicated (a retried Publish is a second
//	            message). FIFO queues: MessageDeduplicationId (DeduplicationID:
//	            the source's, else a hash of the source position or the body),
//	            so a write repeated within SQS's 5-minute interval leaves one
//	            record. The envelope's idempotency key makes any copy harmless.
//
// # Dead-letter store
//
// [New] returns a *broker.Store (Publisher, Limiter, DeadLetterSource)
// over a *sqs.Client (or anything with its methods, [API]). A destination
// names a queue ([QueueName] maps "spatial.events.poison.dlt" to
// "spatial-events-poison-dlt"; a queue URL is used as is). SQS cannot read
// a queue without receiving (leasing) its messages, so the store does not
// list, count or purge: List, Stats and Purge answer
// errors.ErrUnsupported (use the queue's ApproximateNumberOfMessages).
//
//   - Durability: Publish returns once SendMessage (or SendMessageBatch:
//     concurrent calls to one queue are coalesced, up to 10 per request) has
//     succeeded; SQS stores messages redundantly before it answers.
//   - Body: the exact envelope bytes. A body with characters SQS refuses
//     (invalid UTF-8, control characters other than tab, CR and LF,
//     U+FFFE/U+FFFF) travels base64-encoded and is decoded on receipt
//     (attribute geodlq-body-encoding = "base64"); a dlq.v1 envelope needs
//     it only when it holds
//     U+FFFE or U+FFFF, which JSON allows (a payload embedded verbatim may
//     carry them).
//   - Headers become String message attributes; when they would exceed
//     SQS's 10 attributes, or a name or value SQS refuses is among them,
//     they travel as one JSON attribute, geodlq-headers. The ordering key
//     travels base64 in [HeaderKey].
//   - Size: SQS counts the body plus every attribute's name, type and
//     value against MaximumMessageSize: 256 KiB by default, up to 1 MiB
//     (Options.MaxMessageBytes; configure the queue to match). The store
//     reports MaxMessageBytes − 4 KiB (Options.HeaderBudget) through
//     broker.Limiter, so the envelope builder offloads geometry until the
//     body fits with room for the attributes; anything still over is
//     refused with a *classify.TooLargeError, never truncated.
//   - Lease = visibility timeout: Fetch is ReceiveMessage (10 at a time)
//     with VisibilityTimeout = Options.LeaseTTL; Renew is
//     ChangeMessageVisibility LeaseTTL (SQS holds a message at most 12 hours
//     after its receipt); Ack is DeleteMessage; Release is
//     ChangeMessageVisibility 0. Record.ID is the MessageId,
//     Record.Deliveries the ApproximateReceiveCount.
//   - Lost leases: when SQS rejects a receipt handle (ReceiptHandleIsInvalid,
//     MessageNotInflight, "the receipt handle has expired": FIFO queues do),
//     Ack and Release fail with broker.ErrLeaseLost. Standard queues accept a
//     superseded handle without error, so the store also refuses, with
//     broker.ErrLeaseLost and without calling SQS, a handle whose visibility
//     timeout has run out by its own clock (less a tenth of the lease, at
//     most 1 s): the record then comes back and is replayed again, which the
//     replayer's idempotency claims absorb.
//   - Filters: SQS cannot filter, so a filtered Fetch decodes each message
//     and applies broker.Filter.Match. Non-matching messages are held
//     invisible until the scan ends — so matching messages behind them are
//     reached in the same Fetch instead of being starved — and are then
//     released at once; they are never deleted, and if the release fails
//     their visibility timeout brings them back. One scan looks at up to
//     Options.FilterScanLimit messages (10,000) and stops after half the
//     lease. On a FIFO queue a held message also holds back the rest of its
//     message group for that scan.
//   - Ordering: standard queues are best-effort ordered; FIFO queues keep
//     the order of a message group.
//   - Retention: SQS deletes messages after the queue's
//     MessageRetentionPeriod (4 days by default, 14 at most). A dead-letter
//     queue is not an archive: set 14 days (CreateQueues does) and replay
//     or export before then.
//
// # FIFO
//
// On a FIFO dead-letter queue (name ending in ".fifo") an envelope keeps
// its source's MessageGroupId and MessageDeduplicationId (see
// [DeduplicationID]), so a consumer that crashes between the dead-letter
// write and the delete, and dead-letters the redelivered message again
// within 5 minutes, leaves one record. An envelope from a FIFO SQS source
// is refused with a *[FIFOMismatchError] when the destination is a standard
// queue (Options.AllowFIFOToStandard overrides).
//
// # Consumer
//
// [NewConsumer] receives from a source queue, runs a broker.Processor, and
// deletes each message only once the outcome allows it: the handler
// succeeded or the envelope is durably in the dead-letter store. If the
// dead-letter write fails — an SQS error, the seed's ClientError — the
// message is given back (ChangeMessageVisibility to the consumer's
// NackDelay), never deleted, and SQS's redrive policy takes over after
// maxReceiveCount. Attempts start at ApproximateReceiveCount. The
// visibility timeout is extended while a long spatial operation runs.
// Messages of one FIFO group are processed in order. [MessageOf] converts
// a received message for code that receives on its own.
//
// # Redrive settings
//
// [RedriveConfig.Settings] builds a RedrivePolicy (maxReceiveCount 1–1000,
// a warning outside the seed's 3–5) and a VisibilityTimeout from the
// longest expected spatial operation ([VisibilityTimeoutFor]: 6×, at least
// 30 s, at most 12 h), refuses mixed FIFO/standard pairs, and can apply
// and check them.
//
// # As
//
// The store's As accepts a *[API] and a **sqs.Client (when the store was
// made with one).
//
// # Tested against
//
// local-aws-sqs 2.0.2 (npm; it speaks SDK v1.53's JSON protocol), started
// by scripts/local-sqs.sh, through the real SDK client: the
// broker/brokertest suites (RunConformanceTests with 10,000 envelopes and
// concurrent writers and readers; RunConsumerTests on a FIFO queue) and
// this package's tests, including the seed's verification with Debian's
// aws CLI. Not run against AWS itself. Behaviour that
// differs on local-aws-sqs and that the tests allow for: it counts
// in-flight messages in ApproximateNumberOfMessages, counts a
// ChangeMessageVisibility as a receive, holds a long poll until it has
// MaxNumberOfMessages (SQS answers as soon as it has any), and honours
// only the older AttributeNames parameter of ReceiveMessage (the store
// sends both).
package sqs
