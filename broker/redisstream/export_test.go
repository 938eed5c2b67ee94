package redisstream

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
)

// Test access to the driver under a store made by New.

// ParkConsumer is the reserved consumer name of parked entries.
const ParkConsumer = parkConsumer

func drv(s *broker.Store) *driver { return s.Driver().(*driver) }

// StreamKey returns the Redis key of destination's stream.
func StreamKey(s *broker.Store, destination string) string { return drv(s).streamKey(destination) }

// Group returns the store's consumer group.
func Group(s *broker.Store) string { return drv(s).group }

// Consumer returns the store's consumer name.
func Consumer(s *broker.Store) string { return drv(s).consumer }

// Client returns the store's client.
func Client(s *broker.Store) redis.UniversalClient { return drv(s).client }

// Len returns XLEN of destination's stream.
func Len(ctx context.Context, s *broker.Store, destination string) (int64, error) {
	return drv(s).client.XLen(ctx, drv(s).streamKey(destination)).Result()
}

// SameSlotKey is sameSlotKey.
var SameSlotKey = sameSlotKey

// LeaseTTL returns the store's lease.
func LeaseTTL(s *broker.Store) time.Duration { return drv(s).ttl }
