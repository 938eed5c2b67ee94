package triage_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/triage"
)

const topic = "vector-jobs"

var (
	bowtie = []byte(`{"source_uri":"s3://provider-a/tile-7.geojson","crs":"EPSG:4326","processing_mode":"vector","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}}`)
	huge   = []byte(`{"accuracy_m":NaN,"source_uri":"s3://provider-b/continent.geojson","crs":"EPSG:4326","geometry":{"type":"MultiPoint","coordinates":[[0,0],[1,1],[2,2]]}}`)
	broken = []byte(`{"source_uri":"s3://provider-c/x.geojson","geometry":`)
)

// deadLetter writes an envelope for body to the poison destination.
func deadLetter(t *testing.T, b *broker.Store, body []byte, err error) {
	t.Helper()
	builder, berr := envelope.NewBuilder(nil)
	require.NoError(t, berr)
	env, enc, berr := builder.Build(context.Background(), envelope.Input{Payload: body, Err: err, Attempts: 1,
		IdempotencyKey: replay.NewKey("triage-test", body), Source: &envelope.Source{System: "sqs", Topic: topic}})
	require.NoError(t, berr)
	require.NoError(t, b.Publish(context.Background(), topic+".poison.dlt", &broker.Message{Body: enc, Headers: broker.Headers(env)}))
}

type recorder struct {
	mu     sync.Mutex
	alerts []triage.Alert
	fail   bool
}

func (r *recorder) Alert(_ context.Context, a triage.Alert) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return errors.New("pager down")
	}
	r.alerts = append(r.alerts, a)
	return nil
}

var fixedBowtie = []byte(`{"source_uri":"s3://provider-a/tile-7.geojson","crs":"EPSG:4326","processing_mode":"vector","geometry":{"type":"MultiPolygon","coordinates":[]}}`)

func repairers() map[classify.Class]replay.Repairer {
	return map[classify.Class]replay.Repairer{
		classify.ClassInvalidGeometry: replay.RepairFunc(func(_ context.Context, _ *envelope.Envelope, p []byte) ([]byte, replay.Repair, error) {
			return fixedBowtie, replay.Repair{Method: "make_valid", Detail: "structure", VerticesBefore: 5, VerticesAfter: 8}, nil
		}),
	}
}

func TestTriageRoutesByClass(t *testing.T) {
	ctx := context.Background()
	b := memory.New(nil)
	deadLetter(t, b, bowtie, &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation,
		Err: errors.New("Self-intersection[0.5 0.5]"), Geometry: &classify.GeometryDetail{Reason: "Self-intersection[0.5 0.5]", Kind: classify.KindSelfIntersection}})
	deadLetter(t, b, huge, &classify.Error{Class: classify.ClassResourceExhausted, Stage: classify.StageParse,
		Err: errors.New("more than 1000000 positions"), Geometry: &classify.GeometryDetail{Kind: classify.KindVertexBudget, GeometryType: "MultiPoint", VertexCount: 3}})
	deadLetter(t, b, broken, classify.SchemaViolation(errors.New("unexpected end of JSON input")))

	rec := &recorder{}
	p, err := triage.New(&triage.Options{Source: b, Target: b, Repairers: repairers(), Alerter: rec,
		Check: func(context.Context, []byte) error { return nil }})
	require.NoError(t, err)

	dry, err := p.Run(ctx, topic+".poison.dlt", broker.Filter{}, true)
	require.NoError(t, err)
	require.Zero(t, dry.Quarantined, "a dry run moves nothing")
	require.Empty(t, rec.alerts, "and alerts nobody")
	require.Equal(t, 1, dry.Replay.Counts[replay.OutcomeWouldRepair])
	require.Equal(t, 3, memory.Len(b, topic+".poison.dlt"))

	rep, err := p.Run(ctx, topic+".poison.dlt", broker.Filter{}, false)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Quarantined)
	require.Equal(t, 1, rep.Replay.Counts[replay.OutcomeRepaired])
	require.Equal(t, 1, rep.Replay.Counts[replay.OutcomeSkipped], "schema violations are never replayed")

	// The quarantined envelope moved byte for byte, with an alert.
	q := memory.Messages(b, topic+".quarantine.dlt")
	require.Len(t, q, 1)
	env, err := envelope.Decode(q[0].Body)
	require.NoError(t, err)
	restored, err := env.Restore(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, huge, restored)
	require.Len(t, rec.alerts, 1)
	a := rec.alerts[0]
	require.Equal(t, "resource_exhausted", a.Class)
	require.Equal(t, "MultiPoint", a.GeometryType)
	require.Equal(t, 3, a.VertexCount)
	require.Equal(t, "s3://provider-b/continent.geojson", a.SourceURI, "the source of a payload that is not JSON (a NaN), read as the stores read it")
	require.Equal(t, topic+".quarantine.dlt", a.Quarantine)
	require.Equal(t, topic+".poison.dlt", q[0].Header(broker.HeaderQuarantinedFrom))

	// Triaging the quarantine destination (as "triage every destination"
	// does on the next run) leaves the quarantined record where it is.
	again, err := p.Run(ctx, topic+".quarantine.dlt", broker.Filter{}, false)
	require.NoError(t, err)
	require.Zero(t, again.Quarantined, "a quarantined record is never moved again")
	require.Len(t, memory.Messages(b, topic+".quarantine.dlt"), 1)
	require.Zero(t, memory.Len(b, topic+".quarantine.dlt.quarantine"))
	require.Len(t, rec.alerts, 1, "nor alerted again")

	// The repaired event was re-enqueued, tagged.
	re := memory.Messages(b, topic)
	require.Len(t, re, 1)
	require.Equal(t, fixedBowtie, re[0].Body)
	require.Equal(t, "true", re[0].Header(broker.HeaderRepaired))
	require.Equal(t, "make_valid:structure 5->8 vertices", re[0].Header(broker.HeaderRepair))

	// Only the schema violation is left.
	left := memory.Messages(b, topic+".poison.dlt")
	require.Len(t, left, 1)
	env, err = envelope.Decode(left[0].Body)
	require.NoError(t, err)
	require.Equal(t, classify.ClassSchemaViolation, env.FailureClass)
}

func TestRepairThatStillFailsIsNotReenqueued(t *testing.T) {
	b := memory.New(nil)
	deadLetter(t, b, bowtie, classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")))
	p, err := triage.New(&triage.Options{Source: b, Target: b, Repairers: repairers(), Alerter: &recorder{},
		Check: func(context.Context, []byte) error { return classify.InvalidGeometry(errors.New("still invalid")) }})
	require.NoError(t, err)
	rep, err := p.Run(context.Background(), topic+".poison.dlt", broker.Filter{}, false)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Replay.Counts[replay.OutcomeRepairFailed])
	require.Zero(t, memory.Len(b, topic), "re-enqueued only if now valid")
	require.Equal(t, 1, memory.Len(b, topic+".poison.dlt"))
}

func TestFailedAlertLeavesEventInPlace(t *testing.T) {
	b := memory.New(nil)
	deadLetter(t, b, huge, classify.ResourceExhausted(errors.New("too big")))
	p, err := triage.New(&triage.Options{Source: b, Target: b, Alerter: &recorder{fail: true}})
	require.NoError(t, err)
	rep, err := p.Run(context.Background(), topic+".poison.dlt", broker.Filter{}, false)
	require.NoError(t, err)
	require.Equal(t, 1, rep.QuarantineFailed)
	require.ErrorContains(t, rep.Errors[0], "pager down")
	require.Equal(t, 1, memory.Len(b, topic+".poison.dlt"), "nothing moved without an alert")
	require.Zero(t, memory.Len(b, topic+".quarantine.dlt"))
}

func TestWebhookAlerter(t *testing.T) {
	var got triage.Alert
	status := http.StatusAccepted
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
		body, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(body, &got))
		w.WriteHeader(status)
	}))
	defer srv.Close()
	al := triage.WebhookAlerter(srv.URL, nil)
	a := triage.Alert{EventID: "e1", Class: "resource_exhausted", VertexCount: 9, DeadLetteredAt: time.Unix(0, 0).UTC()}
	require.NoError(t, al.Alert(context.Background(), a))
	require.Equal(t, a, got)
	status = http.StatusInternalServerError
	require.ErrorContains(t, al.Alert(context.Background(), a), "500")
}

func TestDefaultQuarantine(t *testing.T) {
	require.Equal(t, "spatial.events.quarantine.dlt", triage.DefaultQuarantine("spatial.events.poison.dlt"))
	require.Equal(t, "dlq.quarantine", triage.DefaultQuarantine("dlq"))
	_, err := triage.New(&triage.Options{})
	require.Error(t, err)
}

// slowRecorder alerts slowly.
type slowRecorder struct {
	recorder
	delay time.Duration
}

func (r *slowRecorder) Alert(ctx context.Context, a triage.Alert) error {
	time.Sleep(r.delay)
	return r.recorder.Alert(ctx, a)
}

// TestConcurrentTriageMovesOnce: two triage runs at once, with a lease far
// shorter than a batch of slow alerts takes, move (and alert) each
// resource_exhausted record exactly once between them.
func TestConcurrentTriageMovesOnce(t *testing.T) {
	const n = 30
	b := memory.New(&memory.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 150 * time.Millisecond}})
	for i := range n {
		body := []byte(`{"source_uri":"s3://provider-b/continent.geojson","seq":` + string(rune('0'+i/10)) + string(rune('0'+i%10)) + `,"geometry":{"type":"Point","coordinates":[0,0]}}`)
		deadLetter(t, b, body, classify.ResourceExhausted(errors.New("too big")))
	}
	alerts := &slowRecorder{delay: 15 * time.Millisecond} // a batch takes three leases
	var wg sync.WaitGroup
	reps := make([]triage.Report, 2)
	for i := range reps {
		p, err := triage.New(&triage.Options{Source: memory.Reopen(b), Target: b, Alerter: alerts})
		require.NoError(t, err)
		wg.Go(func() {
			// The second starts once the first's leases would have
			// lapsed without renewals.
			time.Sleep(time.Duration(i) * 200 * time.Millisecond)
			var err error
			reps[i], err = p.Run(context.Background(), topic+".poison.dlt", broker.Filter{}, false)
			if err != nil {
				t.Errorf("triage %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	moved := map[string]int{}
	for _, m := range memory.Messages(b, topic+".quarantine.dlt") {
		moved[m.Header(broker.HeaderIdempotencyKey)]++
	}
	require.Len(t, moved, n, "every record moved (%+v | %+v)", reps[0], reps[1])
	for k, c := range moved {
		require.Equal(t, 1, c, "%s moved once", k)
	}
	alerted := map[string]int{}
	for _, a := range alerts.alerts {
		alerted[a.IdempotencyKey]++
	}
	for k, c := range alerted {
		require.Equal(t, 1, c, "%s alerted once", k)
	}
	require.Zero(t, memory.Len(b, topic+".poison.dlt"))
	require.Equal(t, n, reps[0].Quarantined+reps[1].Quarantined)
}
