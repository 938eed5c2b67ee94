package dlqtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/dlqtest"
)

// In a consumer's test: feed a bowtie, then require it in the poison
// destination with its reason.
func ExampleRequireDeadLettered() {
	_ = func(t *testing.T) {
		ctx := context.Background()
		store := memory.New(nil)
		proc, _ := broker.NewProcessor(&broker.ProcessorOptions{Publisher: store})
		_, _ = proc.Process(ctx, &broker.Message{Body: []byte(`{"event_id":"evt-9"}`)},
			func(context.Context, *broker.Message) error {
				return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
			})
		dlqtest.RequireDeadLettered(ctx, t, store, "geodlq.poison.dlt", &dlqtest.Want{
			EventID: "evt-9", Class: classify.ClassInvalidGeometry, ReasonContains: "Self-intersection",
		})
	}
}
