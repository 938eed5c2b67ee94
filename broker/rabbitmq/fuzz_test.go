package rabbitmq_test

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/rabbitmq"
)

// FuzzParseURL: the opener's URL parser never panics and refuses with
// broker.ErrInvalidArgument.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"amqp://host", "amqps://u:p@[::1]:5671/vh?heartbeat=5&geodlq_exchange=X", "amqp:///x",
		"amqp://h/?max_message_bytes=-1", "amqp://h/?%zz", "amqp://gu est@h", "amqp://h:99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := broker.ParseStoreURL(raw)
		if err != nil {
			return
		}
		_, _, err = rabbitmq.ParseURL(u, broker.OpenOptions{})
		if err != nil && !errors.Is(err, broker.ErrInvalidArgument) {
			t.Fatalf("ParseURL(%q): untyped error %v", raw, err)
		}
	})
}

// FuzzXDeath: whatever a producer puts in x-death and x-delivery-count,
// MessageOf neither panics nor reports an attempt below 1 or above the
// cap, and the parser refuses what RabbitMQ does not write.
func FuzzXDeath(f *testing.F) {
	f.Add("rejected", int64(1), "q", int64(0), true, 1)
	f.Add("delivery_limit", int64(1)<<62, "", int64(-5), false, 3)
	f.Add("expired", int64(-1), "a.b", int64(1)<<62, true, 0)
	f.Fuzz(func(t *testing.T, reason string, count int64, queue string, deliveries int64, redelivered bool, entries int) {
		entries = min(max(entries, 0), 2000)
		list := make([]any, entries)
		for i := range list {
			e := amqp.Table{"reason": reason, "count": count, "time": time.Unix(count%1e10, 0)}
			if queue != "" {
				e["queue"] = queue
			}
			list[i] = e
		}
		d := amqp.Delivery{Redelivered: redelivered, Headers: amqp.Table{"x-death": list, "x-delivery-count": deliveries}}
		m := rabbitmq.MessageOf(d, "src")
		if m.DeliveryAttempt < 1 || m.DeliveryAttempt > 1<<30 {
			t.Fatalf("attempt %d", m.DeliveryAttempt)
		}
		if _, err := rabbitmq.ParseXDeath(d.Headers); err == nil && (entries > 1000 || (entries > 0 && (queue == "" || count < 0))) {
			t.Fatalf("x-death with %d entries, queue %q, count %d accepted", entries, queue, count)
		}
	})
}
