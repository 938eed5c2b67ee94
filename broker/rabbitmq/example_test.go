package rabbitmq_test

import (
	"context"
	"fmt"
	"log"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/rabbitmq"
	"github.com/geodlq/geodlq/replay"
)

func ExampleMessageOf() {
	// A message a consumer rejected (requeue=false) from "parcels", which
	// RabbitMQ routed through the dead-letter exchange to a parking queue.
	d := amqp.Delivery{Body: []byte(`{"event_id":"evt-1"}`), MessageId: "m-1", Headers: amqp.Table{"x-death": []any{amqp.Table{
		"count": int64(1), "exchange": "ingest", "queue": "parcels", "reason": "rejected",
		"routing-keys": []any{"parcels.eu"}, "time": time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}}}}
	m := rabbitmq.MessageOf(d, "parcels.parked")
	fmt.Println("attempt:", m.DeliveryAttempt)
	fmt.Println("source:", m.Source.System, m.Source.Topic, m.Source.MessageID, m.Source.Timestamp.Format(time.RFC3339))
	// Output:
	// attempt: 2
	// source: rabbitmq parcels m-1 2026-03-01T12:00:00Z
}

// A dead-letter store and a replay-side fetch. Needs a broker, so it has
// no Output and is only compiled.
func ExampleNew() {
	ctx := context.Background()
	conn, err := amqp.DialConfig("amqp://guest:guest@127.0.0.1:5672/", amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	store, err := rabbitmq.New(ctx, conn, &rabbitmq.Options{Create: true,
		StoreOptions: broker.StoreOptions{LeaseTTL: 5 * time.Minute}})
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
	conn, err := amqp.DialConfig("amqp://guest:guest@127.0.0.1:5672/", amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	defer ch.Close() // after the consumer is closed
	if _, err := rabbitmq.DeclareSourceQueue(ctx, ch, "parcels", &rabbitmq.SourceQueueOptions{
		DeadLetterExchange: "parcels.dlx", ParkingQueue: "parcels.parked", Quorum: true, DeliveryLimit: 5,
	}); err != nil {
		log.Fatal(err)
	}
	store, err := rabbitmq.New(ctx, conn, &rabbitmq.Options{Create: true})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: store})
	if err != nil {
		log.Fatal(err)
	}
	c, err := rabbitmq.NewConsumer(ch, "parcels", proc, &rabbitmq.ConsumerOptions{
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 4},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	log.Print(c.Run(ctx, func(ctx context.Context, m *broker.Message) error {
		// Parse, validate and store the feature in m.Body.
		return nil
	}))
}

// Opening the store by URL, for a replayer: quorum dead-letter queues
// behind the default exchange.
func Example_openStore() {
	ctx := context.Background()
	store, err := broker.OpenStore(ctx, "amqp://guest:guest@127.0.0.1:5672/?geodlq_queue_type=quorum&lease_ttl=5m",
		&broker.OpenOptions{Create: true, ConnectTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	recs, err := store.Fetch(ctx, "parcels.poison.dlt", broker.Filter{}, 10)
	if err != nil {
		log.Fatal(err)
	}
	log.Print(len(recs), " records leased")
}

// A replayer that re-injects the dead letters of "parcels" into the
// source queue they came from, acknowledging each record only once the
// broker confirmed its re-injection. Needs a broker.
func ExampleSourcePublisher() {
	ctx := context.Background()
	store, err := broker.OpenStore(ctx, "amqp://guest:guest@127.0.0.1:5672/", &broker.OpenOptions{ConnectTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	r, err := replay.New(&replay.Options{Source: store, Target: rabbitmq.SourcePublisher(store)})
	if err != nil {
		log.Fatal(err)
	}
	rep, err := r.Run(ctx, replay.Request{Destination: "parcels.retry.dlt"})
	if err != nil {
		log.Fatal(err)
	}
	log.Print(rep.Summary())
}
