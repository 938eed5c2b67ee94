package warehouse_test

import (
	"context"
	"fmt"
	"os"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/warehouse"
	"github.com/geodlq/geodlq/warehouse/internal/fixture"
)

// Sync keeps a GeoParquet dataset of a store's dead letters: each run
// appends what is new since the last one.
func ExampleSync() {
	ctx := context.Background()
	store := memory.New(nil) // broker.OpenStore(ctx, url, &broker.OpenOptions{ReadOnly: true}) in production
	_ = fixture.Fill(ctx, store, "vector-dlq", 30, nil)

	dir, _ := os.MkdirTemp("", "dlq-warehouse-")
	defer os.RemoveAll(dir)
	opts := &warehouse.SyncOptions{
		// The seed's warehouse path: CRS and parse failures.
		Filter: broker.Filter{Classes: []classify.Class{classify.ClassCRSMismatch, classify.ClassSchemaViolation}},
	}
	res, err := warehouse.Sync(ctx, store, dir, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("run", res.Run, "rows", res.Rows)
	fmt.Println(res.Files[0])

	_ = fixture.Fill(ctx, store, "vector-dlq", 6, &fixture.Options{From: 30})
	res, _ = warehouse.Sync(ctx, store, dir, opts)
	fmt.Println("run", res.Run, "rows", res.Rows, "dataset", res.Watermark.Rows)
	// Output:
	// run 1 rows 15
	// dead_lettered_date=2026-03-02/class=crs_mismatch/part-r000001-00001-unknowncrs.parquet
	// run 2 rows 3 dataset 18
}
