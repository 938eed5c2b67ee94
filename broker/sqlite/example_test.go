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

// Dead-letter into one SQLite file, then query it by class.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "geodlq-example")
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "dlq.db"), nil)
	if err != nil {
		panic(err)
	}
	defer store.Close()

	proc, _ := broker.NewProcessor(broker.ProcessorOptions{Publisher: store})
	body := []byte(`{"event_id":"evt-9","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`)
	_, _ = proc.Process(ctx, &broker.Message{Body: body}, func(context.Context, *broker.Message) error {
		return classify.WithStage(classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")), classify.StageTopologyValidation)
	})

	entries, _ := store.List(ctx, "geodlq.poison.dlt",
		broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}, sqlite.ListOptions{})
	fmt.Println(len(entries), entries[0].Record.Message.Headers[broker.HeaderStage])
	stats, _ := store.Stats(ctx, broker.Filter{})
	fmt.Println(stats[0].Class, stats[0].Pending)
	// Output:
	// 1 topology_validation
	// invalid_geometry 1
}
