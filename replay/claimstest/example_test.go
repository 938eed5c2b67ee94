package claimstest_test

import (
	"context"
	"testing"

	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/claimstest"
)

// A claims store proves itself by running the suite from a test.
func ExampleRunConformanceTests() {
	// In a _test.go file:
	_ = func(t *testing.T) {
		shared := replay.NewMemClaims(nil) // your Redis/PostgreSQL store
		claimstest.RunConformanceTests(t, claimstest.Harness{
			New: func(context.Context, *testing.T) (replay.Claims, error) { return shared, nil },
		})
	}
}
