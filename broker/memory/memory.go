package memory

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
)

// Options configures the in-memory store. The zero value and nil are
// valid.
type Options struct {
	// StoreOptions: LeaseTTL defaults to 30s; MaxMessageBytes to 0, no
	// limit (a larger body is refused with a [*classify.TooLargeError]).
	broker.StoreOptions
	// Now returns the current time, for leases (Record.LeaseExpires is
	// read on it: a replayer compares it with time.Now). Default time.Now.
	Now func() time.Time
}

// driver is the in-memory [broker.Driver]. It is safe for concurrent use.
type driver struct {
	mu    sync.Mutex
	dests map[string]*queue
	ttl   time.Duration
	limit int
	now   func() time.Time
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
	index      *broker.Indexed // computed on first use (see indexed)
}

var (
	_ broker.Driver       = (*driver)(nil)
	_ broker.Limiter      = (*driver)(nil)
	_ broker.Lister       = (*driver)(nil)
	_ broker.Purger       = (*driver)(nil)
	_ broker.Aser         = (*driver)(nil)
	_ broker.BatchSettler = (*driver)(nil)
	_ broker.Batcher      = (*driver)(nil)
)

// New returns an empty in-memory store.
func New(opts *Options) *broker.Store {
	var o Options
	if opts != nil {
		o = *opts
	}
	b := &driver{dests: map[string]*queue{}, ttl: 30 * time.Second, now: time.Now, limit: max(o.MaxMessageBytes, 0)}
	if o.LeaseTTL > 0 {
		b.ttl = o.LeaseTTL
	}
	if o.Now != nil {
		b.now = o.Now
	}
	return broker.NewStore("memory", b, &o.StoreOptions)
}

// MaxMessageBytes implements [broker.Limiter].
func (b *driver) MaxMessageBytes(string) int { return b.limit }

// As implements [broker.Aser]; the memory store has no native client.
func (b *driver) As(any) bool { return false }

// Publish stores a copy of m at the end of destination. It is durable for
// the life of the process as soon as it returns.
func (b *driver) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := m.Clone()
	c.DeliveryAttempt = 0
	b.mu.Lock()
	defer b.mu.Unlock()
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
func (b *driver) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
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
			Envelope: e.env, Deliveries: e.deliveries, Lease: e.lease, LeaseExpires: e.leaseUntil,
		})
	}
	return out, nil
}

// Renew extends r's lease to LeaseTTL from now. It fails with
// [broker.ErrLeaseLost] if the record was leased again, released or
// acknowledged since; a lease that expired without anyone taking the
// record over is still r's.
func (b *driver) Renew(ctx context.Context, r *broker.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.leased(r)
	if e == nil {
		return fmt.Errorf("memory: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	e.leaseUntil = b.now().Add(b.ttl)
	r.LeaseExpires = e.leaseUntil
	return nil
}

// leased returns r's entry while r's lease is its lease, or nil. b.mu is
// held.
func (b *driver) leased(r *broker.Record) *entry {
	q := b.dests[r.Destination]
	if q == nil {
		return nil
	}
	e := q.find(r.ID)
	if e == nil || e.acked || e.lease == "" || e.lease != r.Lease {
		return nil
	}
	return e
}

// PublishBatch implements [broker.Batcher]: the messages stored at the
// end of destination, in order, under one lock.
func (b *driver) PublishBatch(ctx context.Context, destination string, ms []*broker.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cs := make([]*broker.Message, len(ms))
	for i, m := range ms {
		cs[i] = m.Clone()
		cs[i].DeliveryAttempt = 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.dests[destination]
	if q == nil {
		q = &queue{}
		b.dests[destination] = q
	}
	for _, c := range cs {
		q.seq++
		q.order = append(q.order, &entry{seq: q.seq, msg: c})
		q.live++
	}
	return nil
}

// RenewBatch implements [broker.BatchSettler]: Renew of each of rs,
// under one lock.
func (b *driver) RenewBatch(ctx context.Context, rs []*broker.Record) []error {
	errs := make([]error, len(rs))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, r := range rs {
		e := b.leased(r)
		if e == nil {
			errs[i] = fmt.Errorf("memory: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
			continue
		}
		e.leaseUntil = b.now().Add(b.ttl)
		r.LeaseExpires = e.leaseUntil
	}
	return errs
}

// AckBatch implements [broker.BatchSettler]: Ack of each of rs, under one
// lock.
func (b *driver) AckBatch(ctx context.Context, rs []*broker.Record) []error {
	errs := make([]error, len(rs))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, r := range rs {
		errs[i] = b.settleLocked(r, true)
	}
	return errs
}

// Ack removes r for good. It fails with [broker.ErrLeaseLost] if r's lease
// expired and the record was leased again, or was already acknowledged.
func (b *driver) Ack(ctx context.Context, r *broker.Record) error {
	return b.settle(ctx, r, true)
}

// Release makes r available to fetchers again at once.
func (b *driver) Release(ctx context.Context, r *broker.Record) error {
	return b.settle(ctx, r, false)
}

func (b *driver) settle(ctx context.Context, r *broker.Record, ack bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.settleLocked(r, ack)
}

// settleLocked settles r; b.mu is held.
func (b *driver) settleLocked(r *broker.Record, ack bool) error {
	e := b.leased(r)
	if e == nil {
		return fmt.Errorf("memory: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	q := b.dests[r.Destination]
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

// Close does nothing: the data lives as long as the process, shared by
// every handle ([Reopen]); the portable store refuses calls on a closed
// handle.
func (b *driver) Close() error { return nil }

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// of returns the memory driver under s, or nil.
func of(s *broker.Store) *driver {
	if s == nil {
		return nil
	}
	d, _ := s.Driver().(*driver)
	return d
}

// Len returns the number of unacknowledged records in destination of a
// store made by [New], leased or not; 0 for any other store.
func Len(s *broker.Store, destination string) int {
	b := of(s)
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.dests[destination]; q != nil {
		return q.live
	}
	return 0
}

// Messages returns copies of the unacknowledged messages of destination
// of a store made by [New], in publish order, without leasing them; nil
// for any other store. Tests use it to see what a replay re-injected.
func Messages(s *broker.Store, destination string) []*broker.Message {
	b := of(s)
	if b == nil {
		return nil
	}
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

// ListCapabilities implements [broker.ListCapabler]: the memory store
// applies every list option itself.
func (b *driver) ListCapabilities() broker.ListCapabilities {
	return broker.ListCapabilities{Sorts: broker.SortKeys()[1:], Summaries: true, Total: true, MaxBytes: true}
}

// indexed returns what the store keeps of e beside its message, computed
// on first use. The caller holds b.mu.
func (e *entry) indexed() *broker.Indexed {
	if e.index == nil {
		if !e.decoded {
			e.env, e.envErr = broker.EnvelopeOf(e.msg)
			e.decoded = true
		}
		var x broker.Indexed
		if e.envErr == nil {
			x = broker.IndexOfEnvelope(e.env, int64(len(e.msg.Body)), e.msg.Headers)
		} else {
			x = broker.IndexOf(&broker.Message{Body: e.msg.Body, Headers: e.msg.Headers})
		}
		e.index = &x
	}
	return e.index
}

// List implements [broker.Lister]: unacknowledged records (the memory
// store keeps no history, so IncludeReplayed adds nothing), ordered by
// sequence number, then destination, or by opts.Sort and then so. The
// cursor is "seq:destination" of the page's last record, preceded by its
// sort value and ":" in a sorted listing.
func (b *driver) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	if err := ctx.Err(); err != nil {
		return broker.Page{}, err
	}
	type pos struct {
		key  int64
		seq  uint64
		dest string
	}
	cmpPos := func(x, y pos) int {
		return cmp.Or(cmp.Compare(x.key, y.key), cmp.Compare(x.seq, y.seq), cmp.Compare(x.dest, y.dest))
	}
	var after pos
	if opts.After != "" {
		c := opts.After
		if opts.Sort != broker.SortWritten {
			k, rest, ok := strings.Cut(c, ":")
			v, err := strconv.ParseInt(k, 10, 64)
			if !ok || err != nil {
				return broker.Page{}, fmt.Errorf("memory: list cursor %q: %w", opts.After, broker.ErrInvalidArgument)
			}
			after.key, c = v, rest
		}
		s, d, ok := strings.Cut(c, ":")
		v, err := strconv.ParseUint(s, 10, 64)
		if !ok || err != nil {
			return broker.Page{}, fmt.Errorf("memory: list cursor %q: %w", opts.After, broker.ErrInvalidArgument)
		}
		after.seq, after.dest = v, d
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	type item struct {
		p pos
		e *entry
	}
	var all []item
	total := 0
	for name, q := range b.dests {
		if opts.Destination != "" && name != opts.Destination {
			continue
		}
		for _, e := range q.order {
			if e.acked || !b.matches(e, name, opts.Filter) {
				continue
			}
			total++
			p := pos{seq: e.seq, dest: name}
			if opts.Sort != broker.SortWritten {
				p.key = broker.SortValue(&e.indexed().Summary, opts.Sort)
			}
			if opts.After != "" && ((!opts.Descending && cmpPos(p, after) <= 0) || (opts.Descending && cmpPos(p, after) >= 0)) {
				continue
			}
			all = append(all, item{p, e})
		}
	}
	slices.SortFunc(all, func(x, y item) int {
		if opts.Descending {
			return cmpPos(y.p, x.p)
		}
		return cmpPos(x.p, y.p)
	})
	var page broker.Page
	if opts.Total {
		page.Total = total
	}
	bytes := 0
	for i, it := range all {
		full := i == opts.Limit
		if !opts.Summaries && i > 0 && opts.MaxBytes > 0 && bytes+len(it.e.msg.Body) > opts.MaxBytes {
			full = true
		}
		if full {
			last := all[i-1].p
			page.Next = strconv.FormatUint(last.seq, 10) + ":" + last.dest
			if opts.Sort != broker.SortWritten {
				page.Next = strconv.FormatInt(last.key, 10) + ":" + page.Next
			}
			break
		}
		bytes += len(it.e.msg.Body)
		st := broker.StatusPending
		if it.e.lease != "" && now.Before(it.e.leaseUntil) {
			st = broker.StatusLeased
		}
		r := &broker.Record{ID: strconv.FormatUint(it.e.seq, 10), Destination: it.p.dest, Deliveries: it.e.deliveries}
		e := broker.Entry{Status: st, Record: r}
		if opts.Summaries {
			x := it.e.indexed()
			sum := x.Summary
			sum.Source = broker.SourceValue(x.Attrs, opts.Filter.SourcePointer)
			e.Summary = &sum
		} else {
			it.e.indexed()
			r.Message, r.Envelope = it.e.msg.Clone(), it.e.env
		}
		page.Entries = append(page.Entries, e)
	}
	return page, nil
}

// matches reports whether the entry e of destination dest matches f. The
// caller holds b.mu.
func (b *driver) matches(e *entry, dest string, f broker.Filter) bool {
	if f.IsZero() {
		return true
	}
	if len(f.IDs) > 0 && !slices.Contains(f.IDs, strconv.FormatUint(e.seq, 10)) {
		return false
	}
	g := f
	g.IDs = nil
	if g.IsZero() {
		return true
	}
	x := e.indexed()
	if e.envErr != nil {
		return false
	}
	g.Text, g.Sources, g.SourcePrefix = "", nil, "" // matched on x, computed once
	return g.Match(e.env) && f.MatchIndexed(*x)
}

// Destinations implements [broker.Lister].
func (b *driver) Destinations(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var ds []string
	for name, q := range b.dests {
		if q.live > 0 {
			ds = append(ds, name)
		}
	}
	slices.Sort(ds)
	return ds, nil
}

// Purge implements [broker.Purger]. The memory store keeps no replayed
// records, so only IncludePending deletes anything.
func (b *driver) Purge(ctx context.Context, req broker.PurgeRequest) (broker.PurgeResult, error) {
	if err := ctx.Err(); err != nil {
		return broker.PurgeResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	var res broker.PurgeResult
	deleted := map[*entry]bool{}
	names := make([]string, 0, len(b.dests))
	for name := range b.dests {
		if req.Destination == "" || name == req.Destination {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		q := b.dests[name]
		for _, e := range q.order {
			if e.acked || !req.IncludePending || (e.lease != "" && now.Before(e.leaseUntil)) {
				continue
			}
			r := &broker.Record{ID: strconv.FormatUint(e.seq, 10), Destination: name, Message: e.msg}
			if !req.Filter.MatchRecord(r) {
				continue
			}
			deleted[e] = true
			id := r.ID
			if req.Destination == "" {
				id = name + "/" + id
			}
			res.IDs = append(res.IDs, id)
			res.BlobURIs = append(res.BlobURIs, blobURIs(e.msg)...)
		}
	}
	slices.Sort(res.BlobURIs)
	res.BlobURIs = slices.Compact(res.BlobURIs)
	if len(res.BlobURIs) > 0 {
		still := map[string]bool{}
		for _, q := range b.dests {
			for _, e := range q.order {
				if !e.acked && !deleted[e] {
					for _, u := range blobURIs(e.msg) {
						still[u] = true
					}
				}
			}
		}
		for _, u := range res.BlobURIs {
			if !still[u] {
				res.Orphaned = append(res.Orphaned, u)
			}
		}
	}
	if req.DryRun {
		return res, nil
	}
	for _, q := range b.dests {
		for _, e := range q.order {
			if deleted[e] {
				e.acked, e.lease = true, ""
				q.live--
				q.removed++
			}
		}
		q.compact()
	}
	return res, nil
}

// blobURIs returns the offload URIs the envelope in m references.
func blobURIs(m *broker.Message) []string {
	env, err := broker.EnvelopeOf(m)
	if err != nil {
		return nil
	}
	var us []string
	if env.Geometry.OffloadURI != "" {
		us = append(us, env.Geometry.OffloadURI)
	}
	if env.RawPayloadOffloadURI != "" {
		us = append(us, env.RawPayloadOffloadURI)
	}
	return us
}

// Reopen returns a second handle on the data of a store made by [New], as
// another process would open a shared store: closing one handle leaves the
// other working. It returns nil for any other store.
func Reopen(s *broker.Store) *broker.Store {
	b := of(s)
	if b == nil {
		return nil
	}
	return broker.NewStore("memory", b, nil)
}

// ConsumerOptions configures [NewConsumer]. The zero value and nil are
// valid.
type ConsumerOptions struct {
	broker.ConsumerOptions
	// Filter selects the records consumed. Zero: all.
	Filter broker.Filter
	// PollInterval is how long the consumer waits after finding the
	// destination empty. Default 1s.
	PollInterval time.Duration
}

// NewConsumer returns a consumer of destination of the store s (made by
// [New], or any other store: it is [broker.StoreSource]) that processes
// with proc. A message that is not acknowledged stays leased until its
// lease expires (Options.LeaseTTL), then comes again.
func NewConsumer(s *broker.Store, destination string, proc *broker.Processor, opts *ConsumerOptions) (*broker.Consumer, error) {
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	return broker.NewStoreConsumer(s, destination, proc, &o.ConsumerOptions,
		&broker.StoreSourceOptions{Filter: o.Filter, PollInterval: o.PollInterval})
}
