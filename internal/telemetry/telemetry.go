// Package telemetry holds geodlq's OpenTelemetry instruments, shared by the
// processor, the replayer and the spatial checker. It depends only on the
// OpenTelemetry API; a nil provider means no-op instruments, so nothing is
// recorded unless the user passes a MeterProvider or TracerProvider.
//
// Label values are bounded: classes, stages, reason kinds, destinations
// ("retry"/"poison") and outcomes — never raw reasons, event ids or keys.
package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every geodlq meter and tracer.
const ScopeName = "github.com/geodlq/geodlq"

// Instruments are the metrics geodlq records.
type Instruments struct {
	Tracer trace.Tracer
	// DeadLettered counts envelopes written, by class, stage, reason kind
	// and destination kind.
	DeadLettered metric.Int64Counter
	// WriteFailures counts failed dead-letter writes (source left unacked).
	WriteFailures metric.Int64Counter
	// Retries counts in-place retries, by class.
	Retries metric.Int64Counter
	// Processed counts messages by result: ok, dead_lettered, not_acked.
	Processed metric.Int64Counter
	// OffloadedBytes counts bytes offloaded to object storage, by kind
	// (geometry, payload).
	OffloadedBytes metric.Int64Counter
	// ReplayOutcomes counts replayed records by outcome and class.
	ReplayOutcomes metric.Int64Counter
	// Checks counts spatial checks by result class ("ok" when valid).
	Checks metric.Int64Counter
}

// New creates the instruments from the providers; nil providers give no-op
// instruments.
func New(mp metric.MeterProvider, tp trace.TracerProvider) *Instruments {
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	m := mp.Meter(ScopeName)
	i := &Instruments{Tracer: tp.Tracer(ScopeName)}
	// Instrument creation only fails for invalid names; ours are constants.
	i.DeadLettered, _ = m.Int64Counter("geodlq.dead_lettered", metric.WithDescription("Events written to a dead-letter destination."), metric.WithUnit("{event}"))
	i.WriteFailures, _ = m.Int64Counter("geodlq.dead_letter.write_failures", metric.WithDescription("Dead-letter writes that failed; the source message was left unacknowledged."), metric.WithUnit("{event}"))
	i.Retries, _ = m.Int64Counter("geodlq.retries", metric.WithDescription("In-place retries of failed events."), metric.WithUnit("{attempt}"))
	i.Processed, _ = m.Int64Counter("geodlq.processed", metric.WithDescription("Messages handled by the processor, by result."), metric.WithUnit("{message}"))
	i.OffloadedBytes, _ = m.Int64Counter("geodlq.offloaded.bytes", metric.WithDescription("Bytes offloaded to object storage."), metric.WithUnit("By"))
	i.ReplayOutcomes, _ = m.Int64Counter("geodlq.replay.outcomes", metric.WithDescription("Dead-letter records examined by replay, by outcome."), metric.WithUnit("{record}"))
	i.Checks, _ = m.Int64Counter("geodlq.checks", metric.WithDescription("Spatial checks, by result class."), metric.WithUnit("{event}"))
	return i
}

// Start starts a span named name with attrs.
func (i *Instruments) Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return i.Tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// End ends span, recording err (if any) as its status.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
