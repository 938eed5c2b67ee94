package jetstream_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/jetstream"
)

func ExampleSubjectToken() {
	fmt.Println(jetstream.SubjectToken("parcels.poison.dlt"))
	d, _ := jetstream.DestinationOfToken("parcels_2Epoison_2Edlt")
	fmt.Println(d)
	// Output:
	// parcels_2Epoison_2Edlt
	// parcels.poison.dlt
}

// A dead-letter store and a replay-side fetch. Needs a server with
// JetStream, so it has no Output and is only compiled.
func ExampleNew() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	store, err := jetstream.New(ctx, js, &jetstream.Options{AckWait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
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
// failures go to the JetStream dead-letter store. Needs a server.
func ExampleNewConsumer() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	store, err := jetstream.New(ctx, js, nil)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "PARCELS", natsjs.ConsumerConfig{
		Durable: "ingest", AckPolicy: natsjs.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 5,
	})
	if err != nil {
		log.Fatal(err)
	}
	handle := func(ctx context.Context, m *broker.Message) error {
		// Parse, validate and store the feature in m.Body.
		return nil
	}
	c, err := jetstream.NewConsumer(ctx, js, cons, handle, &jetstream.ConsumerOptions{
		Processor: broker.ProcessorOptions{Publisher: store},
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Print(c.Run(ctx))
}
