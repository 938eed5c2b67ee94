package replay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/geodlq/geodlq/replay"
)

// A consumer claims the event's idempotency key before any side effect, so
// a replayed duplicate does nothing.
func ExampleOnce() {
	ctx := context.Background()
	claims := replay.NewMemClaims(nil) // Redis or PostgreSQL in production
	key := replay.NewKey("parcels", []byte(`{"event_id":"evt-9"}`))

	for delivery := 1; delivery <= 3; delivery++ {
		res, err := replay.Once(ctx, claims, key, time.Minute, func(context.Context) error {
			fmt.Println("writing parcel to PostGIS")
			return nil
		})
		fmt.Println(delivery, res.Ran, res.Status, err)
	}
	// Output:
	// writing parcel to PostGIS
	// 1 true acquired <nil>
	// 2 false done <nil>
	// 3 false done <nil>
}
