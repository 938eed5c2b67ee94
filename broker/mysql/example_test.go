package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	_ "github.com/go-sql-driver/mysql"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/mysql"
	"github.com/geodlq/geodlq/classify"
)

// A consumer dead-letters what its handler cannot process into a MySQL
// table, and a replayer reads it back. (It needs a server: compiled, not
// run.)
func Example() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/pipeline?parseTime=true&timeout=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := mysql.New(ctx, db, &mysql.Options{Create: true})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: store,
		Destination: func(*broker.Message, classify.Route) string { return "parcels.dlq" }})
	if err != nil {
		log.Fatal(err)
	}
	res, err := proc.Process(ctx, &broker.Message{Body: []byte(`{"event_id":"evt-1","geometry":null}`)},
		func(context.Context, *broker.Message) error {
			return classify.SchemaViolation(errors.New("geometry is null"))
		})
	if err != nil {
		log.Fatal(err) // not acknowledged: the source redelivers
	}
	fmt.Println("dead-lettered:", res.DeadLettered)

	recs, err := store.Fetch(ctx, "parcels.dlq", broker.Filter{Classes: []classify.Class{classify.ClassSchemaViolation}}, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		// … repair and re-inject, then:
		if err := store.Ack(ctx, r); err != nil {
			log.Fatal(err)
		}
	}
}

// Any program that imports the package opens the store by URL.
func Example_openStore() {
	ctx := context.Background()
	store, err := broker.OpenStore(ctx, "mysql://app:secret@127.0.0.1:3306/pipeline?geodlq_table=dead_letters&lease_ttl=1m",
		&broker.OpenOptions{ReadOnly: true})
	if errors.Is(err, broker.ErrNoStore) {
		log.Fatal("no dead-letter table there")
	}
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	counts, err := store.Stats(ctx, broker.StatsOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range counts {
		fmt.Println(c.Destination, c.Class, c.Pending)
	}
}

// A table of the store is a work queue: consumers in any number of
// processes share a destination, each record leased by one at a time.
func ExampleNewConsumer() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/pipeline?parseTime=true&timeout=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := mysql.New(ctx, db, &mysql.Options{Create: true})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: store,
		Destination: func(*broker.Message, classify.Route) string { return "parcels.dlq" }})
	if err != nil {
		log.Fatal(err)
	}
	c, err := mysql.NewConsumer(store, "parcels", proc, &mysql.ConsumerOptions{
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 8}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.Run(ctx, func(ctx context.Context, m *broker.Message) error {
		return nil // process m.Body
	})
	log.Println(err)
}
