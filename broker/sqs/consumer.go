package sqs

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/geodlq/geodlq/broker"
)

// Consumer defaults.
const (
	// defaultConsumerWait is the consumer's long-polling wait: SQS's
	// maximum.
	defaultConsumerWait = 20 * time.Second
	// maxReceive is SQS's limit on MaxNumberOfMessages.
	maxReceive = 10
)

// ConsumerOptions configures [NewConsumer]. The zero value and nil are
// valid.
type ConsumerOptions struct {
	// ConsumerOptions: MaxBatch is ReceiveMessage's MaxNumberOfMessages,
	// 1 to 10; default 10. Concurrency is how many messages are processed
	// at once; default 1; the messages of one FIFO message group are always
	// processed one after another, in order. NackDelay is the visibility
	// timeout (whole seconds, rounded up) a message that was not
	// acknowledged gets, so SQS delivers it again after it; default 1s.
	broker.ConsumerOptions
	// WaitTime is ReceiveMessage's WaitTimeSeconds, up to 20s. Default
	// 20s; negative polls short (0s).
	WaitTime time.Duration
	// LeaseTTL is the visibility timeout received messages get
	// (ReceiveMessage's VisibilityTimeout), whole seconds from 1s to 12h.
	// Default 0: the queue's VisibilityTimeout attribute, which
	// NewConsumer reads once (GetQueueAttributes). See
	// [VisibilityTimeoutFor].
	LeaseTTL time.Duration
	// ExtendEvery is how often the visibility timeout of a message being
	// processed is extended (ChangeMessageVisibility to LeaseTTL from
	// then), so that a long spatial operation — or the Processor's
	// in-place retries — does not let the message reappear to another
	// consumer. Default LeaseTTL/3; negative disables. SQS caps a
	// message's invisibility at 12h from its receipt; extension stops
	// there.
	ExtendEvery time.Duration
}

// NewConsumer returns a consumer of the queue at queueURL that runs every
// message through proc: the handler with in-place retries, then the
// dead-letter write. Run it with Run(ctx, handler). Closing the consumer
// leaves client open.
//
// A message is deleted (DeleteMessage) only when the outcome says so —
// the handler succeeded, or the envelope is durably in the dead-letter
// store. When the dead-letter write fails (an SQS error: the seed's
// ClientError) or processing is interrupted, the message is given back
// (ChangeMessageVisibility to NackDelay) and SQS delivers it again; the
// queue's redrive policy (see [RedriveConfig]) moves it to the queue's own
// dead-letter queue after maxReceiveCount receives. Nothing is deleted
// before its dead letter is durable.
//
// The Processor starts counting attempts at the message's
// ApproximateReceiveCount (broker.Message.DeliveryAttempt), so a message
// SQS delivers again has fewer in-place retries left. The visibility
// timeout of a message being processed is extended every ExtendEvery. On
// a FIFO queue (URL ending in ".fifo") the messages of one message group
// are processed in order: when one is not acknowledged, the group's later
// messages of the same receive are given back too, behind it. Messages
// carry their MessageGroupId and MessageDeduplicationId into the envelope,
// and a store made by [New] keeps them on a FIFO dead-letter queue.
func NewConsumer(ctx context.Context, client API, queueURL string, proc *broker.Processor, opts *ConsumerOptions) (*broker.Consumer, error) {
	if client == nil || proc == nil || queueURL == "" {
		return nil, fmt.Errorf("sqs: NewConsumer needs a client, a queue URL and a processor: %w", broker.ErrInvalidArgument)
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	invalid := func(format string, args ...any) (*broker.Consumer, error) {
		return nil, fmt.Errorf("sqs: NewConsumer: "+format+": %w", append(args, broker.ErrInvalidArgument)...)
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = maxReceive
	}
	if o.MaxBatch < 1 || o.MaxBatch > maxReceive {
		return invalid("MaxBatch %d outside SQS's 1..10", o.MaxBatch)
	}
	switch {
	case o.WaitTime == 0:
		o.WaitTime = defaultConsumerWait
	case o.WaitTime < 0:
		o.WaitTime = 0
	case o.WaitTime > 20*time.Second:
		return invalid("WaitTime %v over 20s", o.WaitTime)
	}
	vis := o.LeaseTTL
	if vis == 0 {
		out, err := client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
			QueueUrl: aws.String(queueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout}})
		if err != nil {
			return nil, fmt.Errorf("sqs: reading VisibilityTimeout of %s: %w", queueURL, err)
		}
		secs, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
		if err != nil {
			return nil, fmt.Errorf("sqs: VisibilityTimeout of %s: %w", queueURL, err)
		}
		vis = time.Duration(secs) * time.Second
	}
	if vis < time.Second || vis > maxVisibilityTimeout || vis%time.Second != 0 {
		return invalid("LeaseTTL %v must be whole seconds from 1s to 12h", vis)
	}
	every := o.ExtendEvery
	switch {
	case every == 0:
		every = vis / 3
	case every < 0:
		every = 0
	case every >= vis:
		return invalid("ExtendEvery %v must be shorter than the visibility timeout %v", every, vis)
	}
	src := &source{client: client, url: queueURL, name: queueNameOf(queueURL), fifo: isFIFO(queueURL),
		visibility: vis, every: every, wait: o.WaitTime, closed: make(chan struct{})}
	return broker.NewConsumer(src, proc, &o.ConsumerOptions)
}

// source is the [broker.Source] of a queue.
type source struct {
	client     API
	url, name  string
	fifo       bool
	visibility time.Duration
	every      time.Duration
	wait       time.Duration

	closeOnce sync.Once
	closed    chan struct{}
}

var (
	_ broker.Source   = (*source)(nil)
	_ broker.Extender = (*source)(nil)
)

// handle is a delivery's receipt handle and lease.
type handle struct {
	receipt  string
	received time.Time

	mu       sync.Mutex
	deadline time.Time // when the visibility timeout ends, by the local clock
	lost     error     // an extension met a lost lease
}

func (s *source) Receive(ctx context.Context, max int) ([]*broker.Delivery, error) {
	select {
	case <-s.closed:
		return nil, fmt.Errorf("sqs: consumer of %s: %w", s.name, broker.ErrClosed)
	default:
	}
	// Close interrupts a long poll.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-rctx.Done():
		}
	}()
	t0 := time.Now()
	out, err := s.client.ReceiveMessage(rctx, &awssqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.url),
		MaxNumberOfMessages:         int32(min(max, maxReceive)),
		VisibilityTimeout:           int32(s.visibility / time.Second),
		WaitTimeSeconds:             int32(s.wait / time.Second),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: receiveAttrs,
		AttributeNames:              receiveAttrsLegacy,
	})
	if err != nil {
		select {
		case <-s.closed:
			return nil, fmt.Errorf("sqs: consumer of %s: %w", s.name, broker.ErrClosed)
		default:
		}
		return nil, fmt.Errorf("sqs: receive from %s: %w", s.name, err)
	}
	ds := make([]*broker.Delivery, 0, len(out.Messages))
	for _, msg := range out.Messages {
		d := &broker.Delivery{Message: MessageOf(s.name, msg),
			Handle: &handle{receipt: aws.ToString(msg.ReceiptHandle), received: t0, deadline: t0.Add(s.visibility)}}
		if s.fifo {
			d.OrderingKey = msg.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		}
		ds = append(ds, d)
	}
	return ds, nil
}

func handleOf(d *broker.Delivery) (*handle, error) {
	h, ok := d.Handle.(*handle)
	if !ok || h == nil {
		return nil, fmt.Errorf("sqs: a delivery of another source: %w", broker.ErrInvalidArgument)
	}
	return h, nil
}

// Ack deletes the message (DeleteMessage). A receipt handle SQS rejects,
// or one whose extension met a lost lease, gives an error wrapping
// broker.ErrLeaseLost.
func (s *source) Ack(ctx context.Context, d *broker.Delivery) error {
	h, err := handleOf(d)
	if err != nil {
		return err
	}
	if _, err := s.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(s.url), ReceiptHandle: aws.String(h.receipt)}); err != nil {
		h.mu.Lock()
		lost := h.lost
		h.mu.Unlock()
		if isLeaseLost(err) || lost != nil {
			return fmt.Errorf("sqs: delete from %s: %w: %w", s.name, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("sqs: delete from %s: %w", s.name, err)
	}
	return nil
}

// Nack sets the message's visibility timeout to delay (whole seconds,
// rounded up), never past the visibility timeout it has: SQS delivers it
// again after it.
func (s *source) Nack(ctx context.Context, d *broker.Delivery, delay time.Duration) error {
	h, err := handleOf(d)
	if err != nil {
		return err
	}
	h.mu.Lock()
	left := time.Until(h.deadline)
	h.mu.Unlock()
	if left <= 0 {
		return nil // visible again already
	}
	if r := delay % time.Second; r != 0 {
		delay += time.Second - r
	}
	secs := int32(min(delay, left.Truncate(time.Second)) / time.Second)
	if _, err := s.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(s.url), ReceiptHandle: aws.String(h.receipt), VisibilityTimeout: secs}); err != nil {
		if isLeaseLost(err) {
			return nil // another consumer holds it, or it is visible: given back either way
		}
		return fmt.Errorf("sqs: give back to %s: %w", s.name, err)
	}
	return nil
}

// ExtendEvery implements [broker.Extender].
func (s *source) ExtendEvery() time.Duration { return s.every }

// Extend sets the message's visibility timeout to the consumer's
// visibility timeout from now, within SQS's 12h from its receipt.
func (s *source) Extend(ctx context.Context, d *broker.Delivery) error {
	h, err := handleOf(d)
	if err != nil {
		return err
	}
	ext := s.visibility
	if left := maxVisibilityTimeout - time.Since(h.received); left < ext {
		ext = left.Truncate(time.Second)
	}
	if ext <= 0 {
		return fmt.Errorf("sqs: a message of %s reached SQS's 12h visibility limit; it will reappear", s.name)
	}
	t0 := time.Now()
	_, err = s.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(s.url), ReceiptHandle: aws.String(h.receipt), VisibilityTimeout: int32(ext / time.Second)})
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		if isLeaseLost(err) {
			h.lost = err
			return fmt.Errorf("sqs: extend on %s: %w: %w", s.name, broker.ErrLeaseLost, err)
		}
		return fmt.Errorf("sqs: extend on %s: %w", s.name, err)
	}
	h.deadline = t0.Add(ext)
	return nil
}

// Close stops Receive (a long poll in progress returns); the client stays
// open.
func (s *source) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// MessageOf converts a message received from the queue named queue into
// a broker.Message: the body (decoded when a geodlq store sent it base64),
// the headers from message attributes (see the package doc), the key (the
// FIFO MessageGroupId, else [HeaderKey]), DeliveryAttempt from
// ApproximateReceiveCount, and provenance (system "sqs", the queue, message
// id, group id, dedup id, receive count, SentTimestamp). Request the "All"
// message attributes and message system attributes when receiving.
func MessageOf(queue string, msg types.Message) *broker.Message {
	body, key, headers, err := decodeMessage(msg)
	if err != nil {
		// Attributes another producer set in a form the adapter does not
		// write: keep the body exactly as received.
		body, key = []byte(aws.ToString(msg.Body)), nil
	}
	if g := msg.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]; g != "" {
		key = []byte(g)
	}
	m := &broker.Message{Key: key, Body: body, Headers: headers}
	m.Source, m.DeliveryAttempt = sourceOf(queue, msg, key)
	return m
}
