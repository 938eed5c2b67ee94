package replaying

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/native"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/spatial"
)

// chukotka is a polygon around Chukotka in Web Mercator metres, wrapped
// at the antimeridian as producers write it: reprojected to EPSG:4326 it
// crosses ±180° and GEOS finds it self-intersecting.
func chukotka() []byte {
	pts := [][2]float64{{172, 64.5}, {178, 64.2}, {-178, 64.6}, {-172.5, 64.4}, {-170, 65.8}, {-172, 67}, {-176, 67.8},
		{-179.5, 69.8}, {176, 69.9}, {172, 69.5}, {170, 68}, {172, 64.5}}
	var b strings.Builder
	b.WriteString(`{"event_id":"evt-chukotka","crs":"EPSG:3857","geometry":{"type":"Polygon","coordinates":[[`)
	for i, p := range pts {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "[%.2f,%.2f]", p[0]*20037508.342789244/180, math.Log(math.Tan((90+p[1])*math.Pi/360))*20037508.342789244/math.Pi)
	}
	b.WriteString(`]]}}`)
	return []byte(b.String())
}

const bowtie = `{"event_id":"evt-bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`

func checker(t *testing.T) *spatial.Checker {
	t.Helper()
	c, err := native.NewChecker(nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c.Checker
}

func TestRepairers(t *testing.T) {
	c := checker(t)
	for _, tc := range []struct {
		names     []string
		unchanged []classify.Class
		err       string
	}{
		{names: []string{MakeValid, Reproject}},
		{names: []string{ReprojectMakeValid, MakeValid}},
		{unchanged: []classify.Class{classify.ClassInvalidGeometry}, names: []string{Reproject}},
		{names: []string{Reproject, ReprojectMakeValid}, err: "both apply to crs_mismatch"},
		{names: []string{MakeValid}, unchanged: []classify.Class{classify.ClassInvalidGeometry}, err: "both apply to invalid_geometry"},
		{unchanged: []classify.Class{classify.ClassSchemaViolation}, err: "cannot be replayed unchanged"},
		{names: []string{"magic"}, err: `unknown repair "magic"`},
	} {
		_, err := Repairers(c, tc.names, tc.unchanged)
		if tc.err == "" {
			require.NoError(t, err, "%v %v", tc.names, tc.unchanged)
		} else {
			require.ErrorContains(t, err, tc.err, "%v %v", tc.names, tc.unchanged)
		}
	}
}

// TestChain: reproject alone leaves Chukotka self-intersecting (the
// replay would fail, and says why and what would help); chained with
// MakeValid it passes.
func TestChain(t *testing.T) {
	c := checker(t)
	ctx := context.Background()
	env := &envelope.Envelope{SourceEPSG: 3857, FailureClass: classify.ClassCRSMismatch}
	rs, err := Repairers(c, []string{Reproject}, nil)
	require.NoError(t, err)
	moved, rp, err := rs[classify.ClassCRSMismatch].Repair(ctx, env, chukotka())
	require.NoError(t, err)
	_, cerr := c.CheckEventContext(ctx, moved)
	require.ErrorContains(t, cerr, "Self-intersection")
	why := Why(replay.Item{Class: classify.ClassCRSMismatch, Outcome: replay.OutcomeWouldFail, Repair: &rp, Err: cerr}, CLIHints)
	require.Equal(t, "after reproject:EPSG:3857->EPSG:4326 it still fails the consumer's check: "+cerr.Error()+
		"; --repair reproject+make-valid also makes it valid", why)

	rs, err = Repairers(c, []string{ReprojectMakeValid}, nil)
	require.NoError(t, err)
	fixed, rp, err := rs[classify.ClassCRSMismatch].Repair(ctx, env, chukotka())
	require.NoError(t, err)
	require.Equal(t, "reproject+make_valid", rp.Method)
	require.True(t, strings.HasPrefix(rp.Detail, "EPSG:3857->EPSG:4326, "), rp.Detail)
	_, err = c.CheckEventContext(ctx, fixed)
	require.NoError(t, err)

	// A reprojection that is valid is not made valid.
	square := []byte(`{"crs":"EPSG:3857","geometry":{"type":"Polygon","coordinates":[[[0,0],[1000,0],[1000,1000],[0,1000],[0,0]]]}}`)
	_, rp, err = rs[classify.ClassCRSMismatch].Repair(ctx, env, square)
	require.NoError(t, err)
	require.Equal(t, "reproject", rp.Method)
}

// TestUnchanged replays an invalid geometry as it is through the real
// replayer: reported replayed (not repaired), re-injected without the
// repair headers; with the check on, it would fail and says how to skip
// the check.
func TestUnchanged(t *testing.T) {
	c := checker(t)
	ctx := context.Background()
	store := memory.New(nil)
	defer store.Close()
	b, err := envelope.NewBuilder(nil)
	require.NoError(t, err)
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: store, Builder: b, Policy: classify.Policy{MaxAttempts: 1}})
	require.NoError(t, err)
	for range 2 {
		_, err = proc.Process(ctx, &broker.Message{Body: []byte(bowtie), Source: &envelope.Source{System: "memory", Topic: "parcels"}},
			func(ctx context.Context, m *broker.Message) error {
				_, err := c.CheckEventContext(ctx, m.Body)
				return err
			})
		require.NoError(t, err)
	}
	dests, err := store.Destinations(ctx)
	require.NoError(t, err)
	require.Len(t, dests, 1)
	rs, err := Repairers(c, nil, []classify.Class{classify.ClassInvalidGeometry})
	require.NoError(t, err)

	withCheck, err := replay.New(&replay.Options{Source: store, Target: &Target{Publisher: store}, Repairers: rs, Check: c.ReplayCheck(),
		Route: Route("", "", "--target URL")})
	require.NoError(t, err)
	rep, err := withCheck.Run(ctx, replay.Request{Destination: dests[0], DryRun: true})
	require.NoError(t, err)
	require.Len(t, rep.Items, 2)
	it := rep.Items[0]
	require.Equal(t, replay.OutcomeWouldFail, it.Outcome)
	require.Equal(t, "fails the consumer's check as it is: invalid geometry: Self-intersection[0.5 0.5]; --no-check re-injects it anyway", Why(it, CLIHints))

	published := 0
	noCheck, err := replay.New(&replay.Options{Source: store, Target: &Target{Publisher: store, OnPublish: func() { published++ }}, Repairers: rs,
		Route: Route("", "", "--target URL")})
	require.NoError(t, err)
	rep, err = noCheck.Run(ctx, replay.Request{Destination: dests[0]})
	require.NoError(t, err)
	for _, it := range rep.Items {
		require.Empty(t, Why(it, CLIHints))
		Normalize(&it)
		require.Equal(t, replay.OutcomeReplayed, it.Outcome)
		require.Nil(t, it.Repair)
	}
	require.Equal(t, 2, published)
	recs, err := store.Fetch(ctx, "parcels", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	for _, r := range recs {
		require.Equal(t, bowtie, string(r.Message.Body), "re-injected unchanged")
		require.Empty(t, r.Message.Header(broker.HeaderRepaired))
		require.Empty(t, r.Message.Header(broker.HeaderRepair))
		require.NotEmpty(t, r.Message.Header(broker.HeaderIdempotencyKey))
	}
}

func TestRoute(t *testing.T) {
	src := func(sys, topic string) *envelope.Envelope {
		return &envelope.Envelope{Source: &envelope.Source{System: sys, Topic: topic}}
	}
	for _, tc := range []struct {
		env          *envelope.Envelope
		topic, store string
		want, err    string
	}{
		{env: src("kafka", "spatial.events"), want: "spatial.events"},
		{env: src("kafka", "spatial.events"), topic: "elsewhere", want: "elsewhere"},
		{env: src("sqlite", "spatial.events"), store: "sqlite", want: "spatial.events"},
		{env: src("nats", "spatial.events"), store: "jetstream", want: "spatial.events"},
		{env: src("geodlq-check", "spatial.events"), store: "sqlite", err: `it came from "geodlq-check", and this store (sqlite) is not that broker: name where its consumer reads with --target URL`},
		{env: src("kafka", "spatial.events"), topic: "x", store: "postgis", err: "this store (postgis) is not that broker"},
		{env: &envelope.Envelope{}, store: "sqlite", err: "it came from an unknown system"},
		{env: &envelope.Envelope{}, err: "no source topic"},
	} {
		got, err := Route(tc.topic, tc.store, "--target URL")(tc.env)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			if tc.store != "" {
				require.ErrorIs(t, err, ErrForeignSource)
			}
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
	it := replay.Item{Outcome: replay.OutcomeNoRoute, Err: fmt.Errorf("x: %w", errNoTopic)}
	require.Contains(t, Why(it, CLIHints), "--route TOPIC")
}

func TestWhy(t *testing.T) {
	notRepairable := fmt.Errorf("spatial: MakeValid: invalid geometry: Invalid Coordinate[NaN 1]: %w", replay.ErrNotRepairable)
	for _, tc := range []struct {
		it   replay.Item
		want string
	}{
		{replay.Item{Outcome: replay.OutcomeRepaired}, ""},
		{replay.Item{Outcome: replay.OutcomeSkipped, Class: classify.ClassSchemaViolation}, "schema_violation is never replayed"},
		{replay.Item{Outcome: replay.OutcomeSkipped, Class: classify.ClassResourceExhausted}, "resource_exhausted is never replayed"},
		{replay.Item{Outcome: replay.OutcomeSkipped, Class: classify.ClassInvalidGeometry},
			"no repair was given for invalid_geometry: --repair make-valid repairs it (--unchanged invalid_geometry re-injects it as it is)"},
		{replay.Item{Outcome: replay.OutcomeSkipped, Class: classify.ClassCRSMismatch},
			"no repair was given for crs_mismatch: --repair reproject (or --repair reproject+make-valid) repairs it"},
		{replay.Item{Outcome: replay.OutcomeWouldFail, Class: classify.ClassInvalidGeometry, Err: notRepairable},
			"the repair cannot fix it: spatial: MakeValid: invalid geometry: Invalid Coordinate[NaN 1]"},
		{replay.Item{Outcome: replay.OutcomeStillFails, Class: classify.ClassTransient, Err: errors.New("invalid geometry: x")},
			"fails the consumer's check as it is: invalid geometry: x; --no-check re-injects it anyway"},
		{replay.Item{Outcome: replay.OutcomeRestoreFailed, Err: errors.New("blob missing")}, "its payload cannot be restored"},
	} {
		got := Why(tc.it, CLIHints)
		if tc.want == "" {
			require.Empty(t, got)
			continue
		}
		require.Contains(t, got, tc.want)
	}
}

// TestTargetPublishBatch: a batch goes out whole through the store's
// batched write, or one message at a time under a rate limit; either way
// in order, an unchanged replay's repair marks taken off, and OnPublish
// told about each message.
func TestTargetPublishBatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate float64
	}{{"batched", 0}, {"rate-limited", 1000}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := memory.New(nil)
			published := 0
			tg := &Target{Publisher: store, Limiter: NewLimiter(tc.rate), OnPublish: func() { published++ }}
			var ms []*broker.Message
			for i := range 3 {
				h := map[string]string{broker.HeaderIdempotencyKey: fmt.Sprintf("idem:v1:%d", i)}
				if i == 1 {
					h[broker.HeaderRepaired], h[broker.HeaderRepair] = "true", unchangedMethod
				}
				ms = append(ms, &broker.Message{Body: []byte(fmt.Sprint(i)), Headers: h})
			}
			require.NoError(t, tg.PublishBatch(ctx, "parcels", ms))
			require.Equal(t, 3, published)
			require.Equal(t, unchangedMethod, ms[1].Header(broker.HeaderRepair), "the caller's message is not changed")
			got := memory.Messages(store, "parcels")
			require.Len(t, got, 3)
			for i, m := range got {
				require.Equal(t, fmt.Sprint(i), string(m.Body), "in order")
				require.Empty(t, m.Header(broker.HeaderRepair))
				require.Empty(t, m.Header(broker.HeaderRepaired))
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			require.Error(t, tg.PublishBatch(cctx, "parcels", ms[:1]), "a cancelled context publishes nothing")
			require.Len(t, memory.Messages(store, "parcels"), 3)
		})
	}
}
