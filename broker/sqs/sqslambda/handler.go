package sqslambda

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// its outcome. Default: 3s, or a third of the time left when the
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
// Processor opts.Processor configures.
func New(h broker.Handler, opts Options) (*Handler, error) {
	if h == nil {
		return nil, fmt.Errorf("sqslambda: nil handler: %w", broker.ErrInvalidArgument)
	}
	if opts.Delete != nil && (opts.Delete.Client == nil || opts.Delete.QueueURL == "") {
		return nil, fmt.Errorf("sqslambda: the delete mode needs a client and the queue URL: %w", broker.ErrInvalidArgument)
	}
	if opts.StopBefore < 0 {
		return nil, fmt.Errorf("sqslambda: negative StopBefore: %w", broker.ErrInvalidArgument)
	}
	po := opts.Processor
	po.Sleep = func(context.Context, time.Duration) error { return errRedeliver }
	proc, err := broker.NewProcessor(po)
	if err != nil {
		return nil, fmt.Errorf("sqslambda: %w", err)
	}
	if _, err := broker.NewConsumer(source{}, proc, &opts.Consumer); err != nil {
		return nil, fmt.Errorf("sqslambda: %w", err)
	}
	return &Handler{h: h, proc: proc, o: opts}, nil
}

// HandleSQS processes a batch as the event source mapping delivers it and
// returns the records that must come back: those whose handler failed
// with retries left, whose dead-letter write failed, or that were not
// done before the deadline. Every other record is done — processed, or
// its envelope durably in the dead-letter store — and Lambda deletes it.
// HandleSQS never fails the whole batch for one record; it returns an
// error only in the explicit delete mode (see [Options].Delete).
func (h *Handler) HandleSQS(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	pctx, cancel := h.processing(ctx)
	defer cancel()
	src := source{del: h.o.Delete}
	c, err := broker.NewConsumer(src, h.proc, &h.o.Consumer)
	if err != nil {
		return events.SQSEventResponse{}, err
	}
	ds := make([]*broker.Delivery, len(ev.Records))
	for i, r := range ev.Records {
		ds[i] = delivery(r)
	}
	handler := func(ctx context.Context, m *broker.Message) error {
		if err := pctx.Err(); err != nil {
			return fmt.Errorf("sqslambda: not started before the invocation's deadline: %w", err)
		}
		return h.h(ctx, m)
	}
	var resp events.SQSEventResponse
	for i, res := range c.Handle(pctx, ds, handler) {
		if !res.Acked {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
		}
	}
	if h.o.Delete != nil && len(resp.BatchItemFailures) > 0 {
		return resp, fmt.Errorf("sqslambda: %d of %d records not done; the rest are deleted: %w",
			len(resp.BatchItemFailures), len(ev.Records), broker.ErrNotAcked)
	}
	return resp, nil
}

// processing returns the context records are processed under: it ends
// StopBefore before the invocation's deadline.
func (h *Handler) processing(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	stop := h.o.StopBefore
	if stop == 0 {
		stop = min(3*time.Second, time.Until(deadline)/3)
	}
	return context.WithDeadline(ctx, deadline.Add(-stop))
}

// delivery converts a record as Lambda delivers it.
func delivery(r events.SQSMessage) *broker.Delivery {
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
	d := &broker.Delivery{Message: geosqs.MessageOf(queue, msg), Handle: r.ReceiptHandle}
	if g := r.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]; g != "" {
		d.OrderingKey = g
	}
	return d
}

// source settles records for the Consumer: in partial batch mode Lambda
// deletes what is not reported, so Ack and Nack do nothing; in the delete
// mode Ack deletes.
type source struct{ del *DeleteOptions }

func (source) Receive(context.Context, int) ([]*broker.Delivery, error) {
	return nil, fmt.Errorf("sqslambda: the event source mapping receives: %w", broker.ErrClosed)
}

func (s source) Ack(ctx context.Context, d *broker.Delivery) error {
	if s.del == nil {
		return nil
	}
	rh, _ := d.Handle.(string)
	if _, err := s.del.Client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(s.del.QueueURL), ReceiptHandle: aws.String(rh)}); err != nil {
		return fmt.Errorf("sqslambda: delete: %w", err)
	}
	return nil
}

func (source) Nack(context.Context, *broker.Delivery, time.Duration) error { return nil }

func (source) Close() error { return nil }
