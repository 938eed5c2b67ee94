// Package clocklease is the lease of the dead-letter stores whose broker
// does not refuse a stale handle: Pub/Sub without exactly-once delivery
// silently ignores an expired ack id, and an SQS standard queue accepts a
// superseded receipt handle (DeleteMessage answers success). Such a store
// keeps, in broker.Record.Lease, the broker's handle together with its
// deadline by the local clock, and refuses to use a handle whose deadline,
// less a safety margin ([Margin]), has passed.
//
// A [Codec] holds what differs between stores — the separator in the
// encoded lease and the wording of errors — so each store's leases and
// errors read as they always have.
package clocklease

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/geodlq/geodlq/broker"
)

// Margin returns the safety margin of a lease of length d: a tenth of it,
// at most 1 s. A handle is refused once less than the margin is left.
func Margin(d time.Duration) time.Duration { return min(d/10, time.Second) }

// Codec encodes, decodes and checks one store's leases. The zero value is
// not useful; a store declares one.
type Codec struct {
	// Prefix starts every error message, e.g. "sqs".
	Prefix string
	// Sep separates the deadline from the handle in an encoded lease. It
	// must not occur in the decimal deadline.
	Sep string
	// Expired names, in the error of an expired lease, what ran out, e.g.
	// "visibility timeout ended".
	Expired string
}

// Encode returns the lease of handle until deadline: the deadline in Unix
// nanoseconds, Sep, and the handle.
func (c Codec) Encode(deadline time.Time, handle string) string {
	return strconv.FormatInt(deadline.UnixNano(), 10) + c.Sep + handle
}

// Decode returns the deadline and handle of a lease Encode made. Anything
// else, or an empty handle, is an error "<Prefix>: malformed lease …".
func (c Codec) Decode(lease string) (deadline time.Time, handle string, err error) {
	d, h, ok := strings.Cut(lease, c.Sep)
	ns, err := strconv.ParseInt(d, 10, 64)
	if !ok || err != nil || h == "" {
		return time.Time{}, "", fmt.Errorf("%s: malformed lease %q", c.Prefix, lease)
	}
	return time.Unix(0, ns), h, nil
}

// Check returns the handle of r's lease for operation op ("ack",
// "release"), or an error: for a nil record, a malformed lease, or a lease
// with less than margin left by the local clock. The last wraps
// [broker.ErrLeaseLost] (another consumer may hold the message by now) and
// says how long ago the deadline passed (a negative duration when it is
// still ahead, within the margin).
func (c Codec) Check(r *broker.Record, op string, margin time.Duration) (handle string, err error) {
	if r == nil {
		return "", fmt.Errorf("%s: %s: nil record", c.Prefix, op)
	}
	deadline, handle, err := c.Decode(r.Lease)
	if err != nil {
		return "", err
	}
	if left := time.Until(deadline); left < margin {
		return "", fmt.Errorf("%s: %s %s: %s %v ago (another consumer may hold it): %w",
			c.Prefix, op, r.ID, c.Expired, (-left).Round(time.Millisecond), broker.ErrLeaseLost)
	}
	return handle, nil
}

// Settled remembers the handles a store settled (acknowledged or
// released) until their deadlines pass, so that the store refuses to
// renew or settle them again: a broker that accepts a stale handle
// would otherwise extend, or settle, a record another consumer now holds.
// The zero value is ready; it is safe for concurrent use.
type Settled struct {
	mu sync.Mutex
	m  map[string]time.Time
}

// Mark remembers handle until deadline.
func (s *Settled) Mark(handle string, deadline time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]time.Time{}
	}
	if len(s.m) >= 4096 {
		now := time.Now()
		for h, d := range s.m {
			if now.After(d) {
				delete(s.m, h)
			}
		}
	}
	s.m[handle] = deadline
}

// Has reports whether handle was marked.
func (s *Settled) Has(handle string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[handle]
	return ok
}
