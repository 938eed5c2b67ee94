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

// TestJobCancel cancels a replay whose target hangs: the job stops, the
// records it had leased are reported interrupted (released untouched, not
// failed), and nothing stays leased: a new dry run finds every record
// again.
func TestJobCancel(t *testing.T) {
	e := newEnv(t, sqliteKind(), envOptions{})
	target := &stuckTarget{entered: make(chan struct{})}
	srv, err := New(Options{Store: e.store, Target: target, Token: testToken, Poll: time.Hour})
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
	require.Equal(t, map[string]int{"interrupted": 6}, real.Counts, "cancelled, not failed")
	require.Len(t, c.eventIDs("reason=self_intersection", 100), 6, "every record is still there")

	c.post("/api/jobs", JobRequest{Action: "replay", DryRun: true, Repairs: []string{"make-valid"}, Filter: sel}, http.StatusAccepted, &dry)
	dry = c.waitJob(dry.ID)
	require.Equal(t, map[string]int{"would_repair": 6}, dry.Counts, "nothing was left leased")
}
