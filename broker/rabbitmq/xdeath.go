package rabbitmq

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
)

// Death reasons RabbitMQ records in x-death.
const (
	reasonRejected      = "rejected"       // basic.reject or basic.nack with requeue=false
	reasonExpired       = "expired"        // message TTL
	reasonMaxLen        = "maxlen"         // queue length limit with overflow drop-head
	reasonDeliveryLimit = "delivery_limit" // quorum queue x-delivery-limit exceeded
)

// death is one entry of the x-death header RabbitMQ adds when it
// dead-letters a message: one per (queue, reason), most recent first, with
// a count of how many times that happened.
type death struct {
	// Queue is the queue the message was dead-lettered from.
	Queue string
	// Exchange is the exchange the message had been published to.
	Exchange string
	// RoutingKeys are the message's routing keys (CC and BCC included).
	RoutingKeys []string
	// Count is how many times the message was dead-lettered from Queue for
	// Reason.
	Count int64
	// Reason is rejected, expired, maxlen or delivery_limit.
	Reason string
	// Time is when the message was first dead-lettered from Queue for
	// Reason (second precision).
	Time time.Time
	// OriginalExpiration is the per-message TTL the message had, if any.
	OriginalExpiration string
}

// maxDeaths bounds the x-death entries read: RabbitMQ writes one per
// (queue, reason) a message was dead-lettered from.
const maxDeaths = 1000

// parseXDeath reads the x-death header of h. It returns nil when there is
// none, and an error when the header is not what RabbitMQ writes.
func parseXDeath(h amqp.Table) ([]death, error) {
	raw, ok := h["x-death"]
	if !ok || raw == nil {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("rabbitmq: x-death is a %T, not an array", raw)
	}
	if len(list) > maxDeaths {
		return nil, fmt.Errorf("rabbitmq: x-death has %d entries (at most %d are read)", len(list), maxDeaths)
	}
	out := make([]death, 0, len(list))
	for i, e := range list {
		t, ok := asTable(e)
		if !ok {
			return nil, fmt.Errorf("rabbitmq: x-death[%d] is a %T, not a table", i, e)
		}
		var d death
		var err error
		if d.Queue, err = str(t, "queue", true); err != nil {
			return nil, fmt.Errorf("rabbitmq: x-death[%d]: %w", i, err)
		}
		if d.Reason, err = str(t, "reason", true); err != nil {
			return nil, fmt.Errorf("rabbitmq: x-death[%d]: %w", i, err)
		}
		if d.Exchange, err = str(t, "exchange", false); err != nil {
			return nil, fmt.Errorf("rabbitmq: x-death[%d]: %w", i, err)
		}
		if d.OriginalExpiration, err = str(t, "original-expiration", false); err != nil {
			return nil, fmt.Errorf("rabbitmq: x-death[%d]: %w", i, err)
		}
		n, ok := asInt(t["count"])
		if !ok || n < 0 {
			return nil, fmt.Errorf("rabbitmq: x-death[%d]: count is %v (%T)", i, t["count"], t["count"])
		}
		d.Count = n
		switch v := t["time"].(type) {
		case time.Time:
			d.Time = v.UTC()
		case nil:
		default:
			return nil, fmt.Errorf("rabbitmq: x-death[%d]: time is a %T", i, v)
		}
		if rk, ok := t["routing-keys"]; ok && rk != nil {
			keys, ok := rk.([]any)
			if !ok {
				return nil, fmt.Errorf("rabbitmq: x-death[%d]: routing-keys is a %T", i, rk)
			}
			for _, k := range keys {
				s, ok := k.(string)
				if !ok {
					return nil, fmt.Errorf("rabbitmq: x-death[%d]: routing key is a %T", i, k)
				}
				d.RoutingKeys = append(d.RoutingKeys, s)
			}
		}
		out = append(out, d)
	}
	return out, nil
}

func asTable(v any) (amqp.Table, bool) {
	switch t := v.(type) {
	case amqp.Table:
		return t, true
	case map[string]any:
		return amqp.Table(t), true
	}
	return nil, false
}

func str(t amqp.Table, k string, required bool) (string, error) {
	v, ok := t[k]
	if !ok || v == nil {
		if required {
			return "", fmt.Errorf("%s missing", k)
		}
		return "", nil
	}
	switch s := v.(type) {
	case string:
		return s, nil
	case []byte:
		return string(s), nil
	}
	return "", fmt.Errorf("%s is a %T", k, v)
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		if n > 1<<62 {
			return 0, false
		}
		return int64(n), true
	}
	return 0, false
}

// deliveryCount reads the x-delivery-count header quorum queues set on a
// delivery: how many times it was delivered from this queue before.
func deliveryCount(h amqp.Table) (int, bool) {
	n, ok := asInt(h["x-delivery-count"])
	if !ok || n < 0 {
		return 0, false
	}
	return int(n), true
}

// maxAttempt caps the attempt read from a delivery's headers, which
// arbitrary counts cannot overflow.
const maxAttempt = 1 << 30

// deliveryAttempt returns the attempt a delivery is, first = 1, from what
// the broker recorded: one more than the failed consumptions in x-death
// (the counts of rejected and delivery_limit deaths; a delivery_limit death
// counts once, as x-death does not say how many deliveries preceded it)
// plus the deliveries from the current queue before this one (a quorum
// queue's x-delivery-count; for a classic queue, 1 when the delivery is
// flagged redelivered, a lower bound). Expired and maxlen deaths are not
// attempts. A malformed x-death is ignored.
func deliveryAttempt(d amqp.Delivery) int {
	n := int64(1)
	deaths, _ := parseXDeath(d.Headers)
	for _, dd := range deaths {
		if dd.Reason == reasonRejected || dd.Reason == reasonDeliveryLimit {
			n += min(dd.Count, maxAttempt)
		}
	}
	if c, ok := deliveryCount(d.Headers); ok {
		n += int64(min(c, maxAttempt))
	} else if d.Redelivered {
		n++
	}
	return int(min(n, maxAttempt))
}

// MessageOf converts a delivery consumed from queue into the message a
// [broker.Processor] takes. The consumer [NewConsumer] returns converts
// every delivery with it; use it to read deliveries of your own:
//   - Body as received; Headers = the string-valued AMQP headers
//     (RabbitMQ's x-first-death-queue, -exchange and -reason included);
//     Key from [HeaderKey];
//   - DeliveryAttempt = one more than the failed consumptions x-death
//     records (its rejected and delivery_limit counts; a delivery_limit
//     death counts once, as x-death does not say how many deliveries
//     preceded it) plus the deliveries from queue before this one (a
//     quorum queue's x-delivery-count; for a classic queue, 1 when the
//     delivery is flagged redelivered, a lower bound). Expired and maxlen
//     deaths are not attempts; a malformed x-death is ignored;
//   - Source = {system "rabbitmq", topic = the original queue (the oldest
//     x-death entry's queue, else queue), message id, key, delivery count =
//     DeliveryAttempt, timestamp = the message's timestamp, else the
//     oldest death's time}.
//
// The rest of the x-death provenance (routing keys, counts) has no field
// in the dlq.v1 source.
func MessageOf(d amqp.Delivery, queue string) *broker.Message {
	m := &broker.Message{Body: d.Body}
	for k, v := range d.Headers {
		switch x := v.(type) {
		case string:
			if m.Headers == nil {
				m.Headers = make(map[string]string, len(d.Headers))
			}
			m.Headers[k] = x
		case []byte:
			if k == HeaderKey {
				m.Key = append([]byte{}, x...)
			}
		}
	}
	m.DeliveryAttempt = deliveryAttempt(d)
	src := &envelope.Source{System: "rabbitmq", Topic: queue, MessageID: d.MessageId, Key: m.Key, DeliveryCount: m.DeliveryAttempt}
	deaths, _ := parseXDeath(d.Headers)
	if len(deaths) > 0 {
		oldest := deaths[len(deaths)-1]
		src.Topic = oldest.Queue
		if !oldest.Time.IsZero() {
			t := oldest.Time
			src.Timestamp = &t
		}
	}
	if !d.Timestamp.IsZero() {
		t := d.Timestamp.UTC()
		src.Timestamp = &t
	}
	m.Source = src
	return m
}

// SourceQueueOptions configures [DeclareSourceQueue].
type SourceQueueOptions struct {
	// DeadLetterExchange is the queue's x-dead-letter-exchange: where
	// RabbitMQ sends messages rejected with requeue=false, expired, dropped
	// by a length limit, or over the delivery limit. Required.
	DeadLetterExchange string
	// DeadLetterRoutingKey is the x-dead-letter-routing-key. Default "":
	// the message keeps its own routing keys.
	DeadLetterRoutingKey string
	// ParkingQueue, when set, is declared too: a durable queue bound to
	// DeadLetterExchange (declared as a durable direct exchange) with
	// DeadLetterRoutingKey — or, when that is empty, the source queue's
	// name, the routing key of messages published through the default
	// exchange — where dead-lettered messages wait with their x-death
	// header. Default "": declare neither.
	ParkingQueue string
	// Quorum makes the queue a quorum queue (x-queue-type quorum). Default
	// false: a classic queue.
	Quorum bool
	// DeliveryLimit is the quorum queue's x-delivery-limit: after that
	// many redeliveries RabbitMQ dead-letters the message with reason
	// delivery_limit. Requires Quorum. Default 0: no limit.
	DeliveryLimit int
	// Args are further x-arguments. Default none.
	Args amqp.Table
}

// DeclareSourceQueue declares, idempotently, a durable source queue wired
// to a dead-letter exchange, and optionally the exchange and a parking
// queue behind it. The arguments must match those of an existing queue.
func DeclareSourceQueue(ctx context.Context, ch *amqp.Channel, name string, opts *SourceQueueOptions) (amqp.Queue, error) {
	if err := ctx.Err(); err != nil {
		return amqp.Queue{}, err
	}
	if ch == nil || opts == nil || opts.DeadLetterExchange == "" {
		return amqp.Queue{}, fmt.Errorf("rabbitmq: DeclareSourceQueue needs a channel and a DeadLetterExchange: %w", broker.ErrInvalidArgument)
	}
	if opts.DeliveryLimit > 0 && !opts.Quorum {
		return amqp.Queue{}, fmt.Errorf("rabbitmq: x-delivery-limit needs a quorum queue: %w", broker.ErrInvalidArgument)
	}
	args := amqp.Table{"x-dead-letter-exchange": opts.DeadLetterExchange}
	for k, v := range opts.Args {
		args[k] = v
	}
	if opts.DeadLetterRoutingKey != "" {
		args["x-dead-letter-routing-key"] = opts.DeadLetterRoutingKey
	}
	if opts.Quorum {
		args["x-queue-type"] = "quorum"
	}
	if opts.DeliveryLimit > 0 {
		args["x-delivery-limit"] = int64(opts.DeliveryLimit)
	}
	if opts.ParkingQueue != "" {
		if err := ch.ExchangeDeclare(opts.DeadLetterExchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
			return amqp.Queue{}, fmt.Errorf("rabbitmq: declaring dead-letter exchange %q: %w", opts.DeadLetterExchange, err)
		}
		if _, err := ch.QueueDeclare(opts.ParkingQueue, true, false, false, false, nil); err != nil {
			return amqp.Queue{}, fmt.Errorf("rabbitmq: declaring parking queue %q: %w", opts.ParkingQueue, err)
		}
		key := opts.DeadLetterRoutingKey
		if key == "" {
			key = name
		}
		if err := ch.QueueBind(opts.ParkingQueue, key, opts.DeadLetterExchange, false, nil); err != nil {
			return amqp.Queue{}, fmt.Errorf("rabbitmq: binding parking queue %q: %w", opts.ParkingQueue, err)
		}
	}
	q, err := ch.QueueDeclare(name, true, false, false, false, args)
	if err != nil {
		return amqp.Queue{}, fmt.Errorf("rabbitmq: declaring source queue %q: %w", name, err)
	}
	return q, nil
}
