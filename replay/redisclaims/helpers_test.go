package redisclaims_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/replay/redisclaims/internal/redistest"
)

// newClient connects to the test Redis; the client is closed when t ends.
func newClient(t *testing.T) *redis.Client { t.Helper(); return redistest.Client(t) }

// uniquePrefix returns a key prefix no other run uses, and deletes every
// key under it when t ends.
func uniquePrefix(t *testing.T) string { t.Helper(); return redistest.Prefix(t, "claims") }
