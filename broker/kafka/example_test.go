package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/kafka"
	"github.com/geodlq/geodlq/broker/kafka/kafkatest"
	"github.com/geodlq/geodlq/classify"
)

// A failed record is dead-lettered to "<topic>.poison.dlt" with its key,
// the envelope and its provenance headers, and read back for replay. The
// cluster here is franz-go's kfake, run by package kafkatest.
func Example() {
	ctx := context.Background()
	c, err := kafkatest.NewCluster(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(append(kafka.ProducerOpts(nil), kgo.SeedBrokers(c.Addrs()...))...)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	store, err := kafka.New(cl, &kafka.Options{Topics: &kafka.TopicOptions{Partitions: 3}})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: store, Destination: kafka.Destination})
	if err != nil {
		log.Fatal(err)
	}

	// A record as the consumer hands it to the Processor.
	in := &kgo.Record{
		Topic: "spatial.events", Partition: 1, Offset: 42, Key: []byte("parcel-7"),
		Value:     []byte(`{"event_id":"evt-9","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`),
		Timestamp: time.UnixMilli(1767323045000),
		Headers:   []kgo.RecordHeader{{Key: broker.HeaderIdempotencyKey, Value: []byte("idem:v1:abc")}},
	}
	out, err := proc.Process(ctx, kafka.MessageOf(in), func(context.Context, *broker.Message) error {
		return &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation,
			Err: errors.New("Self-intersection[0.5 0.5]")}
	})
	if err != nil {
		log.Fatal(err) // not acknowledged: leave the source offset uncommitted
	}
	fmt.Println("ack:", out.Ack, "->", out.Destination)

	recs, err := store.Fetch(ctx, out.Destination, broker.Filter{}, 10)
	if err != nil {
		log.Fatal(err)
	}
	m := recs[0].Message
	fmt.Println("key:", string(m.Key))
	for _, h := range []string{broker.HeaderClass, broker.HeaderIdempotencyKey,
		kafka.HeaderOriginalTopic, kafka.HeaderOriginalPartition, kafka.HeaderOriginalOffset, kafka.HeaderOriginalTimestamp} {
		fmt.Printf("%s: %s\n", h, m.Header(h))
	}
	if err := store.Ack(ctx, recs[0]); err != nil {
		log.Fatal(err)
	}
	// Output:
	// ack: true -> spatial.events.poison.dlt
	// key: parcel-7
	// dlq-class: invalid_geometry
	// idempotency-key: idem:v1:abc
	// dlq-original-topic: spatial.events
	// dlq-original-partition: 1
	// dlq-original-offset: 42
	// dlq-original-timestamp: 1767323045000
}

// A consumer of a source topic: every record goes through the Processor,
// and its offset is committed only once the outcome says Ack.
func ExampleNewConsumer() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	seeds := kgo.SeedBrokers("localhost:9092")

	dlq, err := kgo.NewClient(append(kafka.ProducerOpts(nil), seeds)...)
	if err != nil {
		log.Fatal(err)
	}
	defer dlq.Close()
	store, err := kafka.New(dlq, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: store, Destination: kafka.Destination})
	if err != nil {
		log.Fatal(err)
	}

	src, err := kgo.NewClient(append(kafka.ConsumerOpts("spatial-app", "spatial.events"), seeds)...)
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	c, err := kafka.NewConsumer(src, proc, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.Run(ctx, func(ctx context.Context, m *broker.Message) error {
		// parse, reproject, validate, join, persist…
		return nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// Listing a dead-letter topic reads it directly: no consumer group, no
// leases, nothing written. Here the store is opened by URL, read-only.
func Example_list() {
	ctx := context.Background()
	c, err := kafkatest.NewCluster(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	url := "kafka://" + strings.Join(c.Addrs(), ",") + "?partitions=2"
	w, err := broker.OpenStore(ctx, url, &broker.OpenOptions{Create: true})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	for i := range 3 {
		m := &broker.Message{Key: []byte("parcel-7"), Body: fmt.Appendf(nil, `{"n":%d}`, i)}
		if err := w.Publish(ctx, "spatial.events.poison.dlt", m); err != nil {
			log.Fatal(err)
		}
	}

	ro, err := broker.OpenStore(ctx, url, &broker.OpenOptions{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	defer ro.Close()
	dests, err := ro.Destinations(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(dests)
	err = ro.ScanAll(ctx, broker.ListOptions{Destination: dests[0], Limit: 2}, func(e broker.Entry) error {
		fmt.Println(e.Record.ID, e.Status, string(e.Record.Message.Body))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// [spatial.events.poison.dlt]
	// 1/0 pending {"n":0}
	// 1/1 pending {"n":1}
	// 1/2 pending {"n":2}
}
