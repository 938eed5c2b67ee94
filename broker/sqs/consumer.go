package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// DefaultConsumerWaitTime is the consumer's long-polling wait: 20 s,
	// SQS's maximum.
	DefaultConsumerWaitTime = 20 * time.Second
	// DefaultMaxMessages is how many messages one ReceiveMessage asks for:
	// 10, SQS's maximum.
	DefaultMaxMessages = 10
)

// ConsumerOptions configures a [Consumer]. The zero value (and nil) uses
// the defaults.
type ConsumerOptions struct {
	// MaxMessages is ReceiveMessage's MaxNumberOfMessages, 1 to 10.
	// Default [DefaultMaxMessages].
	MaxMessages int
	// WaitTime is ReceiveMessage's WaitTimeSeconds, up to 20 s. Default
	// [DefaultConsumerWaitTime]; a negative value polls short (0 s).
	WaitTime time.Duration
	// VisibilityTimeout is the visibility timeout received messages get
	// (ReceiveMessage's VisibilityTimeout), whole seconds up to 12 h.
	// Default 0: the queue's VisibilityTimeout attribute, which
	// NewConsumer reads once (GetQueueAttributes). See [VisibilityTimeoutFor].
	VisibilityTimeout time.Duration
	// Heartbeat is how often the visibility timeout of a message being
	// processed is extended (ChangeMessageVisibility to VisibilityTimeout
	// from now), so that a long spatial operation — or the processor's
	// in-place retries — does not let the message reappear to another
	// consumer. Default VisibilityTimeout/3; negative disables it. SQS caps
	// a message's total invisibility at 12 h from its receipt; the
	// heartbeat stops there.
	Heartbeat time.Duration
	// Concurrency is how many messages are processed at once. Default 1.
	// Messages of one FIFO message group are always processed one after
	// another, in order.
	Concurrency int
	// Logger receives one record per message not deleted and per failed
	// heartbeat. Nil discards.
	Logger *slog.Logger
}

// Consumer reads a source queue and runs each message through a
// [broker.Processor]: the handler with in-place retries, then the
// dead-letter write. It deletes a message (DeleteMessage) only when the
// outcome says so — the handler succeeded, or the envelope is durably in
// the dead-letter store. When the dead-letter write fails (an SQS error:
// the seed's ClientError) or processing is interrupted, the message is not
// deleted, and its visibility timeout brings it back; SQS's redrive policy
// (see [RedriveConfig]) moves it to the queue's own dead-letter queue
// after maxReceiveCount receives.
//
// The processor starts counting attempts at the message's
// ApproximateReceiveCount (broker.Message.DeliveryAttempt), so a message
// redelivered by SQS has fewer in-place retries left.
//
// A Consumer is safe for concurrent use.
type Consumer struct {
	client            API
	queueURL, name    string
	proc              *broker.Processor
	opts              ConsumerOptions
	visibility, heart time.Duration
	log               *slog.Logger
}

// NewConsumer returns a consumer of the queue at queueURL that processes
// with proc. nil opts means the defaults.
func NewConsumer(ctx context.Context, client API, queueURL string, proc *broker.Processor, opts *ConsumerOptions) (*Consumer, error) {
	if client == nil || proc == nil || queueURL == "" {
		return nil, errors.New("sqs: NewConsumer needs a client, a queue URL and a processor")
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxMessages == 0 {
		o.MaxMessages = DefaultMaxMessages
	}
	if o.MaxMessages < 1 || o.MaxMessages > 10 {
		return nil, fmt.Errorf("sqs: MaxMessages %d outside 1..10", o.MaxMessages)
	}
	switch {
	case o.WaitTime == 0:
		o.WaitTime = DefaultConsumerWaitTime
	case o.WaitTime < 0:
		o.WaitTime = 0
	case o.WaitTime > 20*time.Second:
		return nil, fmt.Errorf("sqs: WaitTime %v over 20s", o.WaitTime)
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.Concurrency < 0 {
		return nil, fmt.Errorf("sqs: Concurrency %d is negative", o.Concurrency)
	}
	c := &Consumer{client: client, queueURL: queueURL, name: queueNameOf(queueURL), proc: proc, opts: o, log: o.Logger}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.visibility = o.VisibilityTimeout
	if c.visibility == 0 {
		out, err := client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
			QueueUrl: aws.String(queueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout}})
		if err != nil {
			return nil, fmt.Errorf("sqs: reading VisibilityTimeout of %s: %w", queueURL, err)
		}
		secs, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
		if err != nil {
			return nil, fmt.Errorf("sqs: VisibilityTimeout of %s: %w", queueURL, err)
		}
		c.visibility = time.Duration(secs) * time.Second
	}
	if c.visibility < time.Second || c.visibility > MaxVisibilityTimeout || c.visibility%time.Second != 0 {
		return nil, fmt.Errorf("sqs: VisibilityTimeout %v must be whole seconds from 1s to 12h", c.visibility)
	}
	switch {
	case o.Heartbeat == 0:
		c.heart = c.visibility / 3
	case o.Heartbeat > 0:
		if o.Heartbeat >= c.visibility {
			return nil, fmt.Errorf("sqs: Heartbeat %v must be shorter than the visibility timeout %v", o.Heartbeat, c.visibility)
		}
		c.heart = o.Heartbeat
	}
	return c, nil
}

// VisibilityTimeout returns the visibility timeout the consumer's messages
// get.
func (c *Consumer) VisibilityTimeout() time.Duration { return c.visibility }

// Run receives and processes messages until ctx ends, then returns
// ctx.Err(). Receive errors are logged and retried with a backoff (1 s
// doubling to 30 s); message failures are logged and leave the message to
// its visibility timeout.
func (c *Consumer) Run(ctx context.Context, h broker.Handler) error {
	backoff := time.Second
	for ctx.Err() == nil {
		_, err := c.Poll(ctx, h)
		var recv *ReceiveError
		if errors.As(err, &recv) && ctx.Err() == nil {
			c.log.ErrorContext(ctx, "geodlq: sqs: receive failed", slog.String("queue", c.queueURL), slog.Any("error", err))
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
	}
	return ctx.Err()
}

// ReceiveError is returned by [Consumer.Poll] when ReceiveMessage failed.
type ReceiveError struct{ Err error }

func (e *ReceiveError) Error() string { return "sqs: receive: " + e.Err.Error() }

// Unwrap returns the SQS error.
func (e *ReceiveError) Unwrap() error { return e.Err }

// Poll makes one ReceiveMessage call and processes what it returns, and
// reports how many messages it received. The error is a *[ReceiveError],
// or the errors of the messages that were not deleted, joined (each wraps
// broker.ErrNotAcked, or is the DeleteMessage failure).
func (c *Consumer) Poll(ctx context.Context, h broker.Handler) (int, error) {
	out, err := c.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(c.queueURL),
		MaxNumberOfMessages:         int32(c.opts.MaxMessages),
		VisibilityTimeout:           int32(c.visibility / time.Second),
		WaitTimeSeconds:             int32(c.opts.WaitTime / time.Second),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: receiveAttrs,
		AttributeNames:              receiveAttrsLegacy,
	})
	if err != nil {
		return 0, &ReceiveError{Err: err}
	}
	received := time.Now()
	// Messages of one FIFO group run in order on one goroutine; after a
	// failure the group's later messages are left for redelivery, behind it.
	var groups [][]types.Message
	byGroup := map[string]int{}
	for _, m := range out.Messages {
		g := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		if i, ok := byGroup[g]; ok && g != "" {
			groups[i] = append(groups[i], m)
			continue
		}
		byGroup[g] = len(groups)
		groups = append(groups, []types.Message{m})
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, c.opts.Concurrency)
	)
	for _, group := range groups {
		wg.Go(func() {
			for i, m := range group {
				sem <- struct{}{}
				_, err := c.handle(ctx, m, h, received)
				<-sem
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					if rest := len(group) - i - 1; rest > 0 {
						c.log.WarnContext(ctx, "geodlq: sqs: FIFO group stopped after a message was not deleted; later messages are redelivered after it",
							slog.String("group", m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]), slog.Int("left", rest))
					}
					return
				}
			}
		})
	}
	wg.Wait()
	return len(out.Messages), errors.Join(errs...)
}

// Handle processes one message received from the consumer's queue: it
// extends the message's visibility while the processor runs, and deletes
// it when the outcome says to acknowledge. The error is nil exactly when
// the message was deleted.
func (c *Consumer) Handle(ctx context.Context, msg types.Message, h broker.Handler) (broker.Result, error) {
	return c.handle(ctx, msg, h, time.Now())
}

func (c *Consumer) handle(ctx context.Context, msg types.Message, h broker.Handler, received time.Time) (broker.Result, error) {
	m := ToMessage(c.name, msg)
	handle := aws.ToString(msg.ReceiptHandle)
	stop := c.heartbeat(ctx, handle, received)
	out, err := c.proc.Process(ctx, m, h)
	lost := stop()
	if err != nil {
		c.log.WarnContext(ctx, "geodlq: sqs: message not deleted; its visibility timeout brings it back",
			slog.String("queue", c.name), slog.String("message_id", aws.ToString(msg.MessageId)), slog.Any("error", err))
		return out, err
	}
	if _, err := c.client.DeleteMessage(context.WithoutCancel(ctx), &awssqs.DeleteMessageInput{
		QueueUrl: aws.String(c.queueURL), ReceiptHandle: aws.String(handle)}); err != nil {
		if isLeaseLost(err) || lost != nil {
			err = fmt.Errorf("%w: %w", broker.ErrLeaseLost, err)
		}
		c.log.ErrorContext(ctx, "geodlq: sqs: DeleteMessage failed; the message will be redelivered",
			slog.String("queue", c.name), slog.String("message_id", aws.ToString(msg.MessageId)),
			slog.Bool("dead_lettered", out.DeadLettered), slog.Any("error", err))
		return out, fmt.Errorf("sqs: delete %s after processing: %w", aws.ToString(msg.MessageId), err)
	}
	return out, nil
}

// heartbeat extends the message's visibility every c.heart until stop is
// called; stop returns the lease-lost error a heartbeat met, if any.
func (c *Consumer) heartbeat(ctx context.Context, handle string, received time.Time) (stop func() error) {
	if c.heart <= 0 {
		return func() error { return nil }
	}
	done := make(chan struct{})
	var lost error
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(c.heart)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ext := c.visibility
			if left := MaxVisibilityTimeout - time.Since(received); left < ext {
				ext = left.Truncate(time.Second)
			}
			if ext <= 0 {
				c.log.WarnContext(ctx, "geodlq: sqs: message reached SQS's 12 h visibility limit; it will reappear",
					slog.String("queue", c.name))
				return
			}
			_, err := c.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(c.queueURL), ReceiptHandle: aws.String(handle), VisibilityTimeout: int32(ext / time.Second)})
			if err != nil && ctx.Err() == nil {
				c.log.WarnContext(ctx, "geodlq: sqs: visibility heartbeat failed", slog.String("queue", c.name), slog.Any("error", err))
				if isLeaseLost(err) {
					lost = err
					return
				}
			}
		}
	})
	return func() error {
		close(done)
		wg.Wait()
		return lost
	}
}

// ToMessage converts a message received from the queue named queue into a
// broker.Message: the body (decoded when the adapter sent it base64), the
// headers from message attributes (see [Store.Publish]), the key (the FIFO
// MessageGroupId, else [AttrKey]), DeliveryAttempt from
// ApproximateReceiveCount, and provenance (system "sqs", the queue, message
// id, group id, dedup id, receive count, SentTimestamp). Request the
// "All" message attributes and message system attributes when receiving.
func ToMessage(queue string, msg types.Message) *broker.Message {
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
