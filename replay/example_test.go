package replay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
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

// A replay tool prints a run's report: the counts, then one line per
// record.
func ExampleItem_String() {
	rep := replay.Report{
		Examined: 2,
		Counts:   map[replay.Outcome]int{replay.OutcomeRepaired: 1, replay.OutcomeSkipped: 1},
		Items: []replay.Item{
			{RecordID: "7", EventID: "evt-bowtie", Class: classify.ClassInvalidGeometry, Outcome: replay.OutcomeRepaired,
				Target: "spatial.events", Repair: &replay.Repair{Method: "make_valid", Detail: "structure Polygon->MultiPolygon"}},
			{RecordID: "8", EventID: "evt-not-json", Class: classify.ClassSchemaViolation, Outcome: replay.OutcomeSkipped},
		},
	}
	fmt.Println("replay of spatial.events.poison.dlt:", rep.Summary())
	for _, it := range rep.Items {
		fmt.Println("  ", it)
	}
	// Output:
	// replay of spatial.events.poison.dlt: repaired=1 skipped=1
	//    7 evt-bowtie invalid_geometry repaired -> spatial.events make_valid:structure Polygon->MultiPolygon
	//    8 evt-not-json schema_violation skipped
}

// A worker that acts on dead-letter records itself (here, forwarding
// them) keeps their leases with a LeaseKeeper: the batch's leases are
// renewed while it works, and each act runs only while its record's lease
// is provably held.
func ExampleLeaseKeeper() {
	ctx := context.Background()
	store := memory.New(&memory.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 300 * time.Millisecond}})
	for i := range 3 {
		_ = store.Publish(ctx, "jobs.dlt", &broker.Message{Body: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}

	keeper := replay.NewLeaseKeeper(store, nil)
	defer keeper.Close()
	fetched := time.Now()
	recs, err := store.Fetch(ctx, "jobs.dlt", broker.Filter{}, 10)
	if err != nil {
		panic(err)
	}
	keeper.Hold(fetched, recs...)
	for _, r := range recs {
		time.Sleep(200 * time.Millisecond) // slow work: the batch outlives its lease
		err := keeper.Act(ctx, r, func(ctx context.Context) error {
			return store.Publish(ctx, "jobs", r.Message) // the side effect
		})
		if err != nil { // errors.Is(err, replay.ErrNotHeld): someone else's now
			fmt.Println(r.ID, "left:", err)
			continue
		}
		if err := keeper.Ack(ctx, r); err != nil {
			panic(err)
		}
		fmt.Println(r.ID, "forwarded")
	}
	fmt.Println(memory.Len(store, "jobs.dlt"), "left,", memory.Len(store, "jobs"), "forwarded")
	// Output:
	// 1 forwarded
	// 2 forwarded
	// 3 forwarded
	// 0 left, 3 forwarded
}
