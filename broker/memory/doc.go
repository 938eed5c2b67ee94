// Package memory is an in-process broker: a [broker.Publisher],
// [broker.DeadLetterSource] and [broker.Limiter] over maps guarded by a
// mutex. It is what tests and examples run on, and it passes
// broker/brokertest like every other adapter. Nothing survives the process.
//
// Any destination can be used both ways, so the same Broker serves as the
// source topic a consumer reads, the dead-letter store, and the target of
// replay's re-injection.
//
// # Guarantees
//
//	Property    Guarantee
//	----------  ------------------------------------------------------------------
//	Ordering    Publish order per destination; Fetch returns the oldest
//	            available records first.
//	Durability  In-process only: Publish returns once a copy of the message is
//	            in the Broker's memory. Nothing survives the process.
//	Redelivery  Fetch leases a record for Options.LeaseTTL (30 s, by
//	            Options.Now's clock); past it the record is fetchable again. Ack
//	            and Release check the lease token: they work after the lease
//	            ran out until another Fetch takes the record, then fail with
//	            ErrLeaseLost. A crash takes the process, and every record, with
//	            it.
//	Size limit  None by default; Options.MaxMessageBytes caps the body, and a
//	            larger one is refused with *classify.TooLargeError. Never
//	            truncated.
//	Headers     A copy of every header of the message, exact (on a dead-letter
//	            write, broker.Headers: idempotency-key, dlq-event-id, dlq-class,
//	            dlq-stage, dlq-destination, dlq-schema, dlq-epsg when known), and
//	            of the key. No budget.
//	Body        A copy of the body (the dlq.v1 envelope), exact.
//	Attempts    The number of Fetches that leased the record, this one
//	            included: Record.Deliveries and Message.DeliveryAttempt.
//	Duplicates  Not deduplicated: every Publish adds a record. The envelope's
//	            idempotency key makes a copy harmless.
package memory
