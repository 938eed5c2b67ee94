package main

// The demo's scaffolding, shared word for word by the broker examples'
// demos (examples/{jetstream,postgis,rabbitmq,redis}-consumer/sample_test.go;
// internal/importrule checks the copies agree): the sample events
// producers "sent", a simulated tile server that fails transiently, and a
// dead-letter source whose acknowledgements never land. It is in a test
// file so that main.go, which a service copies, does not carry it, and in
// every example's own directory so that a copy of the directory is whole.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
)

// sampleEventList returns what producers sent, one event per string: a valid
// parcel, a bowtie, an unparseable CRS, a body that is not JSON, an event
// whose tile server fails twice and then answers ("tiles":"flaky"), and one
// whose tile server is down until the outage ends ("tiles":"down").
func sampleEventList() []string {
	return []string{
		`{"event_id":"evt-parcel","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[12.49,41.89],[12.5,41.89],[12.5,41.9],[12.49,41.9],[12.49,41.89]]]}}`,
		`{"event_id":"evt-bowtie","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`,
		`{"event_id":"evt-bad-crs","crs":"EPSG:43x6","geometry":{"type":"Point","coordinates":[2.35,48.85]}}`,
		`event_id=evt-not-json; geometry=POLYGON((0 0,1 0,1 1,0 0))`,
		`{"event_id":"evt-flaky","crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[9.19,45.46]},"properties":{"tiles":"flaky"}}`,
		`{"event_id":"evt-outage","crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[11.25,43.77]},"properties":{"tiles":"down"}}`,
	}
}

// tileServer simulates the downstream service the pipeline enriches events
// from: "flaky" events fail twice and then succeed; "down" events fail
// while the outage lasts.
type tileServer struct {
	mu     sync.Mutex
	calls  map[string]int
	outage bool
}

// newTileServer returns a tile server whose outage has begun.
func newTileServer() *tileServer {
	return &tileServer{calls: map[string]int{}, outage: true}
}

// Enrich is the enrichment step a pipeline's handler calls: it fails
// transiently as described on tileServer, and with a schema violation for
// a body that is not JSON.
func (t *tileServer) Enrich(_ context.Context, m *broker.Message) error {
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
func (t *tileServer) EndOutage() {
	t.mu.Lock()
	t.outage = false
	t.mu.Unlock()
}

// crashBeforeAck is a dead-letter source whose Ack never lands, as if the
// replayer died between re-injecting a record and acknowledging it.
type crashBeforeAck struct{ broker.DeadLetterSource }

// Ack fails without acknowledging anything.
func (crashBeforeAck) Ack(context.Context, *broker.Record) error {
	return errors.New("replayer crashed before acknowledging")
}

func TestTileServer(t *testing.T) {
	ev := sampleEventList()
	byID := map[string]*broker.Message{}
	for _, e := range ev {
		m := &broker.Message{Body: []byte(e)}
		byID[e] = m
	}
	ctx := context.Background()
	ts := newTileServer()
	cases := []struct {
		event string
		want  []classify.Class // per call; "" means success
	}{
		{ev[0], []classify.Class{"", ""}},
		{ev[3], []classify.Class{classify.ClassSchemaViolation}},
		{ev[4], []classify.Class{classify.ClassTransient, classify.ClassTransient, "", ""}},
		{ev[5], []classify.Class{classify.ClassTransient, classify.ClassTransient}},
	}
	for _, tc := range cases {
		for i, want := range tc.want {
			err := ts.Enrich(ctx, byID[tc.event])
			if want == "" {
				require.NoError(t, err, "%s call %d", tc.event, i+1)
				continue
			}
			require.Equal(t, want, classify.Classify(err), "%s call %d", tc.event, i+1)
		}
	}
	ts.EndOutage()
	require.NoError(t, ts.Enrich(ctx, byID[ev[5]]), "the outage is over")
}

func TestCrashBeforeAck(t *testing.T) {
	ctx := context.Background()
	b := memory.New(nil)
	require.NoError(t, b.Publish(ctx, "d", &broker.Message{Body: []byte("x")}))
	src := crashBeforeAck{DeadLetterSource: b}
	recs, err := src.Fetch(ctx, "d", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Error(t, src.Ack(ctx, recs[0]))
	require.Equal(t, 1, memory.Len(b, "d"), "nothing was acknowledged")
}

func Example_tileServer() {
	ts := newTileServer()
	flaky := &broker.Message{Body: []byte(sampleEventList()[4])}
	for range 3 {
		if err := ts.Enrich(context.Background(), flaky); err != nil {
			fmt.Println(classify.Classify(err), err)
			continue
		}
		fmt.Println("ok")
	}
	// Output:
	// transient tile server: HTTP 503
	// transient tile server: HTTP 503
	// ok
}
