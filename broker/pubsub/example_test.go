package pubsub_test

import (
	"fmt"

	geopubsub "github.com/geodlq/geodlq/broker/pubsub"
)

// The dead-letter policy a source subscription of vector jobs needs, and
// what Pub/Sub would refuse.
func ExampleDeadLetterConfig() {
	cmd, err := geopubsub.DeadLetterConfig{DeadLetterTopic: "vector-dlq", MaxDeliveryAttempts: 5}.Gcloud("geo-prod", "geo-vector-sub")
	if err != nil {
		panic(err)
	}
	fmt.Println(cmd)
	_, err = geopubsub.DeadLetterConfig{DeadLetterTopic: "vector-dlq", MaxDeliveryAttempts: 3}.Policy("geo-prod")
	fmt.Println(err)
	// Output:
	// gcloud pubsub subscriptions update geo-vector-sub \
	//   --dead-letter-topic=projects/geo-prod/topics/vector-dlq \
	//   --max-delivery-attempts=5
	// pubsub: maxDeliveryAttempts 3 outside Pub/Sub's 5..100 (the service rejects fewer than 5)
}
