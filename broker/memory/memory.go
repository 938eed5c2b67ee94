package memory

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// Options configures a [Broker]. The zero value and nil are valid.
type Options struct {
	// LeaseTTL is how long a fetched record stays invisible to other
	// fetchers before it is redelivered. Default 30s.
	LeaseTTL time.Duration
	// MaxMessageBytes refuses bodies larger than this with
	// [classify.ErrTooLarge]. Default 0: no limit.
	MaxMessageBytes int
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

// Broker is an in-memory broker. It is safe for concurrent use.
type Broker struct {
	mu     sync.Mutex
	dests  map[string]*queue
	ttl    time.Duration
	limit  int
	now    func() time.Time
	closed bool
}

type queue struct {
	seq     uint64
	order   []*entry // publish order (ascending seq); acked entries are compacted away
	live    int      // unacknowledged entries
	removed int
}

// find returns the entry whose record id is id, or nil. Ids are the
// decimal sequence numbers, and order is sorted by them.
func (q *queue) find(id string) *entry {
	seq, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return nil
	}
	i, ok := slices.BinarySearchFunc(q.order, seq, func(e *entry, seq uint64) int { return cmp.Compare(e.seq, seq) })
	if !ok {
		return nil
	}
	return q.order[i]
}

type entry struct {
	seq        uint64
	msg        *broker.Message
	env        *envelope.Envelope
	envErr     error
	decoded    bool
	lease      string
	leaseUntil time.Time
	deliveries int
	acked      bool
}

var (
	_ broker.Publisher        = (*Broker)(nil)
	_ broker.DeadLetterSource = (*Broker)(nil)
	_ broker.Limiter          = (*Broker)(nil)
)

// New returns an empty broker.
func New(opts *Options) *Broker {
	b := &Broker{dests: map[string]*queue{}, ttl: 30 * time.Second, now: time.Now}
	if opts != nil {
		if opts.LeaseTTL > 0 {
			b.ttl = opts.LeaseTTL
		}
		b.limit = opts.MaxMessageBytes
		if opts.Now != nil {
			b.now = opts.Now
		}
	}
	return b
}

// MaxMessageBytes implements [broker.Limiter].
func (b *Broker) MaxMessageBytes(string) int { return b.limit }

// Publish stores a copy of m at the end of destination. It is durable for
// the life of the process as soon as it returns.
func (b *Broker) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m == nil {
		return fmt.Errorf("memory: nil message")
	}
	if b.limit > 0 && len(m.Body) > b.limit {
		return &classify.TooLargeError{Destination: destination, Size: len(m.Body), Limit: b.limit}
	}
	c := m.Clone()
	c.DeliveryAttempt = 0
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return broker.ErrClosed
	}
	q := b.dests[destination]
	if q == nil {
		q = &queue{}
		b.dests[destination] = q
	}
	q.seq++
	q.order = append(q.order, &entry{seq: q.seq, msg: c})
	q.live++
	return nil
}

// Fetch leases up to max unacknowledged, unleased records of destination
// that match f, oldest first. Records whose body is not a valid envelope
// match only the zero filter.
func (b *Broker) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, broker.ErrClosed
	}
	q := b.dests[destination]
	if q == nil {
		return nil, nil
	}
	now := b.now()
	var out []*broker.Record
	for _, e := range q.order {
		if len(out) == max {
			break
		}
		if e.acked || (e.lease != "" && now.Before(e.leaseUntil)) {
			continue
		}
		if !f.IsZero() {
			if !e.decoded {
				e.env, e.envErr = broker.EnvelopeOf(e.msg)
				e.decoded = true
			}
			if e.envErr != nil || !f.Match(e.env) {
				continue
			}
		}
		e.lease = newToken()
		e.leaseUntil = now.Add(b.ttl)
		e.deliveries++
		m := e.msg.Clone()
		m.DeliveryAttempt = e.deliveries
		out = append(out, &broker.Record{
			ID: strconv.FormatUint(e.seq, 10), Destination: destination, Message: m,
			Envelope: e.env, Deliveries: e.deliveries, Lease: e.lease,
		})
	}
	return out, nil
}

// Ack removes r for good. It fails with [broker.ErrLeaseLost] if r's lease
// expired and the record was leased again, or was already acknowledged.
func (b *Broker) Ack(ctx context.Context, r *broker.Record) error {
	return b.settle(ctx, r, true)
}

// Release makes r available to fetchers again at once.
func (b *Broker) Release(ctx context.Context, r *broker.Record) error {
	return b.settle(ctx, r, false)
}

func (b *Broker) settle(ctx context.Context, r *broker.Record, ack bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("memory: nil record")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return broker.ErrClosed
	}
	q := b.dests[r.Destination]
	var e *entry
	if q != nil {
		e = q.find(r.ID)
	}
	if e == nil || e.acked || e.lease != r.Lease {
		return fmt.Errorf("memory: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	e.lease, e.leaseUntil = "", time.Time{}
	if ack {
		e.acked = true
		q.live--
		q.removed++
		if q.removed > 1024 && q.removed > len(q.order)/2 {
			q.compact()
		}
	}
	return nil
}

func (q *queue) compact() {
	kept := q.order[:0]
	for _, e := range q.order {
		if !e.acked {
			kept = append(kept, e)
		}
	}
	clear(q.order[len(kept):])
	q.order = kept
	q.removed = 0
}

// Len returns the number of unacknowledged records in destination, leased
// or not.
func (b *Broker) Len(destination string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.dests[destination]; q != nil {
		return q.live
	}
	return 0
}

// Messages returns copies of the unacknowledged messages of destination in
// publish order, without leasing them.
func (b *Broker) Messages(destination string) []*broker.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.dests[destination]
	if q == nil {
		return nil
	}
	var out []*broker.Message
	for _, e := range q.order {
		if !e.acked {
			out = append(out, e.msg.Clone())
		}
	}
	return out
}

// Close makes every later operation fail with [broker.ErrClosed].
func (b *Broker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
