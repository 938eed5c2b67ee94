// Package sample is what the broker examples' demos (their TestDemo, in
// test files) share: the sample events producers "sent", a simulated tile
// server that fails transiently, and a dead-letter source whose
// acknowledgements never land. It is demo scaffolding that no example's
// main.go imports: the part a service copies builds without it.
package sample

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
)

// Events returns what producers sent, one event per string: a valid
// parcel, a bowtie, an unparseable CRS, a body that is not JSON, an event
// whose tile server fails twice and then answers ("tiles":"flaky"), and one
// whose tile server is down until the outage ends ("tiles":"down").
func Events() []string {
	return []string{
		`{"event_id":"evt-parcel","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[12.49,41.89],[12.5,41.89],[12.5,41.9],[12.49,41.9],[12.49,41.89]]]}}`,
		`{"event_id":"evt-bowtie","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`,
		`{"event_id":"evt-bad-crs","crs":"EPSG:43x6","geometry":{"type":"Point","coordinates":[2.35,48.85]}}`,
		`event_id=evt-not-json; geometry=POLYGON((0 0,1 0,1 1,0 0))`,
		`{"event_id":"evt-flaky","crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[9.19,45.46]},"properties":{"tiles":"flaky"}}`,
		`{"event_id":"evt-outage","crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[11.25,43.77]},"properties":{"tiles":"down"}}`,
	}
}

// TileServer simulates the downstream service the pipeline enriches events
// from: "flaky" events fail twice and then succeed; "down" events fail
// while the outage lasts.
type TileServer struct {
	mu     sync.Mutex
	calls  map[string]int
	outage bool
}

// NewTileServer returns a tile server whose outage has begun.
func NewTileServer() *TileServer {
	return &TileServer{calls: map[string]int{}, outage: true}
}

// Enrich is the enrichment step a pipeline's handler calls: it fails
// transiently as described on [TileServer], and with a schema violation for
// a body that is not JSON.
func (t *TileServer) Enrich(_ context.Context, m *broker.Message) error {
	var ev struct {
		EventID    string `json:"event_id"`
		Properties struct {
			Tiles string `json:"tiles"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(m.Body, &ev); err != nil {
		return classify.SchemaViolation(err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls[ev.EventID]++
	switch {
	case ev.Properties.Tiles == "flaky" && t.calls[ev.EventID] <= 2:
		return classify.Transient(errors.New("tile server: HTTP 503"))
	case ev.Properties.Tiles == "down" && t.outage:
		return classify.Transient(errors.New("tile server: HTTP 502"))
	}
	return nil
}

// EndOutage makes "down" events succeed from now on.
func (t *TileServer) EndOutage() {
	t.mu.Lock()
	t.outage = false
	t.mu.Unlock()
}

// CrashBeforeAck is a dead-letter source whose Ack never lands, as if the
// replayer died between re-injecting a record and acknowledging it.
type CrashBeforeAck struct{ broker.DeadLetterSource }

// Ack fails without acknowledging anything.
func (CrashBeforeAck) Ack(context.Context, *broker.Record) error {
	return errors.New("replayer crashed before acknowledging")
}
