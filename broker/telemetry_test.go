package broker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
)

func key(kv ...attribute.KeyValue) attribute.Distinct {
	s := attribute.NewSet(kv...)
	return s.Equivalent()
}

func counter(t *testing.T, rm metricdata.ResourceMetrics, name string) map[attribute.Distinct]int64 {
	t.Helper()
	out := map[attribute.Distinct]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok, "%s is an int64 sum", name)
			for _, dp := range sum.DataPoints {
				out[dp.Attributes.Equivalent()] += dp.Value
			}
		}
	}
	return out
}

func TestTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	p, _ := newProcessor(t, memory.New(nil), broker.ProcessorOptions{MeterProvider: mp, TracerProvider: tp, Policy: classify.Policy{MaxAttempts: 3}})

	ctx := context.Background()
	calls := 0
	_, err := p.Process(ctx, &broker.Message{Body: bowtie, Source: source("t")}, func(context.Context, *broker.Message) error {
		calls++
		if calls < 2 {
			return classify.Transient(errors.New("503"))
		}
		return &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation,
			Geometry: &classify.GeometryDetail{Reason: "Self-intersection[0.5 0.5]", Kind: classify.KindSelfIntersection}}
	})
	require.NoError(t, err)
	_, err = p.Process(ctx, &broker.Message{Body: bowtie, Source: source("t")}, func(context.Context, *broker.Message) error { return nil })
	require.NoError(t, err)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	dl := counter(t, rm, "geodlq.dead_lettered")
	want := attribute.NewSet(attribute.String("class", "invalid_geometry"), attribute.String("stage", "topology_validation"),
		attribute.String("reason_kind", "self_intersection"), attribute.String("route", "poison"))
	require.Equal(t, map[attribute.Distinct]int64{want.Equivalent(): 1}, dl, "bounded labels only")
	require.Equal(t, map[attribute.Distinct]int64{key(attribute.String("class", "transient")): 1}, counter(t, rm, "geodlq.retries"))
	processed := counter(t, rm, "geodlq.processed")
	require.EqualValues(t, 1, processed[key(attribute.String("result", "dead_lettered"))])
	require.EqualValues(t, 1, processed[key(attribute.String("result", "ok"))])

	names := map[string]int{}
	for _, s := range rec.Ended() {
		names[s.Name()]++
	}
	require.Equal(t, map[string]int{"geodlq.process": 2, "geodlq.handle": 3, "geodlq.envelope.build": 1, "geodlq.dead_letter.publish": 1}, names)
}
