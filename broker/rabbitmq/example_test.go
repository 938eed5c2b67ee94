package rabbitmq_test

import (
	"context"
	"fmt"
	"log"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/rabbitmq"
)

func ExampleParseXDeath() {
	// Headers of a message a consumer rejected (requeue=false) from
	// "parcels" and RabbitMQ routed through the dead-letter exchange.
	h := amqp.Table{"x-death": []any{amqp.Table{
		"count": int64(1), "exchange": "ingest", "queue": "parcels", "reason": "rejected",
		"routing-keys": []any{"parcels.eu"}, "time": time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}}}
	deaths, err := rabbitmq.ParseXDeath(h)
	if err != nil {
		log.Fatal(err)
	}
	d := deaths[0]
	fmt.Println(d.Queue, d.Exchange, d.RoutingKeys, d.Reason, d.Count, d.Time.Format(time.RFC3339))
	fmt.Println("attempt:", rabbitmq.DeliveryAttempt(amqp.Delivery{Headers: h}))
	// Output:
	// parcels ingest [parcels.eu] rejected 1 2026-03-01T12:00:00Z
	// attempt: 2
}

// A dead-letter store and a replay-side fetch. Needs a broker, so it has
// no Output and is only compiled.
func ExampleNew() {
	ctx := context.Background()
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	store, err := rabbitmq.New(ctx, conn, &rabbitmq.Options{LeaseTTL: 5 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	recs, err := store.Fetch(ctx, "parcels.poison.dlt", broker.Filter{}, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		// ... replay r, then:
		if err := store.Ack(ctx, r); err != nil {
			log.Print(err)
		}
	}
}

// A source queue wired to a dead-letter exchange and a parking queue, and
// a consumer that acknowledges only after the envelope's publish was
// confirmed. Needs a broker.
func ExampleNewConsumer() {
	ctx := context.Background()
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := rabbitmq.DeclareSourceQueue(ctx, ch, "parcels", &rabbitmq.SourceQueueOptions{
		DeadLetterExchange: "parcels.dlx", ParkingQueue: "parcels.parked", Quorum: true, DeliveryLimit: 5,
	}); err != nil {
		log.Fatal(err)
	}
	store, err := rabbitmq.New(ctx, conn, nil)
	if err != nil {
		log.Fatal(err)
	}
	handle := func(ctx context.Context, m *broker.Message) error {
		// Parse, validate and store the feature in m.Body.
		return nil
	}
	c, err := rabbitmq.NewConsumer(ch, "parcels", handle, &rabbitmq.ConsumerOptions{
		Processor: broker.ProcessorOptions{Publisher: store},
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Print(c.Run(ctx))
}
