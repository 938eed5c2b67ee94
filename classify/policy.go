package classify

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy defaults, used for zero fields of a [Policy].
const (
	DefaultMaxAttempts   = 5
	DefaultBaseDelay     = 500 * time.Millisecond
	DefaultMaxDelay      = 30 * time.Second
	DefaultMaxRetryAfter = 5 * time.Minute
)

// Action is what to do with a failed event.
type Action uint8

// The actions a [Decision] can carry.
const (
	// ActionRetry: retry in place after Decision.Delay.
	ActionRetry Action = iota + 1
	// ActionDeadLetter: build the envelope and write it to the
	// destination of Decision.Route.
	ActionDeadLetter
)

// String returns "retry" or "dead_letter".
func (a Action) String() string {
	switch a {
	case ActionRetry:
		return "retry"
	case ActionDeadLetter:
		return "dead_letter"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Route is which kind of dead-letter destination an event goes to: the
// retry destination or the poison destination. Its value is the name
// written to the dlq.v1 envelope's destination field and to the
// dlq-destination header. (A destination, everywhere else in geodlq, is
// the name of a topic, queue, stream or table; a Route picks one of the
// two a source topic has.)
type Route string

// The routes.
const (
	// RouteRetry holds replayable events (transient, unknown) whose retry
	// budget is spent; a replayer may re-inject them automatically.
	RouteRetry Route = "retry"
	// RoutePoison holds deterministic failures; they wait for repair.
	RoutePoison Route = "poison"
)

// String returns "retry" or "poison", "none" for the zero Route (a
// [Decision] to retry has none), or Route("…") quoted for an invalid value.
func (r Route) String() string {
	if r.Valid() {
		return string(r)
	}
	if r == "" {
		return "none"
	}
	return fmt.Sprintf("Route(%q)", string(r))
}

// Valid reports whether r is [RouteRetry] or [RoutePoison].
func (r Route) Valid() bool { return r == RouteRetry || r == RoutePoison }

// MarshalText implements [encoding.TextMarshaler]; an invalid route is an
// error wrapping [ErrUnknownName].
func (r Route) MarshalText() ([]byte, error) {
	if !r.Valid() {
		return nil, fmt.Errorf("classify: %w: route %q", ErrUnknownName, string(r))
	}
	return []byte(r), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (r *Route) UnmarshalText(b []byte) error {
	v, err := ParseRoute(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// ParseRoute returns the route named "retry" or "poison".
func ParseRoute(s string) (Route, error) {
	if r := Route(s); r.Valid() {
		return r, nil
	}
	return "", fmt.Errorf("classify: %w: route %q", ErrUnknownName, s)
}

// RouteFor returns where events of class c are dead-lettered: the retry
// destination for replayable classes, poison for the rest.
func RouteFor(c Class) Route {
	if c.Replayable() {
		return RouteRetry
	}
	return RoutePoison
}

// Decision is the outcome of [Policy.Decide].
type Decision struct {
	// Action is ActionRetry or ActionDeadLetter.
	Action Action
	// Delay is how long to wait before retrying (ActionRetry only).
	Delay time.Duration
	// Route is where to dead-letter (ActionDeadLetter only).
	Route Route
	// Class is the error's class.
	Class Class
	// Attempt is the attempt that failed (at least 1).
	Attempt int
}

// Policy is a retry policy: exponential backoff with full jitter and a
// budget of attempts. The zero value uses the defaults; a Policy is a value
// and safe for concurrent use as long as Rand is.
type Policy struct {
	// MaxAttempts is the total number of attempts, the first included,
	// before a replayable failure is dead-lettered. Default 5.
	MaxAttempts int
	// BaseDelay is the backoff ceiling after the first attempt. Default
	// 500ms.
	BaseDelay time.Duration
	// MaxDelay caps the backoff ceiling. Default 30s.
	MaxDelay time.Duration
	// MaxRetryAfter is the longest delay a failure may ask for (see
	// [RetryAfter]: a server's Retry-After) and still be waited out in
	// place. A failure asking for longer is dead-lettered to the retry
	// destination at once, so that the consumer is not held; a replayer
	// re-injects it later. Default 5m.
	MaxRetryAfter time.Duration
	// Classifier classifies errors; nil uses the default rules.
	Classifier *Classifier
	// Rand returns a uniform float64 in [0, 1). Nil uses math/rand/v2.
	// Inject a fixed source to make delays reproducible in tests.
	Rand func() float64
}

func (p Policy) maxAttempts() int {
	if p.MaxAttempts > 0 {
		return p.MaxAttempts
	}
	return DefaultMaxAttempts
}

// Ceiling returns the backoff ceiling after the given failed attempt:
// min(MaxDelay, BaseDelay·2^(attempt-1)). It never overflows.
func (p Policy) Ceiling(attempt int) time.Duration {
	base, limit := p.BaseDelay, p.MaxDelay
	if base <= 0 {
		base = DefaultBaseDelay
	}
	if limit <= 0 {
		limit = DefaultMaxDelay
	}
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt; i++ {
		if d >= limit || d > limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}

// Backoff returns a fully jittered delay, uniform over [0, Ceiling(attempt)].
func (p Policy) Backoff(attempt int) time.Duration {
	r := p.Rand
	if r == nil {
		r = rand.Float64
	}
	f := r()
	if f < 0 || f >= 1 {
		f = 0
	}
	return time.Duration(f * float64(p.Ceiling(attempt)))
}

// Decide says what to do after attempt (1-based) failed with err:
//   - a deterministic class is dead-lettered to the poison destination at
//     once, whatever the attempt;
//   - a replayable class (transient, unknown) is retried after a jittered
//     backoff while attempt < MaxAttempts, then dead-lettered to the retry
//     destination;
//   - when err asks for a delay ([RetryAfter], or an error in its chain
//     with a RetryAfter() time.Duration method, such as an HTTP 429 or 503
//     carrying Retry-After), the retry waits at least that long, without
//     jitter; a delay over MaxRetryAfter dead-letters to the retry
//     destination at once.
//
// Decide is a pure function of its arguments and the policy (and Rand).
// A nil err is treated as unknown.
func (p Policy) Decide(err error, attempt int) Decision {
	if attempt < 1 {
		attempt = 1
	}
	class := p.Classifier.Classify(err)
	if !class.Valid() {
		class = ClassUnknown
	}
	d := Decision{Class: class, Attempt: attempt}
	wait := RetryAfterOf(err)
	limit := p.MaxRetryAfter
	if limit <= 0 {
		limit = DefaultMaxRetryAfter
	}
	switch {
	case class.Deterministic():
		d.Action, d.Route = ActionDeadLetter, RoutePoison
	case attempt >= p.maxAttempts(), wait > limit:
		d.Action, d.Route = ActionDeadLetter, RouteRetry
	default:
		d.Action, d.Delay = ActionRetry, max(p.Backoff(attempt), wait)
	}
	return d
}
