package classify

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy defaults, used for zero fields of a [Policy].
const (
	DefaultMaxAttempts = 5
	DefaultBaseDelay   = 500 * time.Millisecond
	DefaultMaxDelay    = 30 * time.Second
)

// Action is what to do with a failed event.
type Action uint8

// The actions a [Decision] can carry.
const (
	// ActionRetry: retry in place after Decision.Delay.
	ActionRetry Action = iota + 1
	// ActionDeadLetter: build the envelope and write it to
	// Decision.Destination.
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

// Destination is the kind of dead-letter destination an event goes to.
type Destination uint8

// The dead-letter destinations.
const (
	// DestinationRetry holds replayable events (transient, unknown) whose
	// retry budget is spent; a replayer may re-inject them automatically.
	DestinationRetry Destination = iota + 1
	// DestinationPoison holds deterministic failures; they wait for repair.
	DestinationPoison
)

// String returns "retry" or "poison", the names used in envelopes and
// headers, and "none" for the zero value.
func (d Destination) String() string {
	switch d {
	case 0:
		return "none"
	case DestinationRetry:
		return "retry"
	case DestinationPoison:
		return "poison"
	}
	return fmt.Sprintf("Destination(%d)", uint8(d))
}

// ParseDestination returns the destination named "retry" or "poison".
func ParseDestination(s string) (Destination, error) {
	switch s {
	case "retry":
		return DestinationRetry, nil
	case "poison":
		return DestinationPoison, nil
	}
	return 0, fmt.Errorf("classify: %w: destination %q", ErrUnknownName, s)
}

// DestinationFor returns where events of class c are dead-lettered: the
// retry destination for replayable classes, poison for the rest.
func DestinationFor(c Class) Destination {
	if c.Replayable() {
		return DestinationRetry
	}
	return DestinationPoison
}

// Decision is the outcome of [Policy.Decide].
type Decision struct {
	// Action is ActionRetry or ActionDeadLetter.
	Action Action
	// Delay is how long to wait before retrying (ActionRetry only).
	Delay time.Duration
	// Destination is where to dead-letter (ActionDeadLetter only).
	Destination Destination
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
//     destination.
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
	switch {
	case class.Deterministic():
		d.Action, d.Destination = ActionDeadLetter, DestinationPoison
	case attempt >= p.maxAttempts():
		d.Action, d.Destination = ActionDeadLetter, DestinationRetry
	default:
		d.Action, d.Delay = ActionRetry, p.Backoff(attempt)
	}
	return d
}
