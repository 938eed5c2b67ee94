package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
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

// stallingDriver is a store's driver whose lease renewals fail while
// stall is set (a store that stopped answering them); the rest, listing
// included, is the store's.
type stallingDriver struct {
	broker.Driver
	stall atomic.Bool
}

func (d *stallingDriver) Renew(ctx context.Context, r *broker.Record) error {
	if d.stall.Load() {
		return errors.New("renewal refused: the store does not answer (test)")
	}
	return d.Driver.Renew(ctx, r)
}

func (d *stallingDriver) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	return d.Driver.(broker.Lister).List(ctx, opts)
}

func (d *stallingDriver) Destinations(ctx context.Context) ([]string, error) {
	return d.Driver.(broker.Lister).Destinations(ctx)
}

func (d *stallingDriver) ListCapabilities() broker.ListCapabilities {
	return d.Driver.(broker.ListCapabler).ListCapabilities()
}

func (d *stallingDriver) Stats(ctx context.Context, opts broker.StatsOptions) ([]broker.Count, error) {
	return d.Driver.(broker.Statser).Stats(ctx, opts)
}

// stealingTarget re-injects like countingTarget, and at its steal-th
// re-injection stalls the job's lease renewals until the leases lapse,
// lets another replayer's fetch take every record then available (the
// job's too), and goes on.
type stealingTarget struct {
	countingTarget
	steal, calls int
	at           func()
}

func (s *stealingTarget) Publish(ctx context.Context, topic string, m *broker.Message) error {
	s.mu.Lock()
	s.calls++
	steal := s.calls == s.steal
	s.mu.Unlock()
	if steal {
		s.at()
	}
	return s.countingTarget.Publish(ctx, topic, m)
}

// TestReplayJobReportsLostLeases: a console replay job whose leases
// lapse mid-run (its renewals failed for longer than a lease) and are
// taken by another replayer says so, as geodlq replay does: leases_lost
// counts them, incomplete says the job is partial, and no record is
// re-injected by both.
func TestReplayJobReportsLostLeases(t *testing.T) {
	const (
		n     = 12
		ttl   = 400 * time.Millisecond
		steal = 4
	)
	events := make([]string, n)
	for i := range events {
		events[i] = evjson(fmt.Sprintf("evt-stolen-%02d", i), "s3://provider-a/stolen.geojson", "EPSG:4326", bowtieAt(float64(i), 10))
	}
	kind := storeKind{"sqlite", func(t testing.TB) string {
		return "sqlite://" + filepath.Join(t.TempDir(), "dlq.db") + "?lease_ttl=" + ttl.String()
	}}
	e := newEnv(t, kind, envOptions{events: events})
	ctx := context.Background()

	// The console's own handle on the store, its renewals to be stalled.
	mine, err := broker.OpenStore(ctx, e.url, nil)
	require.NoError(t, err)
	defer mine.Close()
	drv := &stallingDriver{Driver: mine.Driver()}
	store := broker.NewStore("stalling", drv, &broker.StoreOptions{LeaseTTL: ttl})

	thief, err := broker.OpenStore(ctx, e.url, nil)
	require.NoError(t, err)
	defer thief.Close()
	theirs := replay.NewLeaseKeeper(thief, nil)
	defer theirs.Close()
	var stolen []*broker.Record
	target := &stealingTarget{countingTarget: countingTarget{delay: 10 * time.Millisecond, seen: map[string]int{}}, steal: steal}
	target.at = func() {
		drv.stall.Store(true)
		time.Sleep(ttl + ttl/2)
		fetched := time.Now()
		recs, err := thief.Fetch(ctx, dlt, broker.Filter{}, n)
		require.NoError(t, err)
		theirs.Hold(fetched, recs...)
		stolen = recs
		drv.stall.Store(false)
	}

	srv, err := New(Options{Store: store, Targets: []Target{{Label: "stealing", Publisher: target}}, Token: testToken, Poll: time.Hour})
	require.NoError(t, err)
	defer srv.Close()
	require.Eventually(t, srv.Ready, 30*time.Second, 10*time.Millisecond)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c := &env{t: t, http: hs, token: testToken, srv: srv, store: store}

	sel := &Query{ReasonKinds: []string{"self_intersection"}}
	var dry, real Job
	c.post("/api/jobs", JobRequest{Action: "replay", DryRun: true, Repairs: []string{"make-valid"}, Filter: sel}, http.StatusAccepted, &dry)
	dry = c.waitJob(dry.ID)
	require.Equal(t, map[string]int{"would_repair": n}, dry.Counts)
	require.Zero(t, dry.LeasesLost)
	require.Empty(t, dry.Incomplete, "a dry run that lost nothing is complete")

	c.post("/api/jobs", JobRequest{Action: "replay", Repairs: []string{"make-valid"}, Confirm: dry.ID}, http.StatusAccepted, &real)
	real = c.waitJob(real.ID)
	require.NotEmpty(t, stolen, "the other replayer took records over")
	require.Equal(t, "done", real.State, real.Error)
	require.Positive(t, real.LeasesLost, "job %v", real.Counts)
	require.Contains(t, real.Incomplete, fmt.Sprintf("%d records' leases were lost during the job", real.LeasesLost))
	require.Less(t, real.Counts["repaired"], n, "the stolen records were not repaired by the job: %v", real.Counts)

	// The job re-injected the records before the theft and, at most, the
	// one it was re-injecting when its leases lapsed (its publish began
	// under a live lease; its acknowledgement was refused): none after.
	inFlight := 0
	stolenKeys := map[string]bool{}
	for _, r := range stolen {
		stolenKeys[r.Message.Header(broker.HeaderIdempotencyKey)] = true
	}
	for k, v := range target.seen {
		require.Equal(t, 1, v, "%s re-injected once", k)
		if stolenKeys[k] {
			inFlight++
		}
	}
	require.LessOrEqual(t, inFlight, 1, "no record re-injected after it was taken over")
	require.LessOrEqual(t, len(target.seen), steal, "no re-injection after the theft")

	// The job as the page shows it, from the API: the counts and why.
	var got Job
	c.get("/api/jobs/"+real.ID, http.StatusOK, &got)
	require.Equal(t, real.LeasesLost, got.LeasesLost)
	require.Equal(t, real.Incomplete, got.Incomplete)
	t.Logf("job %v, leases lost %d, %d stolen: %s", real.Counts, real.LeasesLost, len(stolen), real.Incomplete)
}
