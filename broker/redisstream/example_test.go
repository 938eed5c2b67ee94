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
		Group:      "parcel-replayer",
		LeaseTTL:   time.Minute,
		MaxEntries: 1_000_000, // refuse writes beyond this; never trim
	})
	if err != nil {
		panic(err)
	}
	defer dlq.Close()

	proc, err := broker.NewProcessor(broker.ProcessorOptions{Publisher: dlq})
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
	fmt.Println("ack source:", out.Ack, "parked in", dlq.StreamKey(out.Destination))

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

// Stream keys are "<prefix>:<destination>". New does no I/O, so this runs
// without a server.
func ExampleStore_StreamKey() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	dlq, err := redisstream.New(client, &redisstream.Options{Prefix: "myapp:dlq"})
	if err != nil {
		panic(err)
	}
	fmt.Println(dlq.StreamKey("parcels.poison.dlt"))
	fmt.Println(dlq.Group(), dlq.MaxMessageBytes("parcels.poison.dlt")>>20, "MiB")
	// Output:
	// myapp:dlq:parcels.poison.dlt
	// geodlq-replay 64 MiB
}

// The store hands out the client it was given.
func ExampleStore_As() {
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
	// Output:
	// true true
	// false
}
