package replay_test

import (
	"context"
	"testing"

	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/claimstest"
)

func TestMemClaimsConformance(t *testing.T) {
	shared := replay.NewMemClaims(nil)
	claimstest.RunConformanceTests(t, claimstest.Harness{
		New: func(context.Context, *testing.T) (replay.Claims, error) { return shared, nil },
	})
}
