package sqslambda

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/geodlq/geodlq/broker"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
)

// Options configures [New]. Processor.Publisher is required.
type Options struct {
	// Processor configures the dead-letter path: Publisher (required; the
	// store geosqs.New returns, for an SQS dead-letter queue), Builder,
	// Policy, Destination, IdempotencyKey, Logger, MeterProvider,
	// TracerProvider. Policy.MaxAttempts (default 5) is the retry budget
	// counted in receives: a retryable failure is not retried inside the
	// invocation but reported in batchItemFailures, so that SQS delivers
	// the message again after its visibility timeout, and the receive
	// whose ApproximateReceiveCount reaches MaxAttempts dead-letters it.
	// Keep MaxAttempts below the queue's maxReceiveCount, so that SQS's
	// own redrive is left for messages whose dead-letter write keeps
	// failing. Sleep is not used.
	Processor broker.ProcessorOptions
	// Consumer: Concurrency is how many records are processed at once
	// (those of one FIFO message group always one after another); default
	// 1. SettleTimeout bounds each DeleteMessage of the explicit delete
	// mode; default 30s. OnResult, Logger and TracerProvider as for any
	// consumer. MaxBatch, NackDelay and ReceiveBackoff do not apply: the
	// event source mapping receives.
	Consumer broker.ConsumerOptions
	// StopBefore is how long before the invocation's deadline the handler
	// stops: records not started by then are not started, handlers still
	// running see their context end, and every record not done is reported
	// as a failure, so the function returns before Lambda times it out —
	// a timeout would make Lambda deliver the whole batch again and hide
	// which record ran out of time (or memory). A dead-letter write in
	// progress is given the store's CancelGrace (2s by default) to report
	// its outcome, but never past the return margin before the deadline
	// (a tenth of the time left when the invocation starts, at most
	// 250ms): a write still running then is cancelled
	// (broker.WithWriteDeadline) and its record reported failed. HandleSQS
	// returns by that margin whatever the handler, the store or the blob
	// store do. Default: 3s, or a third of the time left when the
	// invocation starts if that is less.
	StopBefore time.Duration
	// Delete switches to the seed's explicit variant, for event source
	// mappings without ReportBatchItemFailures: the handler deletes each
	// record that is done itself (DeleteMessage, after the dead letter is
	// durable) and, when any record is not done, returns an error, so that
	// Lambda leaves the batch to its visibility timeout — the deleted
	// records do not come back. Default nil: partial batch responses.
	Delete *DeleteOptions
}

// DeleteOptions configures the explicit delete mode.
type DeleteOptions struct {
	// Client deletes the records. Required.
	Client geosqs.API
	// QueueURL is the source queue's URL. Required.
	QueueURL string
}

// Handler is a Lambda handler for an SQS event source mapping: pass its
// HandleSQS to lambda.Start. It is safe for concurrent use.
type Handler struct {
	h    broker.Handler
	proc *broker.Processor
	o    Options
}

// errRedeliver ends the Processor's in-place retry: the record is
// reported as a failure and SQS delivers it again.
var errRedeliver = errors.New("sqslambda: retried by SQS, not in place")

// New returns a handler that runs h on every record through the
// Processor opts.Processor configures (opts.Processor.Publisher is
// required, so nil opts fails); opts is copied.
func New(h broker.Handler, opts *Options) (*Handler, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if h == nil {
		return nil, fmt.Errorf("sqslambda: nil handler: %w", broker.ErrInvalidArgument)
	}
	if o.Delete != nil && (o.Delete.Client == nil || o.Delete.QueueURL == "") {
		return nil, fmt.Errorf("sqslambda: the delete mode needs a client and the queue URL: %w", broker.ErrInvalidArgument)
	}
	if o.StopBefore < 0 {
		return nil, fmt.Errorf("sqslambda: negative StopBefore: %w", broker.ErrInvalidArgument)
	}
	po := o.Processor
	po.Sleep = func(context.Context, time.Duration) error { return errRedeliver }
	proc, err := broker.NewProcessor(&po)
	if err != nil {
		return nil, fmt.Errorf("sqslambda: %w", err)
	}
	if _, err := broker.NewConsumer(&source{}, proc, &o.Consumer); err != nil {
		return nil, fmt.Errorf("sqslambda: %w", err)
	}
	return &Handler{h: h, proc: proc, o: o}, nil
}

// HandleSQS processes a batch as the event source mapping delivers it and
// returns the records that must come back: those whose handler failed
// with retries left, whose dead-letter write failed, or that were not
// done before the deadline. Every other record is done — processed, or
// its envelope durably in the dead-letter store — and Lambda deletes it.
// HandleSQS never fails the whole batch for one record; it returns an
// error only in the explicit delete mode (see [Options].Delete).
func (h *Handler) HandleSQS(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	b := h.budget(ctx)
	pctx, cancel := b.processing(ctx)
	defer cancel()
	src := &source{del: h.o.Delete, by: b.writeBy, done: make([]atomic.Bool, len(ev.Records))}
	co := h.o.Consumer
	co.OnResult = func(d *broker.Delivery, res broker.Result, err error) {
		if src.del == nil && err == nil && res.Ack {
			src.markDone(d) // done the moment the Processor says so
		}
		if h.o.Consumer.OnResult != nil {
			h.o.Consumer.OnResult(d, res, err)
		}
	}
	c, err := broker.NewConsumer(src, h.proc, &co)
	if err != nil {
		return events.SQSEventResponse{}, err
	}
	ds := make([]*broker.Delivery, len(ev.Records))
	for i, r := range ev.Records {
		ds[i] = delivery(r, i)
	}
	handler := func(ctx context.Context, m *broker.Message) error {
		if err := pctx.Err(); err != nil {
			return fmt.Errorf("sqslambda: not started before the invocation's deadline: %w", err)
		}
		return h.h(ctx, m)
	}
	// The batch runs on its own goroutine, so that a handler or a store
	// that ignores its context cannot hold the invocation past its
	// deadline: at returnBy every record not yet done is reported.
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		c.Handle(pctx, ds, handler)
	}()
	if !b.returnBy.IsZero() {
		t := time.NewTimer(time.Until(b.returnBy))
		select {
		case <-finished:
		case <-t.C:
			cancel() // whatever still runs sees its context end
		}
		t.Stop()
	} else {
		<-finished
	}
	var resp events.SQSEventResponse
	for i := range ev.Records {
		if !src.done[i].Load() {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
		}
	}
	if h.o.Delete != nil && len(resp.BatchItemFailures) > 0 {
		return resp, fmt.Errorf("sqslambda: %d of %d records not done; the rest are deleted: %w",
			len(resp.BatchItemFailures), len(ev.Records), broker.ErrNotAcked)
	}
	return resp, nil
}

// budget is how an invocation spends its time: records are processed
// until stop, a dead-letter write (or a delete) in progress may finish
// until writeBy, and HandleSQS returns by returnBy. All are zero when the
// context has no deadline.
type budget struct {
	stop, writeBy, returnBy time.Time
}

// returnMargin bounds how long before the invocation's deadline HandleSQS
// returns: time for the runtime to send the response.
const returnMargin = 250 * time.Millisecond

// budget divides the time ctx has left: returnBy is a tenth of it (at
// most returnMargin) before the deadline; writes are cut a little before
// returnBy, so that their outcome is in by then; processing stops
// StopBefore before the deadline (3s, or a third of the time left), never
// later than the writes' cut.
func (h *Handler) budget(ctx context.Context) budget {
	deadline, ok := ctx.Deadline()
	if !ok {
		return budget{}
	}
	left := time.Until(deadline)
	margin := min(returnMargin, left/10)
	b := budget{returnBy: deadline.Add(-margin)}
	b.writeBy = b.returnBy.Add(-min(margin/2, 100*time.Millisecond))
	stop := h.o.StopBefore
	if stop == 0 {
		stop = min(3*time.Second, left/3)
	}
	b.stop = deadline.Add(-stop)
	if b.stop.After(b.writeBy) {
		b.stop = b.writeBy
	}
	return b
}

// processing returns the context records are processed under: it ends at
// stop, and bounds the writes made under it by writeBy.
func (b budget) processing(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.returnBy.IsZero() {
		return context.WithCancel(ctx)
	}
	pctx, cancel := context.WithDeadline(ctx, b.stop)
	return broker.WithWriteDeadline(pctx, b.writeBy), cancel
}

// delivery converts record i as Lambda delivers it; the delivery's
// Handle is a [handle].
func delivery(r events.SQSMessage, i int) *broker.Delivery {
	msg := types.Message{
		MessageId:         aws.String(r.MessageId),
		ReceiptHandle:     aws.String(r.ReceiptHandle),
		Body:              aws.String(r.Body),
		MD5OfBody:         aws.String(r.Md5OfBody),
		Attributes:        r.Attributes,
		MessageAttributes: make(map[string]types.MessageAttributeValue, len(r.MessageAttributes)),
	}
	for k, a := range r.MessageAttributes {
		msg.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String(a.DataType), StringValue: a.StringValue, BinaryValue: a.BinaryValue}
	}
	queue := r.EventSourceARN[strings.LastIndexByte(r.EventSourceARN, ':')+1:]
	d := &broker.Delivery{Message: geosqs.MessageOf(queue, msg), Handle: handle{receipt: r.ReceiptHandle, index: i}}
	if g := r.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]; g != "" {
		d.OrderingKey = g
	}
	return d
}

// handle is a delivery's Handle: the record's receipt handle and its
// index in the batch.
type handle struct {
	receipt string
	index   int
}

// source settles the records of one invocation for the Consumer: in
// partial batch mode Lambda deletes what is not reported, so Ack only
// notes the record done; in the delete mode Ack deletes it first, by the
// invocation's write deadline. done[i] is set once record i is done: it
// is what HandleSQS reports, even when it returns before the batch ends.
type source struct {
	del  *DeleteOptions
	by   time.Time // zero: no deadline
	done []atomic.Bool
}

func (*source) Receive(context.Context, int) ([]*broker.Delivery, error) {
	return nil, fmt.Errorf("sqslambda: the event source mapping receives: %w", broker.ErrClosed)
}

func (s *source) Ack(ctx context.Context, d *broker.Delivery) error {
	if s.del != nil {
		h, _ := d.Handle.(handle)
		if !s.by.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, s.by)
			defer cancel()
		}
		if _, err := s.del.Client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(s.del.QueueURL), ReceiptHandle: aws.String(h.receipt)}); err != nil {
			return fmt.Errorf("sqslambda: delete: %w", err)
		}
	}
	s.markDone(d)
	return nil
}

// markDone notes d's record done.
func (s *source) markDone(d *broker.Delivery) {
	if h, ok := d.Handle.(handle); ok && h.index >= 0 && h.index < len(s.done) {
		s.done[h.index].Store(true)
	}
}

func (*source) Nack(context.Context, *broker.Delivery, time.Duration) error { return nil }

func (*source) Close() error { return nil }
