package replay_test

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
	"github.com/geodlq/geodlq/replay"
)

func TestReplayTelemetry(t *testing.T) {
	ctx := context.Background()
	b := memory.New(nil)
	p := newPipeline(t, b, nil)
	p.fail = func(m *broker.Message) error {
		if string(m.Body) == string(schema) {
			return classify.SchemaViolation(errors.New("bad"))
		}
		return classify.Transient(errors.New("503"))
	}
	seed(t, b, "idem:v1:t1", flaky)
	seed(t, b, "idem:v1:t2", schema)
	p.drain()

	reader := sdkmetric.NewManualReader()
	rec := tracetest.NewSpanRecorder()
	r, err := replay.New(&replay.Options{Source: b, Target: b,
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	require.NoError(t, err)
	for _, d := range []string{topic + ".retry.dlt", topic + ".poison.dlt"} {
		_, err := r.Run(ctx, replay.Request{Destination: d})
		require.NoError(t, err)
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "geodlq.replay.outcomes" {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					o, _ := dp.Attributes.Value(attribute.Key("outcome"))
					c, _ := dp.Attributes.Value(attribute.Key("class"))
					got[o.AsString()+"/"+c.AsString()] += dp.Value
				}
			}
		}
	}
	require.Equal(t, map[string]int64{"replayed/transient": 1, "skipped/schema_violation": 1}, got)
	spans := map[string]int{}
	for _, s := range rec.Ended() {
		spans[s.Name()]++
	}
	require.Equal(t, map[string]int{"geodlq.replay.run": 2, "geodlq.replay.record": 2}, spans)
}
