// Package txretry retries the statements and transactions of geodlq's SQL
// stores — the dead-letter stores (broker/sqlite, broker/mysql,
// broker/postgis) and the claims stores (replay/pgclaims,
// broker/mysql/mysqlclaims) — when the database aborted them to resolve a
// conflict with another transaction: a deadlock (MySQL 1213, PostgreSQL
// 40P01), a lock-wait timeout (MySQL 1205, PostgreSQL 55P03) or a
// serialization failure (SQLSTATE 40001). Such an abort undoes the work
// and says so; trying again is what the database asks of its client.
//
// [Do] runs a function until it succeeds, with a bounded, jittered
// exponential backoff that honours the context. It also tells a failure
// that certainly left nothing done ([Conflict], [Final]) from one whose
// outcome is unknown ([Unknown]: the connection broke after the statement
// was sent), and, when asked to, retries the latter too while telling the
// function ([Attempt.Uncertain]) that an earlier attempt may have taken
// effect, so that it can look before acting again. That is how a claims
// store's Complete is retried until its outcome is known, never leaving
// a side effect done but not recorded.
//
// The package imports no database driver: a store passes the function
// that classifies its driver's errors ([KindOf] does it for drivers that
// expose SQLSTATE, as pgx and lib/pq do).
package txretry

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"
)

// Kind says what an error tells about the operation that returned it.
type Kind uint8

// The kinds of error.
const (
	// Final: the operation failed and took no effect, and trying again
	// would fail the same way (a constraint violation, a syntax error, a
	// value the column refuses). Do returns it at once.
	Final Kind = iota
	// Conflict: the database rolled the operation back to resolve a
	// conflict with another transaction, or the connection failed before
	// anything was sent. Nothing took effect; trying again can succeed.
	Conflict
	// Unknown: the answer was lost — the connection broke, or the context
	// ended, after the operation was sent. It may or may not have taken
	// effect.
	Unknown
)

// String returns "final", "conflict" or "unknown".
func (k Kind) String() string {
	switch k {
	case Final:
		return "final"
	case Conflict:
		return "conflict"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Defaults of [Options].
const (
	DefaultAttempts   = 10
	DefaultMinBackoff = 5 * time.Millisecond
	DefaultMaxBackoff = 500 * time.Millisecond
)

// Options tunes [Do]. Nil means defaults.
type Options struct {
	// Attempts is the most times fn runs. Default 10; negative: no bound
	// but ctx (for an operation that must reach a known outcome, such as
	// recording that a side effect is done).
	Attempts int
	// MinBackoff is the bound of the pause before the second attempt; each
	// further pause doubles the bound, up to MaxBackoff, and a pause is
	// drawn at random between half its bound and the bound, so that
	// transactions that collided do not collide again in step. Defaults
	// 5ms and 500ms.
	MinBackoff, MaxBackoff time.Duration
	// RetryUnknown retries errors of kind [Unknown] too. Set it only for
	// an fn that is idempotent, or that looks, when [Attempt.Uncertain]
	// says an earlier attempt may have taken effect, before acting again.
	// Default false: an Unknown error is returned at once.
	RetryUnknown bool
}

// Attempt describes the attempt fn is asked to make.
type Attempt struct {
	// N counts attempts from 1.
	N int
	// Uncertain is set once an earlier attempt failed with an error of
	// kind [Unknown]: it may have taken effect.
	Uncertain bool
}

// Do calls fn until it returns nil, or an error that kind does not call
// [Conflict] (or [Unknown], with opts.RetryUnknown), or opts.Attempts
// attempts were made, or ctx ends. It pauses between attempts (see
// [Options]); a pause ends early when ctx ends, and Do then returns an
// error wrapping both ctx's error and fn's last error. Otherwise it
// returns fn's last error as is. kind nil means [KindOf].
func Do(ctx context.Context, kind func(error) Kind, fn func(ctx context.Context, a Attempt) error, opts *Options) error {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Attempts == 0 {
		o.Attempts = DefaultAttempts
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	o.MaxBackoff = max(o.MaxBackoff, o.MinBackoff)
	if kind == nil {
		kind = KindOf
	}
	a := Attempt{N: 1}
	bound := o.MinBackoff
	for {
		err := fn(ctx, a)
		if err == nil {
			return nil
		}
		switch kind(err) {
		case Conflict:
		case Unknown:
			if !o.RetryUnknown {
				return err
			}
			a.Uncertain = true
		default:
			return err
		}
		if o.Attempts > 0 && a.N >= o.Attempts {
			return err
		}
		pause := bound/2 + rand.N(bound/2+1)
		bound = min(2*bound, o.MaxBackoff)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: gave up after %d attempts: %w", ctx.Err(), a.N, err)
		case <-t.C:
		}
		a.N++
	}
}

// conflictStates are the SQLSTATEs of a transaction the database rolled
// back to resolve a conflict: serialization_failure (PostgreSQL's, and
// MySQL's deadlock), deadlock_detected, lock_not_available (PostgreSQL's
// lock_timeout).
var conflictStates = map[string]bool{"40001": true, "40P01": true, "55P03": true}

// KindOf classifies err for drivers whose server errors expose their
// SQLSTATE through a SQLState() string method (pgx's *pgconn.PgError,
// lib/pq's *pq.Error):
//
//   - a server error: [Conflict] for 40001, 40P01 and 55P03, else [Final];
//   - a connection error with a SafeToRetry() bool method (pgx's way of
//     saying whether anything was sent): [Conflict] when it returns true,
//     else [Unknown];
//   - a network error, an unexpected EOF, or the context's end: [Unknown];
//   - anything else (a client-side error): [Final].
func KindOf(err error) Kind {
	if err == nil {
		return Final
	}
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		if conflictStates[st.SQLState()] {
			return Conflict
		}
		return Final
	}
	var safe interface{ SafeToRetry() bool }
	if errors.As(err, &safe) {
		if safe.SafeToRetry() {
			return Conflict
		}
		return Unknown
	}
	return Transport(err)
}

// Transport classifies the errors every driver shares: database/sql's
// driver.ErrBadConn (which a driver returns only when nothing was sent) is
// [Conflict]; a network error, an unexpected EOF, a closed connection, or
// the context's end is [Unknown] — the operation was sent, or may have
// been, and its answer was lost; anything else is [Final]. Stores call it
// after checking their driver's own errors.
func Transport(err error) Kind {
	var ne net.Error
	switch {
	case err == nil:
		return Final
	case errors.Is(err, driver.ErrBadConn):
		return Conflict
	case errors.As(err, &ne), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Unknown
	}
	return Final
}
