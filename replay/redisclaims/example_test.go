package redisclaims_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/redisclaims"
)

// A consumer claims the event's idempotency key before any side effect;
// a second delivery of the same event finds the key done.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	claims, err := redisclaims.New(client, &redisclaims.Options{Prefix: "myapp:claims"})
	if err != nil {
		panic(err)
	}
	key := replay.NewKey("parcels", []byte("provider-17"), []byte(`{"event_id":"evt-9"}`))
	for range 2 {
		res, err := replay.Once(ctx, claims, key, time.Minute, func(ctx context.Context) error {
			// write the parcel to PostGIS, call the tile server…
			return nil
		})
		fmt.Println(res.Ran, res.Status, err)
	}
}

// Each idempotency key uses two Redis keys in one cluster slot: the key's
// state and its lease. New does no I/O, so this runs without a server.
func ExampleClaims_Keys() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	claims, err := redisclaims.New(client, nil)
	if err != nil {
		panic(err)
	}
	state, lease := claims.Keys("idem:v1:abc")
	fmt.Println(state)
	fmt.Println(lease)
	// Output:
	// geodlq:claim{:idem:v1:abc}
	// geodlq:claim{:idem:v1:abc}:lease
}
