package offloadtest_test

import (
	"context"
	"testing"

	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/offloadtest"
)

type memHarness struct{}

func (memHarness) MakeStore(context.Context) (offload.Store, error) {
	return offload.NewMemStore(), nil
}
func (memHarness) Tamper(ctx context.Context, s offload.Store, key string, mutate func([]byte) []byte) error {
	return offloadtest.TamperViaStore(ctx, s, key, mutate)
}
func (memHarness) Capabilities() offloadtest.Capabilities { return offloadtest.Capabilities{} }
func (memHarness) Close()                                 {}

// A blob store proves itself by running the suite from a test.
func ExampleRunConformanceTests() {
	// In a _test.go file:
	_ = func(t *testing.T) {
		offloadtest.RunConformanceTests(t, func(context.Context, *testing.T) (offloadtest.Harness, error) {
			return memHarness{}, nil
		})
	}
}
