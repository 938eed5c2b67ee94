//go:build cgo

package spatial_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/geodlq/geodlq/spatial"
)

func TestCheckEventContextTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	rec := tracetest.NewSpanRecorder()
	c, err := spatial.NewChecker(&spatial.Options{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
	})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	_, err = c.CheckEventContext(ctx, []byte(`{"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`))
	require.Error(t, err)
	_, err = c.CheckEventContext(ctx, []byte(`{"geometry":{"type":"Point","coordinates":[1,2]}}`))
	require.NoError(t, err)

	spans := rec.Ended()
	require.Len(t, spans, 2)
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range spans[0].Attributes() {
		attrs[kv.Key] = kv.Value
	}
	require.Equal(t, "geodlq.check", spans[0].Name())
	require.Equal(t, "invalid_geometry", attrs["geodlq.result"].AsString())
	require.Equal(t, "self_intersection", attrs["geodlq.reason_kind"].AsString())
	require.Equal(t, "topology_validation", attrs["geodlq.stage"].AsString())

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value("result")
				got[m.Name+"/"+v.AsString()] += dp.Value
			}
		}
	}
	require.Equal(t, map[string]int64{"geodlq.checks/invalid_geometry": 1, "geodlq.checks/ok": 1}, got)
}
