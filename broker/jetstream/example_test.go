package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/jetstream"
	"github.com/geodlq/geodlq/replay"
)

// A dead-letter store and a replay-side fetch. Needs a server with
// JetStream, so it has no Output and is only compiled.
func ExampleNew() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL, nats.Timeout(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	store, err := jetstream.New(ctx, js, &jetstream.Options{Create: true,
		StoreOptions: broker.StoreOptions{LeaseTTL: time.Minute}})
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

// The source side: a pipeline's pull consumer with max_deliver 5, whose
// failures go to the JetStream dead-letter store; the messages the server
// gives up on are dead-lettered too. Needs a server.
func ExampleNewConsumer() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL, nats.Timeout(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	store, err := jetstream.New(ctx, js, &jetstream.Options{Create: true})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	cons, err := js.CreateOrUpdateConsumer(ctx, "PARCELS", natsjs.ConsumerConfig{
		Durable: "ingest", AckPolicy: natsjs.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 5,
	})
	if err != nil {
		log.Fatal(err)
	}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: store})
	if err != nil {
		log.Fatal(err)
	}
	c, err := jetstream.NewConsumer(ctx, js, cons, proc, &jetstream.ConsumerOptions{
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

// Opening the store by URL, read-only, as an operator's tool does.
func Example_openStore() {
	ctx := context.Background()
	store, err := broker.OpenStore(ctx, "nats://127.0.0.1:4222?geodlq_stream=GEODLQ", &broker.OpenOptions{ReadOnly: true, ConnectTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	page, err := store.List(ctx, broker.ListOptions{Destination: "parcels.poison.dlt", Descending: true, Limit: 20})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range page.Entries {
		log.Print(e.Record.ID, " ", e.PublishedAt)
	}
}

// The opener refuses a URL it does not understand before it connects: a
// misspelt parameter is an error, not a default.
func Example_urlParameters() {
	_, err := broker.OpenStore(context.Background(), "nats://127.0.0.1:4222?geodlq_stram=GEODLQ", nil)
	fmt.Println(errors.Is(err, broker.ErrInvalidArgument))
	// Output: true
}

// A replayer that re-injects the dead letters of "spatial.events" into the
// subject they came from, acknowledging each record only once the source
// stream acknowledged its re-injection. Needs a server with JetStream.
func ExampleSourcePublisher() {
	ctx := context.Background()
	store, err := broker.OpenStore(ctx, "nats://127.0.0.1:4222", &broker.OpenOptions{ConnectTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	r, err := replay.New(&replay.Options{Source: store, Target: jetstream.SourcePublisher(store)})
	if err != nil {
		log.Fatal(err)
	}
	rep, err := r.Run(ctx, replay.Request{Destination: "spatial.events.retry.dlt"})
	if err != nil {
		log.Fatal(err)
	}
	log.Print(rep.Summary())
}
