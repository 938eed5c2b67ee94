package servicebus_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/servicebus"
)

// The source queue settings for vector jobs whose longest operation is the
// seed's 12 s reprojection.
func ExampleQueueConfig_Settings() {
	s, err := servicebus.QueueConfig{MaxDeliveryCount: 4, LongestOperation: 12 * time.Second}.Settings()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.CLI("geo-rg", "geo-ns", "vector-jobs"))
	// Output:
	// az servicebus queue update --resource-group geo-rg --namespace-name geo-ns --name vector-jobs \
	//   --max-delivery-count 4 --lock-duration PT1M12S --enable-dead-lettering-on-message-expiration true
}

// A consumer that dead-letters into the queue's own $DeadLetterQueue.
func ExampleDeadLetterer() {
	var client *azservicebus.Client // azservicebus.NewClient(namespace, credential, nil)
	if client == nil {
		return // needs a Service Bus namespace
	}
	ctx := context.Background()
	recv, err := client.NewReceiverForQueue("vector-jobs", nil)
	if err != nil {
		log.Fatal(err)
	}
	dl, _ := servicebus.NewDeadLetterer(nil)
	proc, _ := broker.NewProcessor(&broker.ProcessorOptions{Publisher: dl})
	c, _ := servicebus.NewConsumer(ctx, recv, "vector-jobs", proc, &servicebus.ConsumerOptions{DeadLetterer: dl})
	_ = c.Run(ctx, func(ctx context.Context, m *broker.Message) error { return nil })

	// Replay later from vector-jobs/$DeadLetterQueue.
	store, _ := servicebus.New(ctx, client, nil)
	_, _ = store.Fetch(ctx, servicebus.DeadLetterQueue("vector-jobs"), broker.Filter{}, 10)
	// Output:
}
