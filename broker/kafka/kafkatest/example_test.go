package kafkatest_test

import (
	"context"
	"fmt"
	"log"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker/kafka/kafkatest"
)

// A test starts a cluster, points a client at it and closes it at the end.
func Example() {
	ctx := context.Background()
	c, err := kafkatest.NewCluster(ctx, &kafkatest.Options{Topics: []string{"spatial.events"}, Partitions: 3})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	r := &kgo.Record{Topic: "spatial.events", Value: []byte(`{"event_id":"evt-1"}`)}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("produced to", r.Topic, "offset", r.Offset)
	// Output: produced to spatial.events offset 0
}
