package memory_test

import (
	"context"
	"fmt"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
)

// The in-memory store leases records until they are acknowledged.
func Example() {
	ctx := context.Background()
	b := memory.New(nil)
	_ = b.Publish(ctx, "spatial.events", &broker.Message{Key: []byte("parcel-7"), Body: []byte(`{"event_id":"e1"}`)})

	recs, _ := b.Fetch(ctx, "spatial.events", broker.Filter{}, 10)
	fmt.Println(len(recs), string(recs[0].Message.Key), recs[0].Deliveries)

	again, _ := b.Fetch(ctx, "spatial.events", broker.Filter{}, 10)
	fmt.Println("while leased:", len(again))

	_ = b.Ack(ctx, recs[0])
	fmt.Println("after ack:", memory.Len(b, "spatial.events"))
	// Output:
	// 1 parcel-7 1
	// while leased: 0
	// after ack: 0
}
