package console

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
)

// run starts a dry run of req, waits for it, then confirms it (with the
// same choices and rate) unless confirm is false.
func (e *env) run(req JobRequest, confirm bool) (dry, real Job) {
	e.t.Helper()
	req.DryRun = true
	e.post("/api/jobs", req, http.StatusAccepted, &dry)
	dry = e.waitJob(dry.ID)
	require.Equal(e.t, "done", dry.State, dry.Error)
	if !confirm {
		return dry, Job{}
	}
	req.DryRun, req.Records, req.Filter, req.Confirm = false, nil, nil, dry.ID
	e.post("/api/jobs", req, http.StatusAccepted, &real)
	real = e.waitJob(real.ID)
	require.Equal(e.t, "done", real.State, real.Error)
	return dry, real
}

// TestReplayControls: the console's replay has the command's controls —
// repairs chained (reproject, then MakeValid), a class replayed
// unchanged without the check, a route, a rate, a target — and every
// record it leaves says why, the ones to look at first; a discard's dry
// run names the events.
func TestReplayControls(t *testing.T) {
	events := []string{chukotka3857()}
	for _, f := range fixtureEvents() {
		events = append(events, f.payload)
	}
	e := newEnv(t, sqliteKind(), envOptions{events: events})
	var cfg configAnswer
	e.get("/api/config", http.StatusOK, &cfg)
	require.Equal(t, []string{"make-valid", "reproject", "reproject+make-valid"}, cfg.Repairs)
	require.Equal(t, []string{"invalid_geometry", "crs_mismatch"}, cfg.Unchanged)
	require.Equal(t, []targetInfo{{ID: "0", Label: "sqlite://target.db", Default: true}, {ID: "store", Label: e.srv.opts.Label, Store: true}}, cfg.Targets)

	for _, bad := range []JobRequest{
		{Action: "replay", DryRun: true, Repairs: []string{"reproject", "reproject+make-valid"}, Records: []RecordRef{{dlt, "1"}}},
		{Action: "replay", DryRun: true, Repairs: []string{"make-valid"}, Unchanged: []string{"invalid_geometry"}, Records: []RecordRef{{dlt, "1"}}},
		{Action: "replay", DryRun: true, Unchanged: []string{"schema_violation"}, Records: []RecordRef{{dlt, "1"}}},
		{Action: "replay", DryRun: true, Target: "7", Records: []RecordRef{{dlt, "1"}}},
		{Action: "replay", DryRun: true, Route: "no\x00pe", Records: []RecordRef{{dlt, "1"}}},
		{Action: "replay", DryRun: true, Rate: -1, Records: []RecordRef{{dlt, "1"}}},
		{Action: "discard", DryRun: true, Route: "x", Records: []RecordRef{{dlt, "1"}}},
	} {
		e.post("/api/jobs", bad, http.StatusBadRequest, nil)
	}

	// Reproject alone leaves Chukotka invalid, and says what would help;
	// the chain repairs it.
	chuk := e.recordOf("evt-chukotka")
	dry, _ := e.run(JobRequest{Action: "replay", Repairs: []string{"reproject"}, Records: []RecordRef{chuk}}, false)
	require.Equal(t, map[string]int{"would_fail": 1}, dry.Counts)
	require.Contains(t, dry.Items[0].Why, "after reproject:EPSG:3857->EPSG:4326 it still fails the consumer's check: invalid geometry: Self-intersection")
	require.Contains(t, dry.Items[0].Why, "the reproject+make-valid repair also makes it valid")
	dry, real := e.run(JobRequest{Action: "replay", Repairs: []string{"reproject+make-valid"}, Route: "parcels.fixed", Records: []RecordRef{chuk}}, true)
	require.Equal(t, map[string]int{"would_repair": 1}, dry.Counts)
	require.Equal(t, "parcels.fixed", dry.Route)
	require.Equal(t, map[string]int{"repaired": 1}, real.Counts)
	require.Equal(t, "parcels.fixed", real.Items[0].Target)
	require.Contains(t, real.Items[0].Repair, "reproject+make_valid")
	recs, err := e.target.Fetch(context.Background(), "parcels.fixed", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "true", recs[0].Message.Header(broker.HeaderRepaired))

	// A bowtie replayed unchanged: with the check it would fail (and the
	// reason names the control), without it, re-injected as it was.
	bow := e.recordOf("evt-bowtie")
	dry, _ = e.run(JobRequest{Action: "replay", Unchanged: []string{"invalid_geometry"}, Records: []RecordRef{bow}}, false)
	require.Equal(t, map[string]int{"would_fail": 1}, dry.Counts)
	require.Equal(t, `fails the consumer's check as it is: invalid geometry: Self-intersection[10.5 10.5]; "skip the consumer's check" re-injects it anyway`,
		dry.Items[0].Why)
	req := JobRequest{Action: "replay", Unchanged: []string{"invalid_geometry"}, NoCheck: true, Records: []RecordRef{bow}}
	dry, _ = e.run(req, false)
	req.Route = "elsewhere"
	req.DryRun, req.Records, req.Confirm = false, nil, dry.ID
	e.post("/api/jobs", req, http.StatusConflict, nil) // other choices than its dry run's
	req.Route, req.Rate = "", 1000
	e.post("/api/jobs", req, http.StatusAccepted, &real)
	real = e.waitJob(real.ID)
	require.Equal(t, map[string]int{"replayed": 1}, real.Counts)
	require.Empty(t, real.Items[0].Repair)
	recs, err = e.target.Fetch(context.Background(), topic, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Contains(t, string(recs[0].Message.Body), bowtieAt(10, 10), "re-injected unchanged")
	require.Empty(t, recs[0].Message.Header(broker.HeaderRepaired))

	// A filter: the records that need a look come first, each with why.
	dry, _ = e.run(JobRequest{Action: "replay", Repairs: []string{"make-valid"}, Filter: &Query{Classes: []string{"invalid_geometry", "crs_mismatch"}}}, false)
	require.Equal(t, &Query{Classes: []string{"invalid_geometry", "crs_mismatch"}}, dry.Filter, "the job restates its filter")
	look := dry.Counts["would_fail"] + dry.Counts["skipped"]
	require.Equal(t, 1, dry.Counts["would_fail"], "NaN: %v", dry.Counts)
	require.Equal(t, 2, dry.Counts["skipped"], "3857 and metres as degrees: %v", dry.Counts)
	for i, it := range dry.Items {
		require.Equal(t, i < look, it.Outcome != "would_repair", "item %d: %+v", i, it)
		if i < look {
			require.NotEmpty(t, it.Why, "%+v", it)
		}
	}
	require.Contains(t, dry.Items[0].Why+dry.Items[1].Why+dry.Items[2].Why, "no repair was given for crs_mismatch: the reproject repair")

	// A rate: three re-injections at two a second take a second at least.
	var refs []RecordRef
	for _, id := range []string{"evt-eu-1", "evt-eu-2", "evt-eu-3"} {
		refs = append(refs, e.recordOf(id))
	}
	dry, _ = e.run(JobRequest{Action: "replay", Repairs: []string{"make-valid"}, Records: refs}, false)
	t0 := time.Now()
	e.post("/api/jobs", JobRequest{Action: "replay", Repairs: []string{"make-valid"}, Rate: 2, Confirm: dry.ID}, http.StatusAccepted, &real)
	real = e.waitJob(real.ID)
	require.Equal(t, map[string]int{"repaired": 3}, real.Counts)
	require.Equal(t, 2.0, real.Rate)
	require.GreaterOrEqual(t, time.Since(t0), time.Second, "three at two a second")

	// A discard's dry run names the events.
	nan := e.recordOf("evt-nan")
	dry, _ = e.run(JobRequest{Action: "discard", Records: []RecordRef{nan}}, false)
	require.Equal(t, "evt-nan", dry.Items[0].EventID)
	require.Equal(t, 1, dry.Records)
	require.True(t, strings.HasPrefix(dry.Items[0].Outcome, "would_discard"))
}
