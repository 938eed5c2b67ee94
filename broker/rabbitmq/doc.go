// Package rabbitmq is a geodlq dead-letter store on RabbitMQ (amqp091-go):
// a [broker.Publisher], [broker.DeadLetterSource] and [broker.Limiter]
// over durable queues, plus the wiring for RabbitMQ's own dead-lettering —
// a topology helper for source queues with a dead-letter exchange
// ([DeclareSourceQueue]), a reader of the x-death header ([ParseXDeath],
// [DeliveryAttempt], [MessageFromDelivery]) — and a source-side
// [Consumer] that acknowledges a delivery only after its dead-letter
// write was confirmed.
//
// # Guarantees
//
// What a [Store] (dead-letter queues) and a [Consumer] (source queue)
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
//	            nacked: ErrNacked. A Consumer acks a source delivery only after
//	            the handler succeeded or the dead-letter publish was confirmed.
//	Redelivery  A lease is an unacknowledged basic.get delivery on the handle's
//	            channel. A crash closes the channel and the broker requeues it
//	            at once; a hung replayer's lease is requeued by the store after
//	            Options.LeaseTTL (30 min, RabbitMQ's consumer_timeout). Only the
//	            fetching handle can settle it; an ended lease: ErrLeaseLost.
//	Size limit  Body at most Options.MaxMessageBytes, 128 MiB by default
//	            (DefaultMaxMessageBytes, RabbitMQ's max_message_size; lower it to
//	            match the server's). Over it: *classify.TooLargeError before
//	            publishing; a body the server refuses as too large fails with
//	            one too. Never truncated.
//	Headers     Every header of the message as a string AMQP header (on a
//	            dead-letter write, broker.Headers: idempotency-key,
//	            dlq-event-id, dlq-class, dlq-stage, dlq-destination, dlq-schema,
//	            dlq-epsg when known), plus x-geodlq-key (the key, a byte array).
//	            No budget of the store's own. Properties: a fresh message_id
//	            (Record.ID) and the publish timestamp.
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
// destination has a durable queue, named QueuePrefix + destination, bound
// with that key. [Store.Declare] declares both idempotently; Publish and
// Fetch call it on first use of a destination in a handle. Queues are
// classic unless Options.QueueArgs says otherwise (for example
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
// [ErrNacked]. Each publish has a confirm channel to itself, from a pool of
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
// a record itself once Options.LeaseTTL has passed since the Fetch.
//
// An AMQP delivery tag belongs to the channel that received it: only the
// handle that fetched a record can settle it. Ack or Release through
// another handle, after the lease ended (settled, expired, channel
// closed), or a second time fails with [broker.ErrLeaseLost] without
// touching the broker. Ack and Release are followed by a synchronous
// round trip on the channel, so when they return the broker has processed
// them. Record.Deliveries and Message.DeliveryAttempt are the quorum
// queue's x-delivery-count + 1, and 0 on classic queues, which do not
// count deliveries.
//
// Filters are evaluated by the store with [broker.Filter.Match] on the
// decoded envelope: records that do not match are held while the scan
// continues and requeued (and the requeue waited for) before Fetch
// returns, so a filtered Fetch reads through the whole ready queue.
//
// # Ordering
//
// A queue delivers in publish order; a released or expired record is
// requeued at its original position on classic queues.
//
// # Limits
//
// Options.MaxMessageBytes (default 128 MiB, RabbitMQ's max_message_size)
// is the body limit [Store.MaxMessageBytes] reports; a larger body is
// refused with a [*classify.TooLargeError] before publishing. Set it to the
// server's max_message_size if that was lowered; a body the server still
// refuses fails the publish with a TooLargeError too. Destination and
// queue names are at most 255 bytes.
//
// # The broker's dead-letter exchange
//
// [DeclareSourceQueue] declares a source queue with
// x-dead-letter-exchange, x-dead-letter-routing-key and, for quorum
// queues, x-delivery-limit, and optionally the exchange and a parking
// queue behind it. RabbitMQ then dead-letters messages that consumers
// reject without requeue, that expire, or that exceed the delivery limit,
// adding an x-death entry per (queue, reason). [ParseXDeath] reads it;
// [DeliveryAttempt] turns it into the attempt a delivery is, and
// [MessageFromDelivery] into a [broker.Message] whose DeliveryAttempt and
// Source (original queue, message id, time) feed a [broker.Processor] —
// so a [Consumer] on a parking queue turns natively dead-lettered
// messages into dlq.v1 envelopes with their history.
//
// # Publisher confirms before the source is acknowledged
//
// [Consumer] consumes a source queue with manual acknowledgements and runs
// each delivery through a [broker.Processor] whose publisher is typically
// a [*Store]. The delivery is acknowledged only when the handler succeeded
// or the dead-letter publish was confirmed; if the write failed it is
// nacked with requeue and comes back (or, with RejectOnFailure, rejected
// to the queue's own dead-letter exchange).
//
// # As
//
// The store keeps the caller's connection: [Store.Connection], and
// [Store.As] with a **amqp.Connection. [Store.Close] closes only the
// store's channels.
package rabbitmq
