package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geodlq/geodlq/broker"
)

// ErrNotHeld is wrapped by the errors of a [LeaseKeeper] that cannot
// prove a record's lease is held: the lease was lost (taken over,
// settled), could not be renewed before too little of it was left, or
// the source reports no lease deadline. The record was not acted on by
// this holder — or, when an act was cancelled, its outcome is unknown —
// and it is not acknowledged: whoever holds it next deals with it.
var ErrNotHeld = errors.New("replay: lease not provably held")

// LeaseKeeperOptions configures a [LeaseKeeper]. Nil means defaults.
type LeaseKeeperOptions struct {
	// Margin is how much of a lease must be left, by the local clock,
	// for [LeaseKeeper.Act] to start an act, and how long before the
	// lease would end (no renewal having succeeded since) an act still
	// running is cancelled. It is the allowance for what the lease's
	// clock cannot see: a write still in flight when its context ends (a
	// [broker.Store] target finishes a started write within its
	// CancelGrace, 2s by default), clock drift, a paused process. Default
	// a quarter of the lease's length; at most half of it.
	Margin time.Duration
	// Concurrency is how many renewals run at once. Default 8.
	Concurrency int
	// Logger receives a record per lease lost. Nil discards.
	Logger *slog.Logger
}

// LeaseKeeper keeps the leases of the dead-letter records a worker holds
// while it works on them, and fences what it does with each: the
// guarantee that two workers never both act on one record rests on it.
//
// A record given to [LeaseKeeper.Hold] is renewed in the background each
// time a third of its lease has passed, so that a batch outlives its
// lease as long as the worker lives and the source answers: the leases
// that fall due together are renewed in one call of the source's
// RenewBatch ([broker.BatchSettler]) when it has one, one
// [broker.DeadLetterSource] Renew each otherwise. A renewal that finds
// a lease lost (another holder took the record) marks it lost for good:
// [LeaseKeeper.Lost] says so, and the record is never acted on. (So a
// wrapper that overrides a source's Renew must override RenewBatch too,
// or hide it: embed the [broker.DeadLetterSource] interface, not the
// store.) [LeaseKeeper.Act] runs the side effect (a
// re-injection, a move) only while the lease is provably held: it first
// renews the lease — one atomic check-and-extend at the source, which
// fails if anyone else took the record — then runs the act with a
// context that is cancelled if the lease comes within the margin of its
// end without a renewal having succeeded meanwhile (the source stopped
// answering, the lease was lost, the process was paused). What the act
// writes after its context ends is up to its writer; the margin is there
// for it. [LeaseKeeper.Ack] then settles the record, fenced by the
// source's own check of the lease.
//
// A LeaseKeeper serialises the source's calls on each record it holds
// (Renew changes the record). It is safe for concurrent use. Close it
// when done.
type LeaseKeeper struct {
	src    broker.DeadLetterSource
	margin time.Duration
	conc   int
	log    *slog.Logger

	mu      sync.Mutex
	held    map[*broker.Record]*hold
	wake    chan struct{}
	ctx     context.Context
	stop    context.CancelFunc
	done    chan struct{}
	started bool
	seq     uint64 // holds made so far

	noBatch atomic.Bool // the source answered a batch with errors.ErrUnsupported
}

// hold is the keeper's state of one record. The fields after mu are
// guarded by the keeper's mu; mu itself serialises the source's calls on
// rec, and is taken before the keeper's.
type hold struct {
	mu  sync.Mutex
	rec *broker.Record
	seq uint64 // the order holds were made in: batches lock in it

	length  time.Duration // the lease's length, as Fetch granted it
	expires time.Time     // the lease's end as last proven
	next    time.Time     // when to renew next
	lost    error         // why the lease is gone for good, or nil
	cancel  context.CancelCauseFunc
}

// NewLeaseKeeper returns a keeper of leases on src's records.
func NewLeaseKeeper(src broker.DeadLetterSource, opts *LeaseKeeperOptions) *LeaseKeeper {
	var o LeaseKeeperOptions
	if opts != nil {
		o = *opts
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(context.Background())
	return &LeaseKeeper{src: src, margin: o.Margin, conc: o.Concurrency, log: log,
		held: map[*broker.Record]*hold{}, wake: make(chan struct{}, 1), ctx: ctx, stop: stop, done: make(chan struct{})}
}

// errNoDeadline is why a record whose source reports no lease deadline is
// never acted on.
var errNoDeadline = errors.New("the source reports no lease deadline (Record.LeaseExpires)")

// Hold starts keeping the leases of recs, fetched by a Fetch called at
// fetched: each lease's length is taken to be its LeaseExpires less
// fetched. A record whose LeaseExpires is not after fetched is held as
// lost: it is never acted on.
func (k *LeaseKeeper) Hold(fetched time.Time, recs ...*broker.Record) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range recs {
		if r == nil {
			continue
		}
		k.seq++
		h := &hold{rec: r, seq: k.seq, expires: r.LeaseExpires, length: r.LeaseExpires.Sub(fetched)}
		if r.LeaseExpires.IsZero() || h.length <= 0 {
			h.lost = errNoDeadline
		} else {
			h.next = h.expires.Add(-2 * h.length / 3)
		}
		k.held[r] = h
	}
	if !k.started {
		k.started = true
		go k.loop()
	}
	k.poke()
}

// poke wakes the renewal loop. k.mu is held or not; it does not matter.
func (k *LeaseKeeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// marginOf returns the margin for a lease of length d.
func (k *LeaseKeeper) marginOf(d time.Duration) time.Duration {
	if k.margin > 0 {
		return min(k.margin, d/2)
	}
	return d / 4
}

// Lost returns an error wrapping [ErrNotHeld] when r's lease is known to
// be gone for good (a renewal found it lost), or when r is not held by
// k; nil otherwise.
func (k *LeaseKeeper) Lost(r *broker.Record) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	h := k.held[r]
	switch {
	case h == nil:
		return fmt.Errorf("%w: record %s is not held by this keeper", ErrNotHeld, r.ID)
	case h.lost != nil:
		return fmt.Errorf("%w: record %s: %w", ErrNotHeld, r.ID, h.lost)
	}
	return nil
}

// Act runs fn, the side effect of r, only while r's lease is provably
// held (see [LeaseKeeper]). It renews the lease first and refuses, with
// an error wrapping [ErrNotHeld], when that fails or leaves less than the
// margin; fn is then not called. When ctx ends first, it returns ctx's
// error (nothing was done; the lease was not lost). While fn runs the lease keeps being
// renewed, and fn's context is cancelled, with a cause wrapping
// ErrNotHeld, once the lease comes within the margin of its end without
// a successful renewal; Act then returns an error wrapping ErrNotHeld
// and fn's error. Otherwise it returns fn's error.
func (k *LeaseKeeper) Act(ctx context.Context, r *broker.Record, fn func(ctx context.Context) error) error {
	k.mu.Lock()
	h := k.held[r]
	k.mu.Unlock()
	if h == nil {
		return fmt.Errorf("%w: record %s is not held by this keeper", ErrNotHeld, r.ID)
	}
	if err := ctx.Err(); err != nil {
		return err // the caller gave up: nothing was done, the lease is still held
	}
	if err := k.renew(ctx, h); err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, broker.ErrLeaseLost) {
			return fmt.Errorf("%w (renewing the lease before acting: %w)", cerr, err)
		}
		return fmt.Errorf("%w: record %s: renewing its lease before acting: %w", ErrNotHeld, r.ID, err)
	}
	margin := k.marginOf(h.length)
	k.mu.Lock()
	expires := h.expires
	if left := time.Until(expires); left < margin {
		k.mu.Unlock()
		return fmt.Errorf("%w: record %s: %v of its lease left after renewing, less than the margin %v", ErrNotHeld, r.ID, left.Round(time.Millisecond), margin)
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	h.cancel = cancel
	// The watchdog cancels the act when the lease, as last proven,
	// comes within the margin of its end; a renewal meanwhile moves it.
	var watch *time.Timer
	finished := false // guarded by k.mu
	watch = time.AfterFunc(time.Until(expires.Add(-margin)), func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if finished {
			return
		}
		if h.lost == nil && time.Until(h.expires) > margin {
			watch.Reset(time.Until(h.expires.Add(-margin)))
			return
		}
		why := h.lost
		if why == nil {
			why = fmt.Errorf("no renewal since; the lease ends at %s", h.expires.Format(time.RFC3339Nano))
		}
		cancel(fmt.Errorf("%w: record %s: lease within %v of its end: %w", ErrNotHeld, r.ID, margin, why))
	})
	k.mu.Unlock()
	err := fn(actx)
	watch.Stop()
	k.mu.Lock()
	finished = true
	h.cancel = nil
	k.mu.Unlock()
	if cause := context.Cause(actx); err != nil && errors.Is(cause, ErrNotHeld) {
		return fmt.Errorf("%w (the act was cancelled: %w)", cause, err)
	}
	return err
}

// renew renews h's lease now, and records what it learnt.
func (k *LeaseKeeper) renew(ctx context.Context, h *hold) error {
	h.mu.Lock()
	k.mu.Lock()
	lost, gone := h.lost, k.held[h.rec] != h
	length := h.length
	k.mu.Unlock()
	if gone || lost != nil {
		h.mu.Unlock()
		if lost == nil {
			lost = errors.New("no longer held by this keeper")
		}
		return lost
	}
	// A renewal that cannot finish within half the lease is not worth
	// waiting for: the next one will be due.
	rctx, cancel := context.WithTimeout(ctx, max(length/2, time.Millisecond))
	err := k.src.Renew(rctx, h.rec)
	cancel()
	expires := h.rec.LeaseExpires
	h.mu.Unlock()

	k.mu.Lock()
	defer k.mu.Unlock()
	return k.renewed(h, expires, err)
}

// renewed records the outcome err of a renewal of h's lease that left
// its end at expires. k.mu is held.
func (k *LeaseKeeper) renewed(h *hold, expires time.Time, err error) error {
	length := h.length
	now := time.Now()
	switch {
	case err == nil && !expires.IsZero():
		// A source may cap how long a record is held (RabbitMQ's
		// consumer_timeout): a renewal that moved the lease little is
		// tried again a while later, not at once.
		h.expires = expires
		h.next = later(expires.Add(-2*length/3), now.Add(max(length/12, time.Millisecond)))
	case err == nil:
		err = errNoDeadline
		h.lost = err
	case errors.Is(err, broker.ErrLeaseLost):
		h.lost = err
		if h.cancel != nil {
			h.cancel(fmt.Errorf("%w: record %s: %w", ErrNotHeld, h.rec.ID, err))
		}
		k.log.Warn("geodlq: lease lost; the record is left to its new holder",
			slog.String("destination", h.rec.Destination), slog.String("record", h.rec.ID), slog.Any("error", err))
	default:
		// The source did not answer: try again soon, while the lease as
		// last proven lasts.
		h.next = now.Add(max(length/12, time.Millisecond))
	}
	return err
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// loop renews every held lease when a third of it has passed, until
// Close.
func (k *LeaseKeeper) loop() {
	defer close(k.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sem := make(chan struct{}, k.conc)
	for {
		if k.ctx.Err() != nil {
			return
		}
		now := time.Now()
		var due, near []*hold
		var next time.Time
		k.mu.Lock()
		for _, h := range k.held {
			if h.lost != nil {
				continue
			}
			switch {
			case !h.next.After(now):
				due = append(due, h)
			case !h.next.After(now.Add(h.length / 6)):
				near = append(near, h)
				fallthrough
			default:
				if next.IsZero() || h.next.Before(next) {
					next = h.next
				}
			}
		}
		k.mu.Unlock()
		if len(due) > 0 {
			// The leases due within a sixth of their length are renewed
			// with the ones due now, so that leases that fall due close
			// together (a batch fetched at once, records left in place
			// one after another) are renewed in one batch.
			due = append(due, near...)
		}
		if _, ok := k.src.(broker.BatchSettler); ok && !k.noBatch.Load() && len(due) > 0 {
			k.renewDue(due, sem)
		} else {
			k.fanOut(sem, len(due), func(i int) {
				if err := k.renew(k.ctx, due[i]); errors.Is(err, broker.ErrLeaseLost) {
					k.giveBack(due[i])
				}
			})
		}
		if len(due) > 0 {
			continue // the renewed ones have a new next; look again
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		timer.Reset(wait)
		select {
		case <-k.ctx.Done():
			return
		case <-k.wake:
		case <-timer.C:
		}
	}
}

// renewBatchMax is the most leases the renewal loop renews in one call
// of the source's RenewBatch (broker.MaxBatch bounds a [*broker.Store]'s).
const renewBatchMax = 1000

// renewDue renews the leases of due in calls of the source's RenewBatch
// of at most renewBatchMax records each, as many at once as sem allows
// (the holds in the order they were made, so that the records fetched
// together are renewed together), and gives back the records whose
// leases a renewal found lost. A source that answers
// errors.ErrUnsupported is renewed one record at a time from then on
// (renewBatch).
func (k *LeaseKeeper) renewDue(due []*hold, sem chan struct{}) {
	slices.SortFunc(due, func(a, b *hold) int { return cmp.Compare(a.seq, b.seq) })
	chunks := slices.Collect(slices.Chunk(due, renewBatchMax))
	k.fanOut(sem, len(chunks), func(c int) {
		for i, err := range k.renewBatch(k.ctx, chunks[c]) {
			if errors.Is(err, broker.ErrLeaseLost) {
				k.giveBack(chunks[c][i])
			}
		}
	})
}

// fanOut runs fn(0) … fn(n-1), each on a goroutine of its own once it
// holds a slot of sem (as many at once as sem has room for), and returns
// when they have returned; it starts no more once the keeper's context
// ends.
func (k *LeaseKeeper) fanOut(sem chan struct{}, n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-k.ctx.Done():
		}
		if k.ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}

// giveBack releases a record whose renewal found its lease lost. Most
// sources refuse, the lease being someone else's; a source that refused
// the renewal for its own reasons (a Kafka partition being handed to
// another member) gets the record back at once instead of when the lease
// ends.
func (k *LeaseKeeper) giveBack(h *hold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx, cancel := context.WithTimeout(k.ctx, 10*time.Second)
	defer cancel()
	_ = k.src.Release(ctx, h.rec)
}

// ActBatch is [LeaseKeeper.Act] for several records at once, for a
// source that renews and acknowledges a batch in one round trip
// ([broker.BatchSettler]): it renews the leases of rs in one call, and
// runs fn once for those of rs whose leases are provably held with at
// least the margin left — held lists their indexes in rs, in order, and
// fn returns an error per entry of held (or nil for none).
// fn's context is cancelled, with a cause wrapping [ErrNotHeld], as soon
// as any of them is lost or comes within the margin of its end without
// a renewal. It returns one error per record of rs: one wrapping
// ErrNotHeld for a record fn was not run for (or, when the act was
// cancelled, for a record it ran for that failed, with fn's error), ctx's error
// for every record when ctx ended before anything was done, and
// otherwise fn's error for each record it ran for. A source without
// batches, or whose RenewBatch answers [errors.ErrUnsupported], is
// renewed one record at a time.
func (k *LeaseKeeper) ActBatch(ctx context.Context, rs []*broker.Record, fn func(ctx context.Context, held []int) []error) []error {
	errs := make([]error, len(rs))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err // the caller gave up: nothing was done
		}
		return errs
	}
	hs := make([]*hold, len(rs))
	k.mu.Lock()
	for i, r := range rs {
		if hs[i] = k.held[r]; hs[i] == nil {
			errs[i] = fmt.Errorf("%w: record %s is not held by this keeper", ErrNotHeld, r.ID)
		}
	}
	k.mu.Unlock()
	for i, err := range k.renewBatch(ctx, hs) {
		if errs[i] != nil || err == nil {
			continue
		}
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, broker.ErrLeaseLost) {
			errs[i] = fmt.Errorf("%w (renewing the lease before acting: %w)", cerr, err)
			continue
		}
		errs[i] = fmt.Errorf("%w: record %s: renewing its lease before acting: %w", ErrNotHeld, rs[i].ID, err)
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var held []int
	k.mu.Lock()
	for i, h := range hs {
		if errs[i] != nil {
			continue
		}
		margin := k.marginOf(h.length)
		if left := time.Until(h.expires); left < margin {
			errs[i] = fmt.Errorf("%w: record %s: %v of its lease left after renewing, less than the margin %v", ErrNotHeld, rs[i].ID, left.Round(time.Millisecond), margin)
			continue
		}
		h.cancel = cancel
		held = append(held, i)
	}
	if len(held) == 0 {
		k.mu.Unlock()
		return errs
	}
	// The watchdog cancels the act when any lease, as last proven, comes
	// within its margin of its end; renewals meanwhile move them.
	finished := false // guarded by k.mu
	soonest := func() (time.Time, error) {
		var at time.Time
		for _, i := range held {
			h := hs[i]
			margin := k.marginOf(h.length)
			if h.lost != nil {
				return time.Time{}, fmt.Errorf("%w: record %s: %w", ErrNotHeld, rs[i].ID, h.lost)
			}
			if time.Until(h.expires) <= margin {
				return time.Time{}, fmt.Errorf("%w: record %s: lease within %v of its end: no renewal since; the lease ends at %s",
					ErrNotHeld, rs[i].ID, margin, h.expires.Format(time.RFC3339Nano))
			}
			if t := h.expires.Add(-margin); at.IsZero() || t.Before(at) {
				at = t
			}
		}
		return at, nil
	}
	at, _ := soonest()
	var watch *time.Timer
	watch = time.AfterFunc(time.Until(at), func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if finished {
			return
		}
		next, err := soonest()
		if err != nil {
			cancel(err)
			return
		}
		watch.Reset(time.Until(next))
	})
	k.mu.Unlock()
	got := fn(actx, held)
	watch.Stop()
	k.mu.Lock()
	finished = true
	for _, i := range held {
		hs[i].cancel = nil
	}
	k.mu.Unlock()
	cause := context.Cause(actx)
	for j, i := range held {
		var err error
		switch {
		case got == nil:
		case len(got) != len(held):
			err = fmt.Errorf("replay: the act answered for %d records of %d", len(got), len(held))
		default:
			err = got[j]
		}
		if err != nil && errors.Is(cause, ErrNotHeld) {
			err = fmt.Errorf("%w (the act was cancelled: %w)", cause, err)
		}
		errs[i] = err
	}
	return errs
}

// renewBatch renews the leases of hs (nil entries left out) in one call
// of the source's RenewBatch when it has one, and returns an error per
// entry. Each hold's mu is taken, in the order the holds were made, for
// the call.
func (k *LeaseKeeper) renewBatch(ctx context.Context, hs []*hold) []error {
	errs := make([]error, len(hs))
	bs, ok := k.src.(broker.BatchSettler)
	if !ok || k.noBatch.Load() {
		for i, h := range hs {
			if h != nil {
				errs[i] = k.renew(ctx, h)
			}
		}
		return errs
	}
	locked := k.lockAll(hs)
	var recs []*broker.Record
	var at []int
	var length time.Duration
	k.mu.Lock()
	for i, h := range hs {
		if h == nil {
			continue
		}
		lost := h.lost
		if k.held[h.rec] != h && lost == nil {
			lost = errors.New("no longer held by this keeper")
		}
		if lost != nil {
			errs[i] = lost
			continue
		}
		if length == 0 || h.length < length {
			length = h.length
		}
		recs, at = append(recs, h.rec), append(at, i)
	}
	k.mu.Unlock()
	if len(recs) == 0 {
		unlockAll(locked)
		return errs
	}
	rctx, cancel := context.WithTimeout(ctx, max(length/2, time.Millisecond))
	got := bs.RenewBatch(rctx, recs)
	cancel()
	if len(got) != len(recs) {
		got = make([]error, len(recs))
		for j := range got {
			got[j] = fmt.Errorf("replay: the source answered a renewal of %d records with %d results", len(recs), len(got))
		}
	}
	if len(got) > 0 && errors.Is(got[0], errors.ErrUnsupported) {
		// Nothing was renewed: one at a time from now on.
		k.noBatch.Store(true)
		unlockAll(locked)
		return k.renewBatch(ctx, hs)
	}
	expires := make([]time.Time, len(recs))
	for j, r := range recs {
		expires[j] = r.LeaseExpires
	}
	unlockAll(locked)
	k.mu.Lock()
	defer k.mu.Unlock()
	for j, i := range at {
		errs[i] = k.renewed(hs[i], expires[j], got[j])
	}
	return errs
}

// lockAll takes the mu of every hold of hs (nil entries and repeats left
// out) in the order the holds were made, so that two batches never wait
// on each other, and returns them for unlockAll.
func (k *LeaseKeeper) lockAll(hs []*hold) []*hold {
	var out []*hold
	seen := map[*hold]bool{}
	for _, h := range hs {
		if h != nil && !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b *hold) int { return cmp.Compare(a.seq, b.seq) })
	for _, h := range out {
		h.mu.Lock()
	}
	return out
}

func unlockAll(hs []*hold) {
	for _, h := range hs {
		h.mu.Unlock()
	}
}

// AckBatch acknowledges rs at the source, in one call of its AckBatch
// when it has one (each record fenced by the source's own check of its
// lease), and stops keeping their leases. It returns one error per
// record of rs.
func (k *LeaseKeeper) AckBatch(ctx context.Context, rs []*broker.Record) []error {
	errs := make([]error, len(rs))
	bs, ok := k.src.(broker.BatchSettler)
	if !ok || k.noBatch.Load() {
		for i, r := range rs {
			errs[i] = k.Ack(ctx, r)
		}
		return errs
	}
	hs := make([]*hold, len(rs))
	k.mu.Lock()
	for i, r := range rs {
		hs[i] = k.held[r]
	}
	k.mu.Unlock()
	locked := k.lockAll(hs)
	got := bs.AckBatch(ctx, rs)
	if len(got) != len(rs) {
		got = make([]error, len(rs))
		for i := range got {
			got[i] = fmt.Errorf("replay: the source answered an acknowledgement of %d records with %d results", len(rs), len(got))
		}
	}
	unsupported := len(got) > 0 && errors.Is(got[0], errors.ErrUnsupported)
	if !unsupported {
		k.mu.Lock()
		for i, r := range rs {
			if h := hs[i]; h != nil && k.held[r] == h {
				delete(k.held, r)
			}
		}
		k.mu.Unlock()
	}
	unlockAll(locked)
	if unsupported {
		k.noBatch.Store(true)
		return k.AckBatch(ctx, rs)
	}
	return got
}

// Ack acknowledges r at the source (fenced by the source's own lease
// check) and stops keeping its lease.
func (k *LeaseKeeper) Ack(ctx context.Context, r *broker.Record) error {
	return k.settle(ctx, r, k.src.Ack)
}

// Release gives r back at the source and stops keeping its lease.
func (k *LeaseKeeper) Release(ctx context.Context, r *broker.Record) error {
	return k.settle(ctx, r, k.src.Release)
}

func (k *LeaseKeeper) settle(ctx context.Context, r *broker.Record, op func(context.Context, *broker.Record) error) error {
	k.mu.Lock()
	h := k.held[r]
	k.mu.Unlock()
	if h == nil {
		return op(ctx, r)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	err := op(ctx, r)
	k.mu.Lock()
	if k.held[r] == h {
		delete(k.held, r)
	}
	k.mu.Unlock()
	return err
}

// Drop stops keeping r's lease without a call to the source: the lease
// lapses at its end (a record the worker leaves in place but keeps out of
// its own later fetches).
func (k *LeaseKeeper) Drop(r *broker.Record) {
	k.mu.Lock()
	h := k.held[r]
	k.mu.Unlock()
	if h == nil {
		return
	}
	h.mu.Lock() // a renewal in flight finishes first
	defer h.mu.Unlock()
	k.mu.Lock()
	if k.held[r] == h {
		delete(k.held, r)
	}
	k.mu.Unlock()
}

// slim keeps renewing r's lease, as held by k, without holding r's body:
// it replaces the record k holds with a copy that has only what renewing
// and releasing it need (leaseOnly), and returns that copy, which k
// holds from then on in r's place (r itself is no longer held). For a
// record a worker leaves in place but keeps out of its own later
// fetches until it is done: [LeaseKeeper.Release] the copy then. A
// record k does not hold comes back as a lease-only copy, not held.
func (k *LeaseKeeper) slim(r *broker.Record) *broker.Record {
	k.mu.Lock()
	h := k.held[r]
	k.mu.Unlock()
	if h == nil {
		return leaseOnly(r)
	}
	h.mu.Lock() // a renewal in flight finishes first
	defer h.mu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	lo := leaseOnly(h.rec)
	if k.held[r] == h {
		delete(k.held, r)
		h.rec = lo
		k.held[lo] = h
	}
	return lo
}

// Close stops renewing (leases lapse at their ends) and waits for
// renewals in flight.
func (k *LeaseKeeper) Close() {
	k.mu.Lock()
	started := k.started
	k.started = true // no loop starts after Close
	k.mu.Unlock()
	k.stop()
	if started {
		<-k.done
	}
}
