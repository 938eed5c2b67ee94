package postgis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// The store's schema is a list of versioned steps that Options.Create
// applies once each; they can be reviewed, or applied by another tool.
func ExampleMigrations() {
	for _, m := range postgis.Migrations() {
		fmt.Println(m.Version, m.Name)
	}
	// Output:
	// 1 dead-letter table, triage indexes, GiST indexes, safe-parse helpers
	// 2 indexes for purge's blob reference check
	// 3 summaries, attributes and search text beside the body; sort, source and trigram indexes
	// 4 counts kept by triggers for Stats and Page.Total; an index of the leased rows
	// 5 indexes of a listing sorted by attempts under a class, reason kind or EPSG filter
}

// A pipeline dead-letters into PostGIS, and a replayer leases what it wants
// back. (Needs a PostgreSQL server with PostGIS: set DATABASE_URL.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	dlq, err := postgis.New(ctx, pool, &postgis.Options{Create: true})
	if err != nil {
		log.Fatal(err)
	}
	defer dlq.Close()

	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: dlq})
	if err != nil {
		log.Fatal(err)
	}
	msg := &broker.Message{
		Body:   []byte(`{"event_id":"evt-9","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`),
		Source: &envelope.Source{System: "kafka", Topic: "spatial.events"},
	}
	out, err := proc.Process(ctx, msg, func(context.Context, *broker.Message) error {
		return &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation,
			Err: errors.New("Self-intersection[0.5 0.5]")}
	})
	if err != nil {
		log.Fatal(err) // not dead-lettered: leave the source message unacked
	}

	// PostGIS's own verdict on the stored geometry.
	var reason string
	if err := pool.QueryRow(ctx, `SELECT ST_IsValidReason(geom) FROM `+postgis.Table(dlq)+` WHERE event_id = 'evt-9'`).Scan(&reason); err != nil {
		log.Fatal(err)
	}
	fmt.Println(reason)

	recs, err := dlq.Fetch(ctx, out.Destination, broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range recs {
		// …repair and re-inject, then:
		if err := dlq.Ack(ctx, r); err != nil {
			log.Print(err)
		}
	}
}

// Operators open the store by URL, read-only for triage: nothing is
// written, and a database without the table is no store. (Needs a
// PostgreSQL server with PostGIS.)
func Example_openStore() {
	ctx := context.Background()
	s, err := broker.OpenStore(ctx, "postgres://postgres@127.0.0.1:5432/geodlq_test?sslmode=disable&geodlq_schema=geodlq",
		&broker.OpenOptions{ReadOnly: true})
	if errors.Is(err, broker.ErrNoStore) {
		log.Fatal("no dead letters here yet")
	}
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	counts, err := s.Stats(ctx, broker.StatsOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range counts {
		fmt.Println(c.Destination, c.Class, c.Pending)
	}
}

// Records whose stored geometry lies in a region, by ST_Intersects.
func ExampleListIntersecting() {
	ctx := context.Background()
	s, err := broker.OpenStore(ctx, os.Getenv("DATABASE_URL"), &broker.OpenOptions{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	rome := orb.Bound{Min: orb.Point{12.3, 41.8}, Max: orb.Point{12.6, 42.0}}
	page, err := postgis.ListIntersecting(ctx, s, broker.ListOptions{Destination: "parcels.poison.dlt"}, rome, 4326)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range page.Entries {
		fmt.Println(e.Record.ID, e.Status)
	}
}

// A destination of the table is a work queue: any number of consumers
// lease its records and dead-letter the ones that fail.
func ExampleNewConsumer() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	s, err := broker.OpenStore(ctx, os.Getenv("DATABASE_URL"), &broker.OpenOptions{Create: true})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: s})
	if err != nil {
		log.Fatal(err)
	}
	c, err := postgis.NewConsumer(s, "parcels.inbox", proc, &postgis.ConsumerOptions{
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 4}})
	if err != nil {
		log.Fatal(err)
	}
	err = c.Run(ctx, func(ctx context.Context, m *broker.Message) error {
		return nil // load the parcel
	})
	if !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}
