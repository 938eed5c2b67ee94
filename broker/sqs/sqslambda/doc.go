// Package sqslambda runs geodlq's dead-letter path in AWS Lambda: [New]
// makes the handler of a function fed by an SQS event source mapping, and
// [NewIngress] the pre-flight gate of a function behind Amazon API
// Gateway. It is built on the portable pieces — a broker.Processor for the
// dead-letter path and a broker.Consumer's Handle for the acknowledgement
// discipline — so a record is reported done only once it was processed or
// its envelope is durably in the dead-letter store.
//
//	h, _ := sqslambda.New(check, &sqslambda.Options{Processor: broker.ProcessorOptions{Publisher: store}})
//	lambda.Start(h.HandleSQS)
//
// # The SQS event source
//
// Each record runs through the Processor:
//
//   - Attempts come from ApproximateReceiveCount. A deterministic failure
//     (invalid geometry, a CRS mismatch, a schema violation) is
//     dead-lettered on its first delivery, so it does not burn the queue's
//     maxReceiveCount. A retryable failure is not retried inside the
//     invocation (Lambda would bill the backoff): the record is reported
//     failed and SQS delivers it again after the visibility timeout, until
//     the receive whose count reaches Policy.MaxAttempts dead-letters it.
//   - The dead-letter write happens before the record is reported done.
//     When it fails (the seed's ClientError), the record is reported
//     failed; after maxReceiveCount the queue's own redrive policy moves it
//     to the queue's dead-letter queue, raw. Nothing is lost.
//   - FIFO: MessageGroupId and MessageDeduplicationId go into the envelope,
//     and the store of package sqs keeps them on a FIFO dead-letter queue.
//     The records of one message group are processed in order; after one
//     that is not done, the group's later records are reported failed too.
//   - Time: the handler stops Options.StopBefore (3s, or a third of the
//     time left) before the invocation's deadline and reports every record
//     not done as failed, so the function returns rather than timing out —
//     a timeout makes Lambda deliver the whole batch again, including what
//     was already dead-lettered, and an out-of-memory kill surfaces as one
//     (the seed's gotcha). A dead-letter write (or, in the delete mode, a
//     DeleteMessage) still running then gets the store's CancelGrace only
//     as far as the time left allows: writes are cut shortly before
//     HandleSQS must return, a tenth of the time left (at most 250ms)
//     before the deadline (broker.WithWriteDeadline), and their records
//     reported failed. HandleSQS returns by then whatever its handler or
//     store do — with a 1s or a 3s function timeout too — reporting every
//     record not known to be done; a record is never both dead-lettered
//     and reported, unless a store that ignores its context writes after
//     the return.
//
// # Partial batch responses or explicit deletes
//
// By default HandleSQS returns batchItemFailures: enable
// ReportBatchItemFailures on the event source mapping (FunctionResponseTypes
// ["ReportBatchItemFailures"]); Lambda deletes the other records. Without
// it, Lambda would treat a normal return as "delete the whole batch". Use
// Options.Delete — the seed's explicit delete_message variant — when the
// mapping cannot report batch item failures (an older deployment, a
// framework that owns the mapping): the handler deletes each record that
// is done itself and returns an error when any is not, so that Lambda
// leaves the batch to its visibility timeout. Prefer partial batch
// responses: they need no sqs:DeleteMessage permission in the function
// and cost no request per record.
//
// # Settings
//
// Set the source queue's maxReceiveCount to 3–5 (the seed's advice) and
// above Policy.MaxAttempts, so that the queue's own redrive is left for
// records whose dead-letter write keeps failing; its VisibilityTimeout to
// at least 6 × the function timeout (AWS's advice; sqs.VisibilityTimeoutFor
// computes it); and the event source mapping's batch size to what one
// invocation processes well within the function timeout.
//
// # API Gateway
//
// [Ingress] applies the rules of package ingress — the same as the net/http
// middleware — to API Gateway REST (payload 1.0) and HTTP API (2.0)
// requests: 400 or 413 with an RFC 9457 problem body for a refused event,
// 202 once a valid one is enqueued, 503 with Retry-After when the queue
// refused it.
package sqslambda
