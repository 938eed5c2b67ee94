package redisclaims_test

import (
	"context"
	"testing"
	"time"

	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/claimstest"
	"github.com/geodlq/geodlq/replay/redisclaims"
)

func TestConformance(t *testing.T) {
	client := newClient(t)
	prefix := uniquePrefix(t)
	claimstest.RunConformanceTests(t, claimstest.Harness{
		New: func(context.Context, *testing.T) (replay.Claims, error) {
			// Every store shares the client and prefix, as processes
			// sharing one Redis would.
			return redisclaims.New(client, &redisclaims.Options{Prefix: prefix})
		},
		MinTTL: 25 * time.Millisecond,
	})
}
