package pgclaims_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/pgclaims"
)

// The claims table's schema, one versioned step at a time.
func ExampleMigrations() {
	for _, m := range pgclaims.Migrations() {
		fmt.Println(m.Version, m.Name)
	}
	// Output:
	// 1 claims table
	// 2 token that completed a done key
}

// Every consumer process claims an event's idempotency key in PostgreSQL
// before its side effect, so a replayed duplicate does nothing. (Needs a
// PostgreSQL server: set DATABASE_URL.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	claims, err := pgclaims.New(ctx, pool, &pgclaims.Options{Create: true})
	if err != nil {
		log.Fatal(err)
	}
	key := replay.NewKey("parcels", []byte(`{"event_id":"evt-9"}`))
	res, err := replay.Once(ctx, claims, key, time.Minute, func(ctx context.Context) error {
		// write the parcel to PostGIS, in its own transaction…
		return nil
	})
	fmt.Println(res.Ran, res.Status, err)
}
