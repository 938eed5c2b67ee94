package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
)

// stuckTarget is a re-injection target that hangs until its caller gives
// up, as a broker that stopped answering does.
type stuckTarget struct {
	once    sync.Once
	entered chan struct{}
}

func (s *stuckTarget) Publish(ctx context.Context, _ string, _ *broker.Message) error {
	s.once.Do(func() { close(s.entered) })
	<-ctx.Done()
	return ctx.Err()
}

// countOther counts the outcomes that are neither interrupted nor not_run.
func countOther(counts map[string]int) int {
	n := 0
	for k := range counts {
		if k != "interrupted" && k != "not_run" {
			n++
		}
	}
	return n
}

// TestJobCancel cancels a replay whose target hangs: the job stops, the
// records it had leased are reported interrupted (released untouched, not
// failed), those it never reached not_run, and nothing stays leased: a new dry run finds every record
// again.
func TestJobCancel(t *testing.T) {
	e := newEnv(t, sqliteKind(), envOptions{})
	target := &stuckTarget{entered: make(chan struct{})}
	srv, err := New(Options{Store: e.store, Targets: []Target{{Label: "stuck", Publisher: target}}, Token: testToken, Poll: time.Hour})
	require.NoError(t, err)
	defer srv.Close()
	require.Eventually(t, srv.Ready, 30*time.Second, 10*time.Millisecond)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c := &env{t: t, http: hs, token: testToken, srv: srv, store: e.store}

	sel := &Query{ReasonKinds: []string{"self_intersection"}}
	var dry, real Job
	c.post("/api/jobs", JobRequest{Action: "replay", DryRun: true, Repairs: []string{"make-valid"}, Filter: sel}, http.StatusAccepted, &dry)
	dry = c.waitJob(dry.ID)
	require.Equal(t, map[string]int{"would_repair": 6}, dry.Counts)
	c.post("/api/jobs", JobRequest{Action: "replay", Repairs: []string{"make-valid"}, Confirm: dry.ID}, http.StatusAccepted, &real)
	select {
	case <-target.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the replay never reached its target")
	}
	c.post("/api/jobs/"+real.ID+"/cancel", nil, http.StatusOK, nil)
	real = c.waitJob(real.ID)
	require.Equal(t, "cancelled", real.State)
	// The record in flight is interrupted; the others were leased with it
	// (interrupted) or never fetched (not_run: a replay's first batch is
	// one record, replay.Options.BatchBytes) — none failed.
	require.Positive(t, real.Counts["interrupted"], "%v", real.Counts)
	require.Equal(t, 6, real.Counts["interrupted"]+real.Counts["not_run"], "cancelled, not failed: %v", real.Counts)
	require.Zero(t, countOther(real.Counts), "no other outcome: %v", real.Counts)
	require.Len(t, c.eventIDs("reason=self_intersection", 100), 6, "every record is still there")

	c.post("/api/jobs", JobRequest{Action: "replay", DryRun: true, Repairs: []string{"make-valid"}, Filter: sel}, http.StatusAccepted, &dry)
	dry = c.waitJob(dry.ID)
	require.Equal(t, map[string]int{"would_repair": 6}, dry.Counts, "nothing was left leased")
}

// TestReplayIntoSameStore replays into the store itself (serve without
// --target), as the quickstart does, its consumer reading the same SQLite
// file: the re-injected event, waiting in its source topic, is not a dead
// letter — the list, the map and the new-record announcements leave it
// out — and the index does not rebuild over and over because the store
// counts it. A record from another broker is not written into the store:
// the dry run says so and names the way out.
func TestReplayIntoSameStore(t *testing.T) {
	e := newEnv(t, sqliteKind(), envOptions{system: "sqlite"})
	ws, err := broker.OpenStore(context.Background(), e.url, nil)
	require.NoError(t, err)
	fill(t, ws, nil, time.Now().UTC(), evjson("evt-from-kafka", "s3://provider-k/1.geojson", "EPSG:4326", bowtieAt(30, 30)))
	require.NoError(t, ws.Close())
	srv, err := New(Options{Store: e.store, Token: testToken, Poll: 100 * time.Millisecond})
	require.NoError(t, err)
	defer srv.Close()
	require.Eventually(t, srv.Ready, 30*time.Second, 10*time.Millisecond)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c := &env{t: t, http: hs, token: testToken, srv: srv, store: e.store}

	var cfg configAnswer
	c.get("/api/config", http.StatusOK, &cfg)
	require.Equal(t, []targetInfo{{ID: "store", Label: e.store.Name(), Store: true, Default: true}}, cfg.Targets)

	var dry, real Job
	kafka := c.recordOf("evt-from-kafka")
	c.post("/api/jobs", JobRequest{Action: "replay", DryRun: true, Repairs: []string{"make-valid"}, Records: []RecordRef{kafka}}, http.StatusAccepted, &dry)
	dry = c.waitJob(dry.ID)
	require.Equal(t, map[string]int{"no_route": 1}, dry.Counts, "not written into the dead-letter store")
	require.Contains(t, dry.Items[0].Why, `it came from "kafka", and this store (sqlite) is not that broker: name where its consumer reads with a target other than this store`)
	c.post("/api/jobs", JobRequest{Action: "replay", Repairs: []string{"make-valid"}, Confirm: dry.ID}, http.StatusAccepted, &real)
	real = c.waitJob(real.ID)
	require.Empty(t, real.Counts, "a confirmed run acts only on what its dry run would replay")

	bow := c.recordOf("evt-bowtie")
	c.post("/api/jobs", JobRequest{Action: "replay", DryRun: true, Repairs: []string{"make-valid"}, Records: []RecordRef{bow}}, http.StatusAccepted, &dry)
	dry = c.waitJob(dry.ID)
	c.post("/api/jobs", JobRequest{Action: "replay", Repairs: []string{"make-valid"}, Confirm: dry.ID}, http.StatusAccepted, &real)
	real = c.waitJob(real.ID)
	require.Equal(t, map[string]int{"repaired": 1}, real.Counts)
	require.Equal(t, topic, real.Items[0].Target)

	// The re-injected event is in the store, in its source topic.
	p, err := e.store.List(context.Background(), broker.ListOptions{Destination: topic})
	require.NoError(t, err)
	require.Len(t, p.Entries, 1)
	require.Equal(t, dlt+"/"+bow.ID, p.Entries[0].Record.Message.Header(broker.HeaderReplayOf))

	time.Sleep(time.Second) // polls and a count check
	require.Len(t, c.eventIDs("", 500), len(fixtureEvents()), "the re-injected event is not listed (the Kafka one is)")
	var m mapAnswer
	c.get("/api/map?zoom=18", http.StatusOK, &m)
	require.Equal(t, placedCount(), m.Located+0)
	require.Equal(t, len(fixtureEvents())-placedCount(), m.Unlocated)
}
