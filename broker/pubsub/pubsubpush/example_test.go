package pubsubpush_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/broker/pubsub/pubsubpush"
	"github.com/geodlq/geodlq/classify"
)

// A pushed bowtie is dead-lettered, then answered 204. In a service, the
// Publisher is geopubsub.New's store and Auth checks the push token.
func ExampleNew() {
	dlq := memory.New(nil)
	h, err := pubsubpush.New(func(_ context.Context, m *broker.Message) error {
		return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
	}, &pubsubpush.Options{Processor: broker.ProcessorOptions{Publisher: dlq,
		Destination: func(*broker.Message, classify.Route) string { return "vector-dlq" }}})
	if err != nil {
		panic(err)
	}
	body := `{"message":{"data":"eyJnZW9tZXRyeSI6bnVsbH0=","messageId":"m-1"},"subscription":"projects/p/subscriptions/s","deliveryAttempt":1}`
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/push", strings.NewReader(body)))
	fmt.Println(w.Code, memory.Len(dlq, "vector-dlq"))
	// Output:
	// 204 1
}
