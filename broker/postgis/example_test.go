package postgis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// The store's schema is a list of versioned steps that Migrate applies
// once each; they can be reviewed, or applied by another tool.
func ExampleMigrations() {
	for _, m := range postgis.Migrations() {
		fmt.Println(m.Version, m.Name)
	}
	// Output:
	// 1 dead-letter table, triage indexes, GiST indexes, safe-parse helpers
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
	dlq, err := postgis.New(ctx, pool, &postgis.Options{Migrate: true})
	if err != nil {
		log.Fatal(err)
	}

	proc, err := broker.NewProcessor(broker.ProcessorOptions{Publisher: dlq})
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
	if err := pool.QueryRow(ctx, `SELECT ST_IsValidReason(geom) FROM `+dlq.Table()+` WHERE event_id = 'evt-9'`).Scan(&reason); err != nil {
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
