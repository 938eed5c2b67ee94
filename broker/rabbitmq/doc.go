// Package rabbitmq is a geodlq dead-letter store on RabbitMQ (amqp091-go),
// and a consumer of RabbitMQ queues. [New] returns the portable
// [*broker.Store] over durable queues: a [broker.Publisher],
// [broker.DeadLetterSource] and [broker.Limiter] that publishes with
// confirms and passes broker/brokertest. [NewConsumer] consumes a source
// queue through a [broker.Processor] and acknowledges a delivery only after
// its dead-letter write was confirmed. [DeclareSourceQueue] wires a source
// queue to RabbitMQ's own dead-letter exchange, whose x-death header
// [MessageOf] reads into attempts and provenance. [SourcePublisher] puts
// events on a source queue, with confirms, as NewConsumer reads them: the
// replayer's target for re-injecting dead letters where they came from.
//
// # Guarantees
//
// What the store (dead-letter queues) and the consumer (a source queue)
// promise; the sections below give the details.
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    A queue delivers in publish order; a released or expired record
//	            is requeued at its original position on classic queues.
//	Durability  Publish sends persistent (delivery mode 2) and mandatory on a
//	            channel in confirm mode, and returns once the broker confirmed:
//	            for a durable classic queue, written to disk; for a quorum
//	            queue, on a majority of replicas. Unroutable: ErrUnroutable;
//	            nacked: ErrNacked. The consumer acks a source delivery only after
//	            the handler succeeded or the dead-letter publish was confirmed.
//	Redelivery  A lease is an unacknowledged basic.get delivery on the handle's
//	            channel. A crash closes the channel and the broker requeues it
//	            at once; a hung replayer's lease is requeued by the store after
//	            LeaseTTL (30 min, RabbitMQ's consumer_timeout). Only the
//	            fetching handle can settle it; an ended lease: ErrLeaseLost.
//	Size limit  Body at most MaxMessageBytes, 128 MiB by default (RabbitMQ's
//	            max_message_size; lower it to match the server's). Over it:
//	            *classify.TooLargeError before publishing; a body the server
//	            refuses as too large fails with one too. Never truncated.
//	Headers     Every header of the message as a string AMQP header (on a
//	            dead-letter write, broker.Headers: idempotency-key,
//	            dlq-event-id, dlq-class, dlq-stage, dlq-destination, dlq-schema,
//	            dlq-epsg when known), plus x-geodlq-key (HeaderKey: the key, a
//	            byte array). No budget of the store's own. Properties: a fresh
//	            message_id (Record.ID) and the publish timestamp.
//	Body        The dlq.v1 envelope, published exactly.
//	Attempts    Store: a quorum queue's x-delivery-count + 1; 0 on classic
//	            queues, which do not count. Consumer: DeliveryAttempt, 1 + the
//	            x-death rejected and delivery_limit counts + x-delivery-count
//	            (classic queues: + 1 when redelivered, a lower bound).
//	Duplicates  Not deduplicated: a Publish whose confirm did not arrive in
//	            time may still be stored, and its retry is a second message with
//	            another message_id. The envelope's idempotency key makes the
//	            copy harmless.
//
// # Topology
//
// The store publishes to one durable direct exchange (Options.Exchange,
// default "geodlq.dlq") with the destination as routing key; each
// destination has a durable queue, named Options.QueuePrefix +
// destination, bound with that key. [New] needs the exchange: with
// Options.Create it declares it when missing; without, a broker without it
// is [broker.ErrNoStore], as is an exchange of another kind. A
// destination's queue and binding are declared, idempotently, on the
// handle's first Publish or Fetch of it; [Declare] declares one ahead, to
// have the queue before anything is dead-lettered, and [Queue] names it.
// Queues are classic unless Options.QueueArgs says otherwise (for example
// {"x-queue-type": "quorum"}, which also makes the broker count
// deliveries). Arguments must match an existing queue's.
//
// # Durability
//
// Publish publishes persistent (delivery mode 2) and mandatory on a
// channel in confirm mode and returns once the broker confirmed the
// message: for a durable classic queue, written to disk; for a quorum
// queue, on a majority of replicas. A message no queue receives comes back
// (basic.return) and fails with [ErrUnroutable]; a nacked one fails with
// [ErrNacked]; a confirm that does not come within the write's deadline
// fails with an error wrapping broker.ErrOutcomeUnknown (the message may
// be stored). Each publish has a confirm channel to itself, from a pool of
// Options.PublishChannels, so a return is always matched to its message.
//
// The body is published exactly; string headers become AMQP headers and
// the ordering key travels as the byte-array header [HeaderKey]. Each
// message gets a fresh message_id, which becomes Record.ID and is stable
// across redeliveries (messages routed into a store queue by others
// without a message_id get an id hashed from body and x-death).
//
// # Leases
//
// Fetch takes messages with basic.get and manual acknowledgement on the
// handle's own channel: a lease is an unacknowledged delivery on that
// channel, invisible to other consumers until it is acknowledged
// (basic.ack: Ack), given back (basic.nack with requeue: Release), or its
// channel or connection closes — then the broker requeues it at once, so
// a replayer that crashes loses nothing. A replayer that hangs without
// crashing would hold its records forever (RabbitMQ's consumer_timeout
// defaults to 30 minutes and is server-wide), so the store also requeues
// a record itself once LeaseTTL has passed since the Fetch — or since the
// latest Renew, which moves that deadline (the delivery stays on the
// channel). Renewals stop short of RabbitMQ's consumer_timeout (30
// minutes, or LeaseTTL if longer) after the Fetch: past it the broker
// closes the channel and requeues every delivery on it.
//
// An AMQP delivery tag belongs to the channel that received it: only the
// handle that fetched a record can renew or settle it. Renew, Ack or Release through
// another handle, after the lease ended (settled, expired, channel
// closed), or a second time fails with [broker.ErrLeaseLost] without
// touching the broker. Ack and Release are followed by a synchronous
// round trip on the channel, so when they return the broker has processed
// them. Record.Deliveries and Message.DeliveryAttempt are the quorum
// queue's x-delivery-count + 1, and 0 on classic queues, which do not
// count deliveries.
//
// Filters are evaluated by the store with [broker.Filter.MatchRecord]:
// records that do not match are held while the scan continues and
// requeued (and the requeue waited for) before Fetch returns, so a
// filtered Fetch reads through the whole ready queue.
//
// # No listing
//
// The store has no [broker.Lister] (nor Purger): an AMQP 0-9-1 queue
// cannot be browsed. Reading a message is delivering it — basic.get takes
// it out of the queue until it is acknowledged or requeued — so a listing
// would lease every record it shows, count a delivery on quorum queues,
// and hide the records from a replayer meanwhile. List, Destinations,
// Stats and Purge answer an error wrapping errors.ErrUnsupported. (A
// RabbitMQ stream, x-queue-type "stream", can be read without consuming,
// but has no per-message acknowledgement to lease with.)
//
// # Ordering
//
// A queue delivers in publish order; a released or expired record is
// requeued at its original position on classic queues.
//
// # Limits
//
// MaxMessageBytes (default 128 MiB, RabbitMQ's max_message_size) is the
// body limit the store reports as its [broker.Limiter]; a larger body is
// refused with a [*classify.TooLargeError] before publishing. Set it to
// the server's max_message_size if that was lowered; a body the server
// still refuses fails the publish with a TooLargeError too. Destination
// and queue names are at most 255 bytes.
//
// # The broker's dead-letter exchange
//
// [DeclareSourceQueue] declares a source queue with
// x-dead-letter-exchange, x-dead-letter-routing-key and, for quorum
// queues, x-delivery-limit, and optionally the exchange and a parking
// queue behind it. RabbitMQ then dead-letters messages that consumers
// reject without requeue, that expire, or that exceed the delivery limit,
// adding an x-death entry per (queue, reason). [MessageOf] turns a
// delivery into a [broker.Message] whose DeliveryAttempt counts the
// rejections and delivery limits x-death records and whose Source is the
// original queue, message id and time — so a consumer on a parking queue
// turns natively dead-lettered messages into dlq.v1 envelopes with their
// history.
//
// # Consumer: publisher confirms before the source is acknowledged
//
// [NewConsumer] returns the portable [*broker.Consumer] over a queue,
// consumed with manual acknowledgements (basic.consume) on a channel the
// caller gives it, with a prefetch of ConsumerOptions.Prefetch (default
// MaxBatch, itself Concurrency by default). Each Receive hands the
// Consumer the deliveries the broker has pushed, up to MaxBatch. A
// delivery is acknowledged (basic.ack) only when the handler succeeded or
// the dead-letter publish was confirmed; otherwise it is requeued at once
// (basic.nack; AMQP has no delayed requeue, so NackDelay does not apply)
// or, with RejectOnFailure and a failed dead-letter write, rejected to the
// source queue's own dead-letter exchange.
//
// When Run's context ends, the consumer cancels its AMQP consumer and
// requeues every delivery the broker had pushed and it had not processed,
// instead of leaving them unacknowledged until the channel closes; Close
// does the same for a Run that ended during a batch. It cancels on the
// goroutine of Run or Close, never on one of its own: a channel's
// synchronous methods must not run concurrently (amqp091-go's
// ConsumeWithContext cancels from a goroutine of its own, which could
// deadlock against the caller's Channel.Close). Close the consumer after
// Run returned, and the channel after that. A source queue keeps no
// per-key order across a requeue: the broker delivers newer messages while
// a requeued one waits.
//
// # URL
//
// Importing the package registers the amqp and amqps schemes with
// [broker.OpenStore]:
//
//	amqp://user:password@host:5672/vhost?geodlq_exchange=geodlq.dlq&geodlq_queue_prefix=dlq.&geodlq_queue_type=quorum&lease_ttl=30m&max_message_bytes=16777216
//
// geodlq_exchange and geodlq_queue_prefix set Options.Exchange and
// QueuePrefix, geodlq_queue_type (classic, the default, or quorum) the
// destination queues' type, lease_ttl and max_message_bytes the
// StoreOptions; other geodlq_ parameters are refused, and the rest
// (heartbeat, channel_max, auth_mechanism, TLS files for amqps) are
// amqp091-go's. OpenOptions.ConnectTimeout bounds the dial and the TLS
// and AMQP handshakes (a server that accepts the connection and never
// answers fails within it). OpenOptions.Create declares a missing
// exchange; OpenOptions.ReadOnly declares nothing, and the store then
// refuses writes and leases with broker.ErrReadOnly (and, having no
// listing, serves nothing else). A virtual host that does not exist, a
// broker without the exchange, or an exchange of another kind is an error
// wrapping [broker.ErrNoStore]. Closing a store the opener made closes its
// connection.
//
// # As
//
// [broker.Store.As] reaches the connection the store uses, with a
// **amqp.Connection (amqp being github.com/rabbitmq/amqp091-go). A store
// made by [New] keeps the caller's connection: closing the store closes
// only the store's channels.
package rabbitmq
