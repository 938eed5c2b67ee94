package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/classify"
)

// Dead-letter into one SQLite file, then query it by class, count it, and
// open it again by URL, read-only.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "geodlq-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "dlq.db")
	store, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		panic(err)
	}
	defer store.Close()

	proc, _ := broker.NewProcessor(&broker.ProcessorOptions{Publisher: store})
	body := []byte(`{"event_id":"evt-9","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`)
	_, _ = proc.Process(ctx, &broker.Message{Body: body}, func(context.Context, *broker.Message) error {
		return classify.WithStage(classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")), classify.StageTopologyValidation)
	})

	page, _ := store.List(ctx, broker.ListOptions{Destination: "geodlq.poison.dlt",
		Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}})
	fmt.Println(len(page.Entries), page.Entries[0].Record.Message.Headers[broker.HeaderStage], page.Entries[0].Status)
	stats, _ := store.Stats(ctx, broker.StatsOptions{})
	fmt.Println(stats[0].Class, stats[0].ReasonKind, stats[0].Pending)

	ro, err := broker.OpenStore(ctx, "sqlite://"+path, &broker.OpenOptions{ReadOnly: true})
	if err != nil {
		panic(err)
	}
	defer ro.Close()
	dests, _ := ro.Destinations(ctx)
	fmt.Println(dests)
	// Output:
	// 1 topology_validation pending
	// invalid_geometry self_intersection 1
	// [geodlq.poison.dlt]
}
