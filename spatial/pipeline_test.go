//go:build cgo

package spatial_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/replay"
)

const topic = "spatial.events"

// TestCorpusThroughPipeline pushes every corpus event through a processor
// whose handler is the checker, then replays with the spatial repairs: the
// envelope records the checker's verdict, the payload restores byte for
// byte, and repaired events pass the check and run their side effect once.
func TestCorpusThroughPipeline(t *testing.T) {
	ctx := context.Background()
	c := newChecker(t, nil)
	off, err := offload.New(offload.NewMemStore(), &offload.Options{BaseURI: "mem://dlq-geom"})
	require.NoError(t, err)
	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off, ResolveEPSG: c.ResolveEPSG})
	require.NoError(t, err)
	b := memory.New(nil)
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: b, Builder: builder,
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }})
	require.NoError(t, err)
	claims := replay.NewMemClaims(nil)
	effects := map[string]int{}
	handler := func(ctx context.Context, m *broker.Message) error {
		if _, err := c.CheckEvent(m.Body); err != nil {
			return err
		}
		_, err := replay.Once(ctx, claims, m.Header(broker.HeaderIdempotencyKey), time.Minute, func(context.Context) error {
			effects[m.Header(broker.HeaderEventID)+"|"+m.Header(broker.HeaderIdempotencyKey)]++
			return nil
		})
		return err
	}
	consume := func() {
		for {
			recs, err := b.Fetch(ctx, topic, broker.Filter{}, 16)
			require.NoError(t, err)
			if len(recs) == 0 {
				return
			}
			for _, r := range recs {
				m := r.Message
				m.Source = &envelope.Source{System: "memory", Topic: topic, MessageID: r.ID}
				out, err := proc.Process(ctx, m, handler)
				require.NoError(t, err)
				require.True(t, out.Ack)
				require.NoError(t, b.Ack(ctx, r))
			}
		}
	}

	items := corpus.All()
	byKey := map[string]corpus.Item{}
	for _, it := range items {
		key := replay.NewKey("corpus", []byte(it.Name))
		byKey[key] = it
		require.NoError(t, b.Publish(ctx, topic, &broker.Message{Body: it.Payload,
			Headers: map[string]string{broker.HeaderIdempotencyKey: key}}))
	}
	consume()

	var poison []*envelope.Envelope
	for _, m := range memory.Messages(b, topic+".poison.dlt") {
		env, err := envelope.Decode(m.Body)
		require.NoError(t, err)
		poison = append(poison, env)
	}
	require.Zero(t, memory.Len(b, topic+".retry.dlt"), "no corpus failure is replayable: nothing loops")
	invalid := 0
	for _, it := range items {
		if !it.Valid() {
			invalid++
		}
	}
	require.Len(t, poison, invalid, "every invalid corpus event is dead-lettered, once")
	for _, env := range poison {
		it, ok := byKey[env.IdempotencyKey]
		require.True(t, ok, "key %q verbatim", env.IdempotencyKey)
		require.Equal(t, it.Class, env.FailureClass, it.Name)
		require.Equal(t, it.Stage, env.FailedStage, it.Name)
		require.Equal(t, classify.RoutePoison, env.Route)
		if it.Reason != "" {
			require.Equal(t, it.Reason, env.GeometryError.Reason, it.Name)
		}
		if it.Kind != "" {
			require.Equal(t, string(it.Kind), env.GeometryError.Kind, it.Name)
		}
		if it.Location != nil {
			require.Equal(t, []float64{it.Location[0], it.Location[1]}, env.GeometryError.Location, it.Name)
		}
		if it.Fault != nil {
			require.Equal(t, it.Fault, env.GeometryError.Fault, it.Name)
		}
		if it.Class == classify.ClassCRSMismatch {
			require.NotNil(t, env.GeometryError.EPSG, it.Name)
			require.Equal(t, it.EPSG, *env.GeometryError.EPSG, it.Name)
		}
		restored, err := env.Restore(ctx, off)
		require.NoError(t, err)
		require.Equal(t, it.Payload, restored, "%s restores byte for byte", it.Name)
	}

	repairers, err := c.Repairers(nil)
	require.NoError(t, err)
	r, err := replay.New(&replay.Options{Source: b, Target: b, Fetcher: off, Repairers: repairers, Check: c.ReplayCheck()})
	require.NoError(t, err)
	dry, err := r.Run(ctx, replay.Request{Destination: topic + ".poison.dlt", DryRun: true})
	require.NoError(t, err)
	require.Equal(t, len(poison), dry.Examined)
	rep, err := r.Run(ctx, replay.Request{Destination: topic + ".poison.dlt"})
	require.NoError(t, err)
	require.Equal(t, dry.Counts[replay.OutcomeWouldRepair], rep.Counts[replay.OutcomeRepaired], "the dry run predicted the real run")
	require.Positive(t, rep.Counts[replay.OutcomeRepaired])
	repaired := map[string]string{}
	for _, it := range rep.Items {
		if it.Outcome == replay.OutcomeRepaired {
			repaired[byKey[it.IdempotencyKey].Name] = it.Repair.Method
		}
		if byKey[it.IdempotencyKey].Class == classify.ClassSchemaViolation {
			require.Equal(t, replay.OutcomeSkipped, it.Outcome, "schema violations are never replayed")
		}
	}
	require.Equal(t, "make_valid", repaired["bowtie"])
	require.Equal(t, "reproject", repaired["epsg_3857_declared"])
	require.NotContains(t, repaired, "webmercator_labelled_4326", "a wrong label is not guessed at")

	consume()
	require.Zero(t, memory.Len(b, topic+".retry.dlt"))
	for name := range repaired {
		n := 0
		for k, v := range effects {
			if byKey[k[len(k)-len(replay.NewKey("corpus", []byte(name))):]].Name == name {
				n += v
			}
		}
		require.Equal(t, 1, n, "repaired %s ran its side effect once", name)
	}
	// Replaying again re-injects nothing new.
	rep2, err := r.Run(ctx, replay.Request{Destination: topic + ".poison.dlt"})
	require.NoError(t, err)
	require.Zero(t, rep2.Acked())
}

func TestReprojectRepairRewritesOnlyGeometryAndCRS(t *testing.T) {
	c := newChecker(t, nil)
	rs, err := c.Repairers(nil)
	require.NoError(t, err)
	payload := []byte(`{ "event_id" : "e", "crs" : "EPSG:3857", "props": {"a": 1.0},  "geometry": {"type":"Point","coordinates":[1113194.9079327357,6446275.841017158]} }`)
	epsg := 3857
	env := &envelope.Envelope{FailureClass: classify.ClassCRSMismatch, GeometryError: &envelope.GeometryError{EPSG: &epsg}}
	out, rp, err := rs[classify.ClassCRSMismatch].Repair(context.Background(), env, payload)
	require.NoError(t, err)
	require.Equal(t, "reproject", rp.Method)
	require.Equal(t, "EPSG:3857->EPSG:4326", rp.Detail)
	require.Regexp(t, `^\{ "event_id" : "e", "crs" : "EPSG:4326", "props": \{"a": 1.0\},  "geometry": \{"type":"Point","coordinates":\[(10|9\.9{8,}\d*|10\.0{8,}\d*),(50|49\.9{8,}\d*|50\.0{8,}\d*)\]\} \}$`, string(out))
	_, err = c.CheckEvent(out)
	require.NoError(t, err)

	// Unknown EPSG and wrong labels are not repairable.
	zero := 0
	_, _, err = rs[classify.ClassCRSMismatch].Repair(context.Background(), &envelope.Envelope{GeometryError: &envelope.GeometryError{EPSG: &zero}}, payload)
	require.ErrorIs(t, err, replay.ErrNotRepairable)
	four := 4326
	_, _, err = rs[classify.ClassCRSMismatch].Repair(context.Background(), &envelope.Envelope{GeometryError: &envelope.GeometryError{EPSG: &four}}, payload)
	require.ErrorIs(t, err, replay.ErrNotRepairable)
	_, _, err = rs[classify.ClassInvalidGeometry].Repair(context.Background(), env, []byte(`{"geometry":{"type":"Point","coordinates":[1,2]}}`))
	require.ErrorIs(t, err, replay.ErrNotRepairable, "a valid geometry is not 'repaired'")
	_, _, err = rs[classify.ClassInvalidGeometry].Repair(context.Background(), env, []byte(`not json`))
	require.True(t, errors.Is(err, replay.ErrNotRepairable))
}

// BenchmarkBuildEnvelope is the consumer's whole failure path for a small
// invalid polygon: the GEOS check, then the envelope build and encoding.
func BenchmarkBuildEnvelope(b *testing.B) {
	ctx := context.Background()
	c := newChecker(b, nil)
	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{ResolveEPSG: c.ResolveEPSG})
	require.NoError(b, err)
	payload := []byte(`{"event_id":"evt-9","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`)
	first := time.Now()
	src := &envelope.Source{System: "kafka", Topic: "spatial.events"}
	b.ReportAllocs()
	for b.Loop() {
		_, cerr := c.CheckEvent(payload)
		if cerr == nil {
			b.Fatal("bowtie passed")
		}
		_, body, err := builder.Build(ctx, envelope.Input{Payload: payload, IdempotencyKey: "idem:v1:abc", Err: cerr,
			Attempts: 1, FirstSeenAt: first, Source: src})
		if err != nil || len(body) == 0 {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "envelopes/s")
}
