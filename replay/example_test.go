package replay_test

import (
	"context"
	"fmt"
	"time"

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
