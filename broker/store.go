package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/telemetry"
)

// Driver is what a dead-letter store adapter implements. Users never call
// a Driver: they hold the portable [*Store] that [NewStore] wraps around
// it, which owns everything the adapters share — the closed state,
// argument checks, the size limit, write outcomes that a cancelled context
// cannot make uncertain, filtering, and spans — so a driver implements
// only what differs between brokers. (This is gocloud.dev's
// portable-type-over-driver design; see docs/writing-a-store.md.)
//
// The portable Store guarantees a driver that:
//   - it is never called after Close, and Close is called once, after
//     every call in flight has returned;
//   - destination is a valid name (see [ValidDestination]); m and r are
//     not nil; max is in 1..[MaxFetch];
//   - a Publish or Ack is never interrupted by its caller's cancellation
//     once started: the driver gets a context without the caller's
//     cancellation, bounded by [StoreOptions.WriteTimeout], so that the
//     outcome it reports is the outcome the broker had;
//   - a Publish body is within MaxMessageBytes when the driver implements
//     [Limiter].
//
// A driver must:
//   - Publish: return nil only once m is durable under the strongest
//     setting the adapter was configured with; not retain m; refuse a
//     message it cannot store whole with a [*classify.TooLargeError];
//     accept any body bytes (empty, not JSON, not UTF-8).
//   - Fetch: lease up to max records of destination that match f and are
//     neither acknowledged nor leased by anyone else, oldest first (per
//     key at least); set each Record's ID, Destination, Message, Lease and
//     Deliveries when known. A driver may filter in the store or not at
//     all: the portable Store releases fetched records that do not match
//     f. Return (nil, nil) when nothing is available; honour ctx.
//     Set each Record's LeaseExpires to the moment the lease ends at the
//     earliest by the local clock: the time the request was sent (or the
//     store's clock read, for a store that times leases locally) plus
//     the lease's length.
//   - Renew: extend the lease of a record leased by this store — or by
//     another handle of the same store, where the broker allows it — to
//     the lease's length from now, atomically with the check that the
//     lease is still the record's (nobody took the record over, it was not
//     settled): a stale holder must never extend, or believe it extended,
//     a lease that is someone else's. Update r.LeaseExpires as Fetch sets
//     it, and r.Lease when the store encodes anything in it that changed;
//     change r only on success. A lost lease is an error wrapping
//     [ErrLeaseLost]. Brokers that cannot refuse a stale handle are
//     fenced by the local clock, as their Ack is.
//   - Ack, Release: settle a record leased by this store; return an error
//     wrapping [ErrLeaseLost] when the lease expired or another holder
//     took the record over (the holder's Lease no longer matches).
//   - Close: release the driver's resources. Whether it closes a client
//     the user passed in is the adapter's to document.
//
// All methods must be safe for concurrent use.
type Driver interface {
	Publish(ctx context.Context, destination string, m *Message) error
	Fetch(ctx context.Context, destination string, f Filter, max int) ([]*Record, error)
	Renew(ctx context.Context, r *Record) error
	Ack(ctx context.Context, r *Record) error
	Release(ctx context.Context, r *Record) error
	Close() error
}

// Optional driver interfaces. A [*Store] exposes each as a method of its
// own, which returns an error wrapping [errors.ErrUnsupported] when its
// driver lacks the interface.
type (
	// Lister reads records without leasing them. List returns one page of
	// records of opts.Destination (every destination for "") that match
	// opts.Filter, oldest first (newest first with opts.Descending) or in
	// the order of opts.Sort when the driver declares it, after the
	// opaque cursor opts.After; Page.Next is the cursor of the next page,
	// "" after the last. What else of [ListOptions] a driver applies it
	// declares with [ListCapabler]. Destinations returns the destinations
	// that hold records, sorted.
	Lister interface {
		List(ctx context.Context, opts ListOptions) (Page, error)
		Destinations(ctx context.Context) ([]string, error)
	}
	// Statser counts records without reading them one by one.
	Statser interface {
		Stats(ctx context.Context, opts StatsOptions) ([]Count, error)
	}
	// Purger deletes records for good (see [PurgeRequest]). Records under
	// a live lease are never deleted; selection, deletion and the blob
	// reference check are atomic with respect to writers of the store.
	Purger interface {
		Purge(ctx context.Context, req PurgeRequest) (PurgeResult, error)
	}
	// Aser gives access to the driver's native client (see [Store.As]).
	Aser interface {
		As(target any) bool
	}
	// Batcher writes several messages to one destination at once (see
	// [Store.PublishBatch]), as Publish writes one: it returns nil only
	// once every message is durable; on an error, any of them may have
	// been written (each whole, none twice).
	Batcher interface {
		PublishBatch(ctx context.Context, destination string, ms []*Message) error
	}
	// BatchSettler renews and acknowledges several leased records in one
	// round trip (see [Store.RenewBatch], [Store.AckBatch]), as Renew and
	// Ack do one each: every record is fenced by its own lease, atomically
	// with its change, so a record whose lease was lost is refused (its
	// entry wraps [ErrLeaseLost]) and changes nothing, whatever the
	// others' fate. Each returns one error per record, in the order of
	// rs: nil for a record renewed (its LeaseExpires, and Lease when the
	// store encodes anything in it, updated as Renew updates them) or
	// acknowledged. A failure of the whole call sets every entry. A
	// [*Store] also implements it, over its driver's.
	BatchSettler interface {
		RenewBatch(ctx context.Context, rs []*Record) []error
		AckBatch(ctx context.Context, rs []*Record) []error
	}
)

// MaxFetch is the most records one Fetch returns; a larger max is lowered
// to it.
const MaxFetch = 10_000

// MaxDestinationLen is the longest destination name, in bytes.
const MaxDestinationLen = 255

// ErrInvalidArgument is wrapped by the errors a [*Store] returns for
// arguments no store accepts: an empty or malformed destination, a nil
// message or record, a record of another destination.
var ErrInvalidArgument = errors.New("invalid argument")

// ValidDestination reports whether name is usable as a destination by
// every store: 1 to [MaxDestinationLen] bytes of valid UTF-8 without
// control characters. Adapters may refuse more (a Kafka topic allows only
// [a-zA-Z0-9._-]).
func ValidDestination(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty destination: %w", ErrInvalidArgument)
	case len(name) > MaxDestinationLen:
		return fmt.Errorf("destination of %d bytes (limit %d): %w", len(name), MaxDestinationLen, ErrInvalidArgument)
	case !utf8.ValidString(name):
		return fmt.Errorf("destination %q is not valid UTF-8: %w", name, ErrInvalidArgument)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("destination %q holds a control character: %w", name, ErrInvalidArgument)
		}
	}
	return nil
}

// StoreOptions configures the portable part of a [*Store]. Adapters embed
// it in their own Options, so that these settings have one name in every
// adapter. The zero value and nil are valid.
type StoreOptions struct {
	// LeaseTTL is how long a fetched record stays invisible to other
	// fetchers before it is redelivered (a lease, a visibility timeout, an
	// ack deadline). Each adapter documents its default and range.
	LeaseTTL time.Duration
	// MaxMessageBytes is the largest message body the store accepts; 0
	// means the adapter's default, which each adapter documents (its
	// broker's limit).
	MaxMessageBytes int
	// WriteTimeout bounds a Publish or Ack once started. A started write
	// is not interrupted by its caller's context (its outcome would
	// become uncertain: written, but reported failed, and then written
	// again); it ends when the broker answers or WriteTimeout passes.
	// Default 30s.
	WriteTimeout time.Duration
	// CancelGrace is how long a started write may go on once its
	// caller's context ends. Within the grace the caller gets the write's
	// true outcome; after it the write is cancelled, and if it then fails
	// the caller gets an error wrapping the context's error and
	// [ErrOutcomeUnknown] (the broker may have taken it). Default 2s.
	CancelGrace time.Duration
	// ReadOnly refuses every write — Publish, Fetch (a lease is a write),
	// Renew, Ack, Release and Purge other than a dry run — with an error wrapping
	// [ErrReadOnly], before the driver is called. [OpenStore] sets it from
	// OpenOptions.ReadOnly; adapters also open their connections read-only
	// where the broker can.
	ReadOnly bool
	// Logger receives the adapter's log records. Nil discards.
	Logger *slog.Logger
	// TracerProvider traces geodlq.store.publish, .publish_batch, .fetch,
	// .renew, .ack, .release, .list, .stats and .purge. Nil traces nothing.
	TracerProvider trace.TracerProvider
}

// ErrReadOnly is wrapped by the errors of writes to a store opened
// read-only (see [StoreOptions.ReadOnly]).
var ErrReadOnly = errors.New("store opened read-only")

// ErrOutcomeUnknown is wrapped when a write's outcome is not known: the
// caller's context ended and the write did not finish within
// [StoreOptions.CancelGrace], or WriteTimeout passed. The write may have
// happened.
var ErrOutcomeUnknown = errors.New("write outcome unknown")

// Store is a dead-letter store: the portable type every adapter returns.
// It is a [Publisher] (dead-letter writes, replay re-injection), a
// [DeadLetterSource] (replay), a [Limiter], and, when its driver supports
// them, a [Lister], [Statser] and [Purger]. It is safe for concurrent use.
type Store struct {
	drv    Driver
	name   string
	tracer trace.Tracer
	log    *slog.Logger
	write  time.Duration
	grace  time.Duration
	ro     bool

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	closeErr error
	closing  chan struct{}
}

var (
	_ Publisher        = (*Store)(nil)
	_ DeadLetterSource = (*Store)(nil)
	_ Limiter          = (*Store)(nil)
	_ Lister           = (*Store)(nil)
	_ Statser          = (*Store)(nil)
	_ Purger           = (*Store)(nil)
	_ BatchSettler     = (*Store)(nil)
)

// NewStore returns the portable store over d. name identifies the adapter
// ("postgis", "sqs") in errors and spans. Adapters call it from their
// constructors; users call the adapters' constructors (or [OpenStore]).
func NewStore(name string, d Driver, opts *StoreOptions) *Store {
	var o StoreOptions
	if opts != nil {
		o = *opts
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.CancelGrace <= 0 {
		o.CancelGrace = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if name == "" {
		name = "store"
	}
	return &Store{drv: d, name: name, tracer: telemetry.New(nil, o.TracerProvider).Tracer,
		log: o.Logger, write: o.WriteTimeout, grace: o.CancelGrace, ro: o.ReadOnly, closing: make(chan struct{})}
}

// Name returns the adapter's name, as given to [NewStore].
func (s *Store) Name() string { return s.name }

// enter registers a call in flight; it fails once the store is closed.
func (s *Store) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%s: %w", s.name, ErrClosed)
	}
	s.inflight.Add(1)
	return nil
}

// writable refuses op on a read-only store.
func (s *Store) writable(op string) error {
	if s.ro {
		return s.errorf(op, ErrReadOnly)
	}
	return nil
}

// ReadOnly reports whether the store refuses writes.
func (s *Store) ReadOnly() bool { return s.ro }

func (s *Store) span(ctx context.Context, op, dest string) (context.Context, trace.Span) {
	return s.tracer.Start(ctx, "geodlq.store."+op, trace.WithAttributes(
		attribute.String("geodlq.store", s.name), attribute.String("geodlq.destination", dest)))
}

func (s *Store) errorf(op string, err error) error {
	return fmt.Errorf("%s: %s: %w", s.name, op, err)
}

// writeDeadlineKey is the context key of [WithWriteDeadline].
type writeDeadlineKey struct{}

// WithWriteDeadline returns a copy of ctx under which a [Store]'s writes
// (Publish, Ack) end by t at the latest, CancelGrace included: a write not
// started by t is refused with an error wrapping
// context.DeadlineExceeded, and one still running at t is cancelled and
// fails with an error wrapping [ErrOutcomeUnknown] (it may have happened).
// It is for a caller that must have every write's outcome before a hard
// deadline — a Lambda invocation's, after which the process is frozen —
// whatever the store's CancelGrace; ctx's own cancellation still gives a
// started write its grace, within t. An earlier write deadline already in
// ctx is kept.
func WithWriteDeadline(ctx context.Context, t time.Time) context.Context {
	if prev, ok := WriteDeadline(ctx); ok && prev.Before(t) {
		return ctx
	}
	return context.WithValue(ctx, writeDeadlineKey{}, t)
}

// WriteDeadline returns the write deadline [WithWriteDeadline] put in ctx,
// if any.
func WriteDeadline(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(writeDeadlineKey{}).(time.Time)
	return t, ok
}

// CancelGrace returns how long a started write may go on once its
// caller's context ends (see [StoreOptions].CancelGrace).
func (s *Store) CancelGrace() time.Duration { return s.grace }

// settled runs a write so that the caller's cancellation cannot make its
// outcome uncertain: fn gets a context without ctx's cancellation, bounded
// by WriteTimeout and by the write deadline of ctx (see
// [WithWriteDeadline]); if ctx ends first, the write still has CancelGrace
// to finish, and only then is it cancelled. It runs on the caller's
// goroutine: a write costs a timer and a context, no goroutine.
func (s *Store) settled(ctx context.Context, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err // not started: nothing is uncertain
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.write)
	defer cancel()
	hard, bounded := WriteDeadline(ctx)
	if bounded {
		if !time.Now().Before(hard) {
			return fmt.Errorf("not started: the write deadline %s has passed: %w", hard.Format(time.RFC3339Nano), context.DeadlineExceeded)
		}
		var cancelHard context.CancelFunc
		wctx, cancelHard = context.WithDeadline(wctx, hard)
		defer cancelHard()
	}
	var graceTimer atomic.Pointer[time.Timer]
	stop := context.AfterFunc(ctx, func() {
		graceTimer.Store(time.AfterFunc(s.grace, cancel))
	})
	err := fn(wctx)
	if !stop() {
		// ctx ended during the write: stop the grace timer if it has not
		// fired (it may not be stored yet; cancel is idempotent anyway).
		if t := graceTimer.Load(); t != nil {
			t.Stop()
		}
	}
	if err != nil && wctx.Err() != nil {
		if ctx.Err() != nil && !errors.Is(wctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w: %w: the write did not finish within %v of the cancellation: %w", ctx.Err(), ErrOutcomeUnknown, s.grace, err)
		}
		if errors.Is(wctx.Err(), context.DeadlineExceeded) {
			if bounded && !time.Now().Before(hard) {
				return fmt.Errorf("no answer by the write deadline %s: %w: %w", hard.Format(time.RFC3339Nano), ErrOutcomeUnknown, err)
			}
			return fmt.Errorf("no answer within %v: %w: %w", s.write, ErrOutcomeUnknown, err)
		}
	}
	return err
}

// Publish writes m to destination and returns once the store holds it
// durably (see [Publisher]). A body over [Store.MaxMessageBytes] is
// refused with a [*classify.TooLargeError]; nothing is stored. A cancelled
// ctx refuses the write if it has not started, and otherwise waits for its
// outcome (see [StoreOptions.CancelGrace]).
func (s *Store) Publish(ctx context.Context, destination string, m *Message) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	if err := s.writable("publish"); err != nil {
		return err
	}
	ctx, span := s.span(ctx, "publish", destination)
	defer func() { telemetry.End(span, err) }()
	if err := ValidDestination(destination); err != nil {
		return s.errorf("publish", err)
	}
	if m == nil {
		return s.errorf("publish", fmt.Errorf("nil message: %w", ErrInvalidArgument))
	}
	span.SetAttributes(attribute.Int("geodlq.body_bytes", len(m.Body)))
	if limit := s.MaxMessageBytes(destination); limit > 0 && len(m.Body) > limit {
		return &classify.TooLargeError{What: "message", Destination: destination, Size: len(m.Body), Limit: limit}
	}
	return s.settled(ctx, func(ctx context.Context) error { return s.drv.Publish(ctx, destination, m) })
}

// MaxBatch is the most messages one [Store.PublishBatch] takes.
const MaxBatch = 10_000

// PublishBatch writes ms to destination, as many calls of Publish would,
// through the driver's batched write when it has one ([Batcher]: one
// transaction, one pipeline) and one Publish at a time otherwise. It
// returns nil once every message is durable. On an error, any of them
// may have been written (each whole, none twice): their idempotency keys
// make writing them again harmless. Every message is checked as Publish
// checks one, before anything is written; at most [MaxBatch] messages.
func (s *Store) PublishBatch(ctx context.Context, destination string, ms []*Message) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	if err := s.writable("publish"); err != nil {
		return err
	}
	ctx, span := s.span(ctx, "publish_batch", destination)
	defer func() { telemetry.End(span, err) }()
	if err := ValidDestination(destination); err != nil {
		return s.errorf("publish", err)
	}
	if len(ms) > MaxBatch {
		return s.errorf("publish", fmt.Errorf("a batch of %d messages (limit %d): %w", len(ms), MaxBatch, ErrInvalidArgument))
	}
	limit := s.MaxMessageBytes(destination)
	for i, m := range ms {
		if m == nil {
			return s.errorf("publish", fmt.Errorf("message %d is nil: %w", i, ErrInvalidArgument))
		}
		if limit > 0 && len(m.Body) > limit {
			return &classify.TooLargeError{What: "message", Destination: destination, Size: len(m.Body), Limit: limit}
		}
	}
	span.SetAttributes(attribute.Int("geodlq.records", len(ms)))
	if b, ok := s.drv.(Batcher); ok {
		return s.settled(ctx, func(ctx context.Context) error { return b.PublishBatch(ctx, destination, ms) })
	}
	for _, m := range ms {
		if err := s.settled(ctx, func(ctx context.Context) error { return s.drv.Publish(ctx, destination, m) }); err != nil {
			return err
		}
	}
	return nil
}

// Fetch leases up to max records of destination that match f (see
// [DeadLetterSource]). max is capped at [MaxFetch]; max <= 0 fetches
// nothing. Records the driver returns that do not match f are released
// at once and left out, so every filter field holds for every adapter.
func (s *Store) Fetch(ctx context.Context, destination string, f Filter, max int) (recs []*Record, err error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.inflight.Done()
	if err := s.writable("fetch"); err != nil {
		return nil, err
	}
	ctx, span := s.span(ctx, "fetch", destination)
	defer func() {
		span.SetAttributes(attribute.Int("geodlq.records", len(recs)))
		telemetry.End(span, err)
	}()
	if err := ValidDestination(destination); err != nil {
		return nil, s.errorf("fetch", err)
	}
	if err := f.Validate(); err != nil {
		return nil, s.errorf("fetch", err)
	}
	if max <= 0 {
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	max = min(max, MaxFetch)
	// A driver that filters less than f asks for gets the non-matching
	// records released — after the fetch, so that they are not fetched
	// again meanwhile. It is asked again while it returns full batches,
	// up to a bounded scan.
	var kept, drop []*Record
	for range fetchRounds {
		batch, err := s.drv.Fetch(ctx, destination, f, max-len(kept))
		if err != nil {
			if len(kept) == 0 {
				s.releaseAll(ctx, destination, drop)
				return nil, err
			}
			break // return what is leased; the next Fetch reports the error
		}
		want := max - len(kept)
		for _, r := range batch {
			if r == nil {
				continue
			}
			if r.Destination == "" {
				r.Destination = destination
			}
			if f.IsZero() || f.MatchRecord(r) {
				kept = append(kept, r)
			} else {
				drop = append(drop, r)
			}
		}
		if len(kept) == max || len(batch) < want || len(drop) == 0 {
			break
		}
	}
	s.releaseAll(ctx, destination, drop)
	return kept, nil
}

// fetchRounds bounds how many times one Fetch asks its driver again for
// records its filter did not match.
const fetchRounds = 64

func (s *Store) releaseAll(ctx context.Context, destination string, drop []*Record) {
	if len(drop) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.write)
		for _, r := range drop {
			if rerr := s.drv.Release(rctx, r); rerr != nil {
				s.log.WarnContext(ctx, "geodlq: releasing a fetched record outside the filter failed; it returns when its lease expires",
					slog.String("store", s.name), slog.String("destination", destination), slog.String("record", r.ID), slog.Any("error", rerr))
			}
		}
		cancel()
	}
}

func (s *Store) checkRecord(op string, r *Record) error {
	if r == nil {
		return s.errorf(op, fmt.Errorf("nil record: %w", ErrInvalidArgument))
	}
	if err := ValidDestination(r.Destination); err != nil {
		return s.errorf(op, fmt.Errorf("record %q: %w", r.ID, err))
	}
	if r.ID == "" {
		return s.errorf(op, fmt.Errorf("record without an id: %w", ErrInvalidArgument))
	}
	return nil
}

// Ack removes r for good (see [DeadLetterSource]); it fails with an error
// wrapping [ErrLeaseLost] when r's lease was lost. Like Publish, a started
// Ack is not interrupted by ctx.
func (s *Store) Ack(ctx context.Context, r *Record) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	if err := s.writable("ack"); err != nil {
		return err
	}
	if err := s.checkRecord("ack", r); err != nil {
		return err
	}
	ctx, span := s.span(ctx, "ack", r.Destination)
	defer func() { telemetry.End(span, err) }()
	return s.settled(ctx, func(ctx context.Context) error { return s.drv.Ack(ctx, r) })
}

// Renew extends r's lease by the store's lease length from now (see
// [DeadLetterSource]); it fails with an error wrapping [ErrLeaseLost] when
// r's lease was lost, and then leaves r as it was.
func (s *Store) Renew(ctx context.Context, r *Record) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	if err := s.writable("renew"); err != nil {
		return err
	}
	if err := s.checkRecord("renew", r); err != nil {
		return err
	}
	ctx, span := s.span(ctx, "renew", r.Destination)
	defer func() { telemetry.End(span, err) }()
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.drv.Renew(ctx, r)
}

// RenewBatch renews the leases of rs as many calls of Renew would, in one
// call of the driver's [BatchSettler] (one statement for PostgreSQL),
// and returns one error per record in the order of rs (see
// [BatchSettler]). A driver without it gets no call: every entry wraps
// [errors.ErrUnsupported], and the caller renews one record at a time.
// At most [MaxBatch] records.
func (s *Store) RenewBatch(ctx context.Context, rs []*Record) []error {
	return s.settleBatch(ctx, "renew", rs, false, func(ctx context.Context, b BatchSettler, rs []*Record) []error {
		return b.RenewBatch(ctx, rs)
	})
}

// AckBatch acknowledges rs as many calls of Ack would, in one call of
// the driver's [BatchSettler] (one statement for PostgreSQL), and
// returns one error per record in the order of rs (see [BatchSettler]).
// Like Ack, a started AckBatch is not interrupted by ctx. A driver
// without it gets no call: every entry wraps [errors.ErrUnsupported],
// and the caller acknowledges one record at a time. At most [MaxBatch]
// records.
func (s *Store) AckBatch(ctx context.Context, rs []*Record) []error {
	return s.settleBatch(ctx, "ack", rs, true, func(ctx context.Context, b BatchSettler, rs []*Record) []error {
		return b.AckBatch(ctx, rs)
	})
}

// settleBatch checks rs, calls op on the valid ones and spreads the
// errors back over rs. write runs op as a write that ctx cannot make
// uncertain (see settled).
func (s *Store) settleBatch(ctx context.Context, op string, rs []*Record, write bool,
	call func(context.Context, BatchSettler, []*Record) []error,
) (errs []error) {
	errs = make([]error, len(rs))
	all := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if len(rs) == 0 {
		return errs
	}
	if err := s.enter(); err != nil {
		return all(err)
	}
	defer s.inflight.Done()
	if err := s.writable(op); err != nil {
		return all(err)
	}
	b, ok := s.drv.(BatchSettler)
	if !ok {
		return all(s.errorf(op+"_batch", errors.ErrUnsupported))
	}
	if len(rs) > MaxBatch {
		return all(s.errorf(op, fmt.Errorf("a batch of %d records (limit %d): %w", len(rs), MaxBatch, ErrInvalidArgument)))
	}
	var valid []*Record
	var at []int
	for i, r := range rs {
		if err := s.checkRecord(op, r); err != nil {
			errs[i] = err
			continue
		}
		valid, at = append(valid, r), append(at, i)
	}
	if len(valid) == 0 {
		return errs
	}
	ctx, span := s.span(ctx, op+"_batch", valid[0].Destination)
	span.SetAttributes(attribute.Int("geodlq.records", len(valid)))
	var failed int
	defer func() {
		span.SetAttributes(attribute.Int("geodlq.failed", failed))
		telemetry.End(span, nil)
	}()
	var got []error
	run := func(ctx context.Context) error {
		got = call(ctx, b, valid)
		if len(got) != len(valid) {
			return fmt.Errorf("driver returned %d results for %d records", len(got), len(valid))
		}
		return nil
	}
	var err error
	if write {
		err = s.settled(ctx, run)
	} else if err = ctx.Err(); err == nil {
		err = run(ctx)
	}
	for j, i := range at {
		if err != nil {
			errs[i] = s.errorf(op, err)
		} else {
			errs[i] = got[j]
		}
		if errs[i] != nil {
			failed++
		}
	}
	return errs
}

// Release gives r back at once (see [DeadLetterSource]).
func (s *Store) Release(ctx context.Context, r *Record) (err error) {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.inflight.Done()
	if err := s.writable("release"); err != nil {
		return err
	}
	if err := s.checkRecord("release", r); err != nil {
		return err
	}
	ctx, span := s.span(ctx, "release", r.Destination)
	defer func() { telemetry.End(span, err) }()
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.drv.Release(ctx, r)
}

// MaxMessageBytes implements [Limiter]: the driver's limit, or 0.
func (s *Store) MaxMessageBytes(destination string) int {
	if l, ok := s.drv.(Limiter); ok {
		return l.MaxMessageBytes(destination)
	}
	return 0
}

// As gives access to the adapter's native client or store: each adapter's
// package doc lists, under "# As", the types target may point to. It
// reports whether target was set.
func (s *Store) As(target any) bool {
	if a, ok := s.drv.(Aser); ok {
		return a.As(target)
	}
	return false
}

// Driver returns the driver the store wraps, for adapters' own helpers and
// for conformance tests. Users should not need it.
func (s *Store) Driver() Driver { return s.drv }

// List returns a page of records without leasing them (see [Lister],
// [ListOptions]). The page's records all match opts.Filter, whatever the
// driver filters itself, in the order opts.Sort asks for across all
// pages, as summaries with opts.Summaries, and with Page.Total with
// opts.Total: what the driver does not do itself (see [ListCapabler]) the
// Store does. It fails with an error wrapping [errors.ErrUnsupported] when
// the adapter cannot list.
func (s *Store) List(ctx context.Context, opts ListOptions) (p Page, err error) {
	if err := s.enter(); err != nil {
		return Page{}, err
	}
	defer s.inflight.Done()
	l, ok := s.drv.(Lister)
	if !ok {
		return Page{}, s.errorf("list", errors.ErrUnsupported)
	}
	if opts.Destination != "" {
		if err := ValidDestination(opts.Destination); err != nil {
			return Page{}, s.errorf("list", err)
		}
	}
	if err := opts.Filter.Validate(); err != nil {
		return Page{}, s.errorf("list", err)
	}
	if !opts.Sort.Valid() {
		return Page{}, s.errorf("list", fmt.Errorf("unknown sort %q (known: %v): %w", opts.Sort, SortKeys(), ErrInvalidArgument))
	}
	if opts.MaxBytes < 0 {
		return Page{}, s.errorf("list", fmt.Errorf("negative MaxBytes: %w", ErrInvalidArgument))
	}
	if opts.Limit <= 0 {
		opts.Limit = DefaultListLimit
	}
	opts.Limit = min(opts.Limit, MaxListLimit)
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultListBytes
	}
	ctx, span := s.span(ctx, "list", opts.Destination)
	defer func() {
		span.SetAttributes(attribute.Int("geodlq.records", len(p.Entries)))
		telemetry.End(span, err)
	}()
	if err := ctx.Err(); err != nil {
		return Page{}, err
	}
	return listWith(ctx, l, opts)
}

// capabilitiesOf returns what l applies of ListOptions itself.
func capabilitiesOf(l Lister) ListCapabilities {
	if c, ok := l.(ListCapabler); ok {
		return c.ListCapabilities()
	}
	return ListCapabilities{}
}

// listWith is [Store.List] over l once opts are checked and defaulted.
func listWith(ctx context.Context, l Lister, opts ListOptions) (Page, error) {
	caps := capabilitiesOf(l)
	if opts.Sort != SortWritten && !slices.Contains(caps.Sorts, opts.Sort) {
		return listSorted(ctx, l, caps, opts)
	}
	dopts := opts
	dopts.Summaries = opts.Summaries && caps.Summaries
	dopts.Total = opts.Total && caps.Total
	p, err := l.List(ctx, dopts)
	if err != nil {
		return Page{}, err
	}
	if !dopts.Summaries {
		// The driver read bodies: filter what it may have let through, and
		// summarise what it did not.
		if !opts.Filter.IsZero() && !caps.Summaries {
			p.Entries = slices.DeleteFunc(p.Entries, func(e Entry) bool { return e.Record == nil || !opts.Filter.MatchRecord(e.Record) })
		}
		if opts.Summaries {
			for i := range p.Entries {
				summarize(&p.Entries[i], opts.Filter.SourcePointer)
			}
		}
	}
	if opts.Total && !dopts.Total {
		if p.Total, p.TotalIsLowerBound, err = countMatching(ctx, l, caps, opts); err != nil {
			return Page{}, err
		}
	}
	return p, nil
}

// summarize sets e's Summary from its message, and drops the message.
func summarize(e *Entry, pointer string) {
	if e.Record == nil {
		return
	}
	sum := SummaryOf(e.Record, pointer)
	e.Summary = &sum
	e.Record.Message, e.Record.Envelope = nil, nil
}

// Destinations returns the destinations that hold records, sorted (see
// [Lister]).
func (s *Store) Destinations(ctx context.Context) ([]string, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.inflight.Done()
	l, ok := s.drv.(Lister)
	if !ok {
		return nil, s.errorf("destinations", errors.ErrUnsupported)
	}
	ds, err := l.Destinations(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(ds)
	return slices.Compact(ds), nil
}

// Stats counts records (see [Statser]). A store without a native count
// but with a [Lister] is counted by listing; otherwise the error wraps
// [errors.ErrUnsupported].
func (s *Store) Stats(ctx context.Context, opts StatsOptions) (counts []Count, err error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.inflight.Done()
	if err := opts.Filter.Validate(); err != nil {
		return nil, s.errorf("stats", err)
	}
	if opts.SourceDepth < 0 || opts.SourceDepth > MaxSourceDepth {
		return nil, s.errorf("stats", fmt.Errorf("source depth %d out of range 0..%d: %w", opts.SourceDepth, MaxSourceDepth, ErrInvalidArgument))
	}
	ctx, span := s.span(ctx, "stats", opts.Destination)
	defer func() { telemetry.End(span, err) }()
	l, ok := s.drv.(Lister)
	if st, isStatser := s.drv.(Statser); isStatser && (!ok || capabilitiesOf(l).Stats || (!opts.BySource && !opts.Filter.HasAttrFields())) {
		return st.Stats(ctx, opts)
	}
	if !ok {
		return nil, s.errorf("stats", errors.ErrUnsupported)
	}
	return countByListing(ctx, l, opts)
}

// Purge deletes records for good (see [PurgeRequest], [Purger]); it fails
// with an error wrapping [errors.ErrUnsupported] when the adapter cannot.
func (s *Store) Purge(ctx context.Context, req PurgeRequest) (res PurgeResult, err error) {
	if err := s.enter(); err != nil {
		return PurgeResult{}, err
	}
	defer s.inflight.Done()
	p, ok := s.drv.(Purger)
	if !ok {
		return PurgeResult{}, s.errorf("purge", errors.ErrUnsupported)
	}
	if err := req.validate(); err != nil {
		return PurgeResult{}, s.errorf("purge", err)
	}
	if !req.DryRun {
		if err := s.writable("purge"); err != nil {
			return PurgeResult{}, err
		}
	}
	ctx, span := s.span(ctx, "purge", req.Destination)
	defer func() {
		span.SetAttributes(attribute.Int("geodlq.records", len(res.IDs)), attribute.Bool("geodlq.dry_run", req.DryRun))
		telemetry.End(span, err)
	}()
	if err := ctx.Err(); err != nil {
		return PurgeResult{}, err
	}
	return p.Purge(ctx, req)
}

// Close closes the store: later calls fail with an error wrapping
// [ErrClosed], calls in flight finish first, and then the driver is
// closed. Close is idempotent; every call returns the driver's Close
// error.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.closing
		return s.closeErr
	}
	s.closed = true
	s.mu.Unlock()
	s.inflight.Wait()
	s.closeErr = s.drv.Close()
	close(s.closing)
	return s.closeErr
}
