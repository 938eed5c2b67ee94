package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/replay"
)

// countingTarget counts re-injections by idempotency key, slowly.
type countingTarget struct {
	mu    sync.Mutex
	delay time.Duration
	seen  map[string]int
}

func (c *countingTarget) Publish(ctx context.Context, _ string, m *broker.Message) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.delay):
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[m.Header(broker.HeaderIdempotencyKey)]++
	return nil
}

// TestReplayJobWithAnotherReplayer runs a console replay job while
// another replayer (a `geodlq replay`, a cron) works through the same
// records, with a lease far shorter than the job's chunks take: the job
// goes through the replayer's leases, so every record is re-injected
// exactly once between the two (issue 19: two replays with lease_ttl=5s
// re-injected 363 messages for 200 records).
func TestReplayJobWithAnotherReplayer(t *testing.T) {
	const n = 40
	events := make([]string, n)
	for i := range events {
		events[i] = evjson(fmt.Sprintf("evt-lease-%02d", i), "s3://provider-a/lease.geojson", "EPSG:4326", bowtieAt(float64(i), 10))
	}
	// A lease of 400ms; a chunk of the job takes about 40 × 30ms.
	kind := storeKind{"sqlite", func(t testing.TB) string {
		return "sqlite://" + filepath.Join(t.TempDir(), "dlq.db") + "?lease_ttl=400ms"
	}}
	e := newEnv(t, kind, envOptions{events: events})
	target := &countingTarget{delay: 30 * time.Millisecond, seen: map[string]int{}}
	srv, err := New(Options{Store: e.store, Targets: []Target{{Label: "counting", Publisher: target}}, Token: testToken, Poll: time.Hour})
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
	require.Equal(t, map[string]int{"would_repair": n}, dry.Counts)

	// The other replayer: its own handle on the store, the same repairs.
	other, err := broker.OpenStore(context.Background(), e.url, nil)
	require.NoError(t, err)
	defer other.Close()
	repairers, err := srv.checker.Repairers(nil)
	require.NoError(t, err)
	rp, err := replay.New(&replay.Options{Source: other, Target: target, Repairers: repairers, Check: srv.checker.ReplayCheck(), BatchSize: 5})
	require.NoError(t, err)

	// The job starts; the other replayer keeps running over the same
	// destination until the job is done.
	c.post("/api/jobs", JobRequest{Action: "replay", Repairs: []string{"make-valid"}, Confirm: dry.ID}, http.StatusAccepted, &real)
	done := make(chan struct{})
	var wg sync.WaitGroup
	rep := replay.Report{Counts: map[replay.Outcome]int{}}
	wg.Go(func() {
		for {
			r, err := rp.Run(context.Background(), replay.Request{Destination: dlt})
			if err != nil {
				t.Errorf("the other replayer: %v", err)
				return
			}
			for o, k := range r.Counts {
				rep.Counts[o] += k
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	real = c.waitJob(real.ID)
	close(done)
	wg.Wait()

	require.Len(t, target.seen, n, "every record re-injected (job %v, replayer %s)", real.Counts, rep.Summary())
	for k, v := range target.seen {
		require.Equal(t, 1, v, "%s re-injected exactly once (job %v, replayer %s)", k, real.Counts, rep.Summary())
	}
	require.Equal(t, n, real.Counts["repaired"]+rep.Acked(), "each record acknowledged by one of them (job %v, replayer %s)", real.Counts, rep.Summary())
	require.Empty(t, c.eventIDs("reason=self_intersection", 100), "nothing left")
	t.Logf("job %v, replayer %s", real.Counts, rep.Summary())
}
