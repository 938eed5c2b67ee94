package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// A consumer dead-letters to a Redis stream through the Processor, and a
// replayer leases the invalid geometries back with a filter.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	dlq, err := redisstream.New(client, &redisstream.Options{
		Group:        "parcel-replayer",
		StoreOptions: broker.StoreOptions{LeaseTTL: time.Minute},
		MaxEntries:   1_000_000, // refuse writes beyond this; never trim
	})
	if err != nil {
		panic(err)
	}
	defer dlq.Close()

	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: dlq})
	if err != nil {
		panic(err)
	}
	msg := &broker.Message{
		Body:   []byte(`{"event_id":"evt-9","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`),
		Source: &envelope.Source{System: "redis", Topic: "parcels"},
	}
	out, err := proc.Process(ctx, msg, func(context.Context, *broker.Message) error {
		return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
	})
	if errors.Is(err, redisstream.ErrStoreFull) {
		fmt.Println("dead-letter store full: leave the source unacknowledged")
		return
	} else if err != nil {
		fmt.Println("leave unacked:", err)
		return
	}
	fmt.Println("ack source:", out.Ack, "parked in", "geodlq:"+out.Destination)

	recs, err := dlq.Fetch(ctx, out.Destination, broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}, 10)
	if err != nil {
		panic(err)
	}
	for _, r := range recs {
		// repair and re-inject, then:
		if err := dlq.Ack(ctx, r); errors.Is(err, broker.ErrLeaseLost) {
			fmt.Println("another replayer took", r.ID, "over")
		}
	}
}

// Open the store by URL: importing the package registers redis:// and
// rediss://. A read-only open writes nothing and fails with
// broker.ErrNoStore where no store is.
func Example_openStore() {
	ctx := context.Background()
	s, err := broker.OpenStore(ctx, "redis://127.0.0.1:6379/0?geodlq_prefix=myapp:dlq&lease_ttl=1m",
		&broker.OpenOptions{ReadOnly: true, ConnectTimeout: 2 * time.Second})
	if errors.Is(err, broker.ErrNoStore) {
		fmt.Println("no dead letters here yet")
		return
	} else if err != nil {
		panic(err)
	}
	defer s.Close()
	err = s.ScanAll(ctx, broker.ListOptions{Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}},
		func(e broker.Entry) error {
			fmt.Println(e.Record.Destination, e.Record.ID, e.Status)
			return nil
		})
	if err != nil {
		panic(err)
	}
}

// The store hands out the client it was given. New does no I/O, so this
// runs without a server.
func Example_as() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	dlq, err := redisstream.New(client, nil)
	if err != nil {
		panic(err)
	}
	var c *redis.Client
	fmt.Println(dlq.As(&c), c == client)
	var cc *redis.ClusterClient
	fmt.Println(dlq.As(&cc))
	fmt.Println(dlq.MaxMessageBytes("parcels.poison.dlt")>>20, "MiB")
	// Output:
	// true true
	// false
	// 64 MiB
}

// A consumer group over a producer's own stream, with the dead-letter
// path: a RawKeys store reads the stream, and NewConsumer acknowledges
// each entry once it was processed or dead-lettered.
func ExampleNewConsumer() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	src, err := redisstream.New(client, &redisstream.Options{RawKeys: true, KeepAcked: true,
		Group: "spatial-app", Consumer: "worker-1", StoreOptions: broker.StoreOptions{LeaseTTL: time.Minute}})
	if err != nil {
		panic(err)
	}
	dlq, err := redisstream.New(client, nil) // dead letters in geodlq:spatial.events.poison.dlt, …
	if err != nil {
		panic(err)
	}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: dlq})
	if err != nil {
		panic(err)
	}
	c, err := redisstream.NewConsumer(src, "spatial.events", proc, nil)
	if err != nil {
		panic(err)
	}
	err = c.Run(ctx, func(ctx context.Context, m *broker.Message) error {
		return nil // validate and use the event
	})
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
}
