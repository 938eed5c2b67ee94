package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/idemkey"
	"github.com/geodlq/geodlq/internal/telemetry"
)

// Handler processes one message. It returns nil on success, or an error —
// ideally marked with a class (see package classify) and a stage — on
// failure. The message's idempotency key is in
// m.Header(HeaderIdempotencyKey); a handler with side effects should claim
// it first (see replay.Once).
type Handler func(ctx context.Context, m *Message) error

// ProcessorOptions configures a [Processor].
type ProcessorOptions struct {
	// Publisher receives the dead-letter envelopes. Required. If it
	// implements [Limiter], envelopes are kept under its limit.
	Publisher Publisher
	// Builder builds envelopes. Nil means envelope.NewBuilder(nil): no
	// offloading, default geometry path.
	Builder *envelope.Builder
	// Policy is the retry policy. The zero value retries 5 attempts with
	// 500 ms base and 30 s cap.
	Policy classify.Policy
	// Destination names the dead-letter destination for a message. Nil
	// means [DefaultDestination].
	Destination func(m *Message, r classify.Route) string
	// IdempotencyKey returns the key assigned to the message at ingestion,
	// or "" when it carries none. A non-empty result is used verbatim and
	// recorded as assigned (idempotency_key_derived false, unless it is
	// the idempotency-key header of a message that says its key was
	// derived). Nil, or an empty result, means [IdempotencyKeyOf] with the
	// Builder: the idempotency-key header, else the event's own key in
	// the body, else a key derived once from the source and the exact
	// body, recorded as derived.
	IdempotencyKey func(m *Message) string
	// Sleep waits between in-place retries. Nil sleeps on a timer and
	// returns ctx.Err() if ctx ends first.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// Logger receives one record per dead-lettered event and per failed
	// dead-letter write, with the event id and idempotency key. Nil
	// discards.
	Logger *slog.Logger
	// MeterProvider records the metrics geodlq.processed,
	// geodlq.dead_lettered (by class, stage, reason kind, destination),
	// geodlq.dead_letter.write_failures, geodlq.retries and
	// geodlq.offloaded.bytes. Nil records nothing; pass
	// otel.GetMeterProvider() for the global one.
	MeterProvider metric.MeterProvider
	// TracerProvider traces geodlq.process (per message), geodlq.handle
	// (per attempt), geodlq.envelope.build (including offload) and
	// geodlq.dead_letter.publish. Nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Processor runs handlers with in-place retries and dead-letters what
// cannot be processed. It is safe for concurrent use.
type Processor struct {
	pub     Publisher
	builder *envelope.Builder
	policy  classify.Policy
	dest    func(*Message, classify.Route) string
	key     func(*Message) string
	sleep   func(context.Context, time.Duration) error
	now     func() time.Time
	log     *slog.Logger
	tel     *telemetry.Instruments
}

// NewProcessor returns a processor. It fails if opts or opts.Publisher
// is nil; opts is copied, so changing it afterwards changes nothing.
func NewProcessor(opts *ProcessorOptions) (*Processor, error) {
	var o ProcessorOptions
	if opts != nil {
		o = *opts
	}
	if o.Publisher == nil {
		return nil, errors.New("broker: ProcessorOptions.Publisher is required")
	}
	p := &Processor{
		pub:     o.Publisher,
		builder: o.Builder,
		policy:  o.Policy,
		dest:    o.Destination,
		key:     o.IdempotencyKey,
		sleep:   o.Sleep,
		now:     o.Now,
		log:     o.Logger,
		tel:     telemetry.New(o.MeterProvider, o.TracerProvider),
	}
	if p.builder == nil {
		b, err := envelope.NewBuilder(nil)
		if err != nil {
			return nil, fmt.Errorf("broker: default envelope builder: %w", err)
		}
		p.builder = b
	}
	if p.dest == nil {
		p.dest = DefaultDestination
	}
	if p.sleep == nil {
		p.sleep = sleepCtx
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// DefaultDestination names dead-letter destinations after the source topic,
// as Kafka's *.DLT convention does: "<topic>.retry.dlt" and
// "<topic>.poison.dlt", or "geodlq.retry.dlt" / "geodlq.poison.dlt" when
// the message has no source topic.
func DefaultDestination(m *Message, r classify.Route) string {
	topic := "geodlq"
	if m != nil && m.Source != nil && m.Source.Topic != "" {
		topic = m.Source.Topic
	}
	return topic + "." + r.String() + ".dlt"
}

// IdempotencyKeyOf returns m's idempotency key, and whether it was derived
// rather than assigned by the event's producer, by the rule every geodlq
// path applies (consumers, the CLI's check, ingress gates):
//
//  1. the idempotency-key header, verbatim: a key given with the message
//     wins. It counts as derived only when the
//     [HeaderIdempotencyKeyDerived] header is "true" (an ingress derived
//     it, or a replay re-injects a derived key);
//  2. else the event's own key, read from the body by b
//     ([envelope.Builder.IdempotencyKeyOf]: by default a top-level
//     idempotency_key member); nil b reads the default member;
//  3. else [DeriveIdempotencyKey], derived.
func IdempotencyKeyOf(m *Message, b *envelope.Builder) (key string, derived bool) {
	if k := m.Header(HeaderIdempotencyKey); k != "" {
		return k, m.Header(HeaderIdempotencyKeyDerived) == "true"
	}
	if b == nil {
		b = defaultBuilder()
	}
	if k := b.IdempotencyKeyOf(m.Body); k != "" {
		return k, false
	}
	return DeriveIdempotencyKey(m), true
}

// DeriveIdempotencyKey derives a key for a message that carries none, from
// its source system and topic and its exact body bytes ("idem:v1:<hex>"):
// identical payloads on the same topic share a key, and every redelivery
// of a message gets the same one.
func DeriveIdempotencyKey(m *Message) string {
	var system, topic string
	if m.Source != nil {
		system, topic = m.Source.System, m.Source.Topic
	}
	return idemkey.Derive("geodlq.message", []byte(system), []byte(topic), m.Body)
}

// defaultBuilder is envelope.NewBuilder(nil), made once.
var defaultBuilder = sync.OnceValue(func() *envelope.Builder {
	b, err := envelope.NewBuilder(nil)
	if err != nil {
		panic(err) // the defaults are valid
	}
	return b
})

// keyOf is the key and derivation of m for this Processor.
func (p *Processor) keyOf(m *Message) (string, bool) {
	if p.key != nil {
		if k := p.key(m); k != "" {
			return k, k == m.Header(HeaderIdempotencyKey) && m.Header(HeaderIdempotencyKeyDerived) == "true"
		}
	}
	return IdempotencyKeyOf(m, p.builder)
}

// Result reports what [Processor.Process] did.
type Result struct {
	// Ack is true when the caller may acknowledge (or delete, or commit)
	// the source message: the handler succeeded, or the envelope is durably
	// in the dead-letter store.
	Ack bool
	// Processed is true when the handler succeeded.
	Processed bool
	// DeadLettered is true when an envelope was written.
	DeadLettered bool
	// Destination is the dead-letter destination written to (or that the
	// failed write was for).
	Destination string
	// Decision is the last retry decision, when the handler failed.
	Decision classify.Decision
	// Envelope is the envelope written (or that failed to be written).
	Envelope *envelope.Envelope
	// Attempts is the number of the last attempt made; attempts start at
	// the broker's delivery count when it reports one.
	Attempts int
	// IdempotencyKey is the key the handler saw.
	IdempotencyKey string
	// IdempotencyKeyDerived is true when the message carried no key and
	// the Processor derived IdempotencyKey (see [IdempotencyKeyOf]).
	IdempotencyKeyDerived bool
	// Err is the handler's last error, or nil.
	Err error
}

// DeadLetterError is returned when the dead-letter path itself failed —
// building or publishing the envelope — so the source message must not be
// acknowledged. It matches [ErrNotAcked] with errors.Is.
type DeadLetterError struct {
	// Destination is where the envelope was going.
	Destination string
	// Op is "build" or "publish".
	Op string
	// Cause is the build or publish error.
	Cause error
	// HandlerErr is the failure that was being dead-lettered.
	HandlerErr error
}

func (e *DeadLetterError) Error() string {
	return fmt.Sprintf("broker: dead-letter %s to %q failed, source message not acknowledged: %v (handler error: %v)",
		e.Op, e.Destination, e.Cause, e.HandlerErr)
}

// Unwrap returns [ErrNotAcked] and the cause.
func (e *DeadLetterError) Unwrap() []error { return []error{ErrNotAcked, e.Cause} }

// PanicError is the error a handler's panic is turned into. It is
// classified unknown unless the panic value is itself a classified error.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("broker: handler panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// Process runs h on m until it succeeds, retrying transient and unknown
// failures in place with the policy's backoff, and dead-letters the message
// when the decision says so.
//
// The returned error is nil exactly when Result.Ack is true. Otherwise it
// wraps [ErrNotAcked]: the context ended during processing (shutdown), or
// the dead-letter write failed ([*DeadLetterError]). Either way the source
// message must be left unacknowledged so the broker redelivers it — nothing
// is lost.
func (p *Processor) Process(ctx context.Context, m *Message, h Handler) (out Result, err error) {
	if m == nil {
		return Result{}, fmt.Errorf("broker: nil message: %w", ErrNotAcked)
	}
	if p.tel == nil {
		return Result{}, fmt.Errorf("broker: Processor not made by NewProcessor: %w", ErrNotAcked)
	}
	ctx, span := p.tel.Start(ctx, "geodlq.process")
	defer func() {
		result := "ok"
		switch {
		case err != nil:
			result = "not_acked"
		case out.DeadLettered:
			result = "dead_lettered"
		}
		span.SetAttributes(attribute.String("geodlq.result", result), attribute.Int("geodlq.attempts", out.Attempts))
		p.tel.Processed.Add(ctx, 1, metric.WithAttributes(attribute.String("result", result)))
		telemetry.End(span, err)
	}()
	start := p.now()
	key, derived := p.keyOf(m)
	hm := withKey(m, key, derived)
	out = Result{IdempotencyKey: key, IdempotencyKeyDerived: derived}
	attempt := max(1, m.DeliveryAttempt)
	for {
		out.Attempts = attempt
		hctx, hspan := p.tel.Start(ctx, "geodlq.handle", attribute.Int("geodlq.attempt", attempt))
		herr := runHandler(hctx, h, hm)
		telemetry.End(hspan, herr)
		if herr == nil {
			out.Ack, out.Processed, out.Err = true, true, nil
			return out, nil
		}
		out.Err = herr
		if ctx.Err() != nil {
			return out, fmt.Errorf("broker: processing interrupted (%w), source message not acknowledged: %w", ctx.Err(), ErrNotAcked)
		}
		d := p.policy.Decide(herr, attempt)
		out.Decision = d
		if d.Action == classify.ActionDeadLetter {
			return p.deadLetter(ctx, m, key, derived, herr, d, attempt, p.firstSeen(m, start), out)
		}
		p.tel.Retries.Add(ctx, 1, metric.WithAttributes(attribute.String("class", d.Class.String())))
		if serr := p.sleep(ctx, d.Delay); serr != nil {
			return out, fmt.Errorf("broker: retry wait interrupted (%w), source message not acknowledged: %w", serr, ErrNotAcked)
		}
		attempt++
	}
}

func (p *Processor) deadLetter(ctx context.Context, m *Message, key string, derived bool, herr error, d classify.Decision, attempt int, firstSeen time.Time, out Result) (Result, error) {
	dest := p.dest(m, d.Route)
	out.Destination = dest
	limit := 0
	if l, ok := p.pub.(Limiter); ok {
		limit = l.MaxMessageBytes(dest)
	}
	bctx, bspan := p.tel.Start(ctx, "geodlq.envelope.build", attribute.Int("geodlq.payload_bytes", len(m.Body)))
	env, body, err := p.builder.Build(bctx, envelope.Input{
		Payload:               m.Body,
		IdempotencyKey:        key,
		IdempotencyKeyDerived: derived,
		EventID:               m.Header(HeaderEventID),
		Err:                   herr,
		Class:                 d.Class,
		Attempts:              attempt,
		FirstSeenAt:           firstSeen,
		Source:                sourceOf(m),
		MaxBytes:              limit,
	})
	telemetry.End(bspan, err)
	if err != nil {
		p.tel.WriteFailures.Add(ctx, 1)
		p.log.ErrorContext(ctx, "geodlq: envelope build failed; source not acknowledged",
			slog.String("destination", dest), slog.String("idempotency_key", key), slog.Any("error", err))
		return out, &DeadLetterError{Destination: dest, Op: "build", Cause: err, HandlerErr: herr}
	}
	out.Envelope = env
	if env.Geometry.OffloadURI != "" {
		p.tel.OffloadedBytes.Add(ctx, env.Geometry.ByteSize, metric.WithAttributes(attribute.String("kind", "geometry")))
	}
	if env.RawPayloadOffloadURI != "" {
		p.tel.OffloadedBytes.Add(ctx, env.PayloadSize, metric.WithAttributes(attribute.String("kind", "payload")))
	}
	dl := &Message{Key: m.Key, Body: body, Headers: Headers(env), Envelope: env}
	pctx, pspan := p.tel.Start(ctx, "geodlq.dead_letter.publish", attribute.String("geodlq.destination", dest), attribute.Int("geodlq.envelope_bytes", len(body)))
	err = p.pub.Publish(pctx, dest, dl)
	telemetry.End(pspan, err)
	if err != nil {
		p.tel.WriteFailures.Add(ctx, 1)
		p.log.ErrorContext(ctx, "geodlq: dead-letter write failed; source not acknowledged",
			slog.String("destination", dest), slog.String("event_id", env.EventID),
			slog.String("idempotency_key", key), slog.Any("error", err))
		return out, &DeadLetterError{Destination: dest, Op: "publish", Cause: err, HandlerErr: herr}
	}
	out.Ack, out.DeadLettered = true, true
	kind := ""
	if env.GeometryError != nil {
		kind = env.GeometryError.Kind
	}
	p.tel.DeadLettered.Add(ctx, 1, metric.WithAttributes(
		attribute.String("class", env.FailureClass.String()), attribute.String("stage", env.FailedStage.String()),
		attribute.String("reason_kind", kind), attribute.String("route", env.Route.String())))
	p.log.WarnContext(ctx, "geodlq: dead-lettered event",
		slog.String("event_id", env.EventID), slog.String("idempotency_key", key),
		slog.String("class", env.FailureClass.String()), slog.String("stage", env.FailedStage.String()),
		slog.String("reason_kind", kind), slog.Int("attempts", attempt), slog.String("destination", dest))
	return out, nil
}

// Headers returns the dead-letter headers for env: class, stage,
// destination, schema version, event id, idempotency key and, when known,
// EPSG.
func Headers(env *envelope.Envelope) map[string]string {
	h := map[string]string{
		HeaderSchema:         env.SchemaVersion,
		HeaderClass:          env.FailureClass.String(),
		HeaderStage:          env.FailedStage.String(),
		HeaderRoute:          env.Route.String(),
		HeaderEventID:        env.EventID,
		HeaderIdempotencyKey: env.IdempotencyKey,
	}
	if e := EPSGOf(env); e != 0 {
		h[HeaderEPSG] = strconv.Itoa(e)
	}
	return h
}

func (p *Processor) firstSeen(m *Message, start time.Time) time.Time {
	if v := m.Header(HeaderFirstSeenAt); v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t
		}
	}
	if m.Source != nil && m.Source.Timestamp != nil && !m.Source.Timestamp.IsZero() && m.Source.Timestamp.Before(start) {
		return *m.Source.Timestamp
	}
	return start
}

func sourceOf(m *Message) *envelope.Source {
	var s envelope.Source
	if m.Source != nil {
		s = *m.Source
	}
	if s.System == "" {
		s.System = "unknown"
	}
	if s.Key == nil && m.Key != nil {
		s.Key = m.Key
	}
	if s.DeliveryCount == 0 {
		s.DeliveryCount = m.DeliveryAttempt
	}
	return &s
}

// withKey returns m with the idempotency-key header set to key, and
// dlq-idempotency-key-derived to "true" when derived (absent otherwise),
// copying the header map rather than changing the caller's.
func withKey(m *Message, key string, derived bool) *Message {
	mark, marked := m.Headers[HeaderIdempotencyKeyDerived]
	if m.Header(HeaderIdempotencyKey) == key && marked == derived && (!derived || mark == "true") {
		return m
	}
	c := *m
	c.Headers = make(map[string]string, len(m.Headers)+2)
	maps.Copy(c.Headers, m.Headers)
	c.Headers[HeaderIdempotencyKey] = key
	delete(c.Headers, HeaderIdempotencyKeyDerived)
	if derived {
		c.Headers[HeaderIdempotencyKeyDerived] = "true"
	}
	return &c
}

func runHandler(ctx context.Context, h Handler, m *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h(ctx, m)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
