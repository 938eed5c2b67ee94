package kafka

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
)

// errRetired is returned by a member that left its group while a Fetch was
// under way; the store retries with a new member.
var errRetired = errors.New("kafka: replay group member retired")

// commitDelay is how long the committer lets acknowledgements gather
// before it commits them.
const commitDelay = 100 * time.Millisecond

// Entry states.
const (
	stateAvailable uint8 = iota
	stateLeased
	stateAcked
)

// member is a store's membership in the replay group of one destination:
// a consumer client, the records it read and has not committed, and their
// leases.
type member struct {
	d     *driver
	dest  string
	group string
	id    string // prefix of every lease token this member hands out
	cl    *kgo.Client

	fetchMu sync.Mutex // one Fetch at a time

	pollCtx    context.Context
	pollCancel context.CancelFunc
	pollDone   chan struct{}

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every state change
	parts    map[int32]*part
	active   bool   // partitions assigned since the last revoke
	session  uint64 // incremented on every assignment
	dead     bool   // left (or leaving) the group: every lease is lost
	seq      uint64
	leased   map[*entry]struct{}
	lastUse  time.Time
	bufBytes int
	pollErr  error // the last fetch error the poller saw

	kick chan struct{} // asks the committer to commit
	done chan struct{} // closed on shutdown
	once sync.Once
}

// part is the state of one assigned partition.
type part struct {
	entries   []*entry // offset order; entries[0] is the oldest unacknowledged record
	next      int64    // offset after the last record read; -1 before the first
	start     int64    // the group's committed offset at assignment; -1 none
	fetched   bool     // the committed offset (and start, skip) are known
	skip      []span   // offsets acknowledged past start, from the commit metadata
	committed int64    // last offset this member committed; -1 none
	meta      string   // metadata of that commit
	epoch     int32    // leader epoch of the last acknowledged record
	acks      uint64   // acknowledgements made by this member
	commAcks  uint64   // acks covered by this member's last commit
	revoking  bool
}

// entry is one record read and not yet committed past.
type entry struct {
	rec      *kgo.Record // nil once acknowledged
	offset   int64
	epoch    int32
	at       int64 // publish time in ns, for ordering across partitions
	size     int
	state    uint8
	lease    string
	leasedAt time.Time
	decoded  bool
	env      *envelope.Envelope
}

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// memberFor returns the live member for destination, joining its group if
// needed. It returns nil, nil when the topic does not exist.
func (d *driver) memberFor(ctx context.Context, destination string) (*member, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, broker.ErrClosed
	}
	if m := d.members[destination]; m != nil {
		d.mu.Unlock()
		return m, nil
	}
	d.mu.Unlock()

	// Join only groups of existing topics: a member of a missing topic
	// would see it appear only at its next metadata refresh.
	if ok, err := d.topicExists(ctx, destination); err != nil || !ok {
		return nil, err
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, broker.ErrClosed
	}
	if m := d.members[destination]; m != nil {
		return m, nil
	}
	m := &member{
		d:        d,
		dest:     destination,
		group:    d.group(destination),
		id:       newToken(),
		changed:  make(chan struct{}),
		parts:    map[int32]*part{},
		leased:   map[*entry]struct{}{},
		lastUse:  time.Now(),
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		pollDone: make(chan struct{}),
	}
	m.pollCtx, m.pollCancel = context.WithCancel(context.Background())
	opts := slices.Clone(d.base)
	opts = append(opts,
		// Cooperative: a rebalance moves only the partitions that change
		// owner, so members keep fetching (and holding leases in) the
		// partitions they keep, and a member leaving never makes the
		// others give up theirs.
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		// A partition newly assigned is fetched from only once the
		// fetch in flight returns: keep that wait short.
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.RebalanceTimeout(d.lease+30*time.Second),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	opts = append(opts, d.copts...)
	opts = append(opts,
		kgo.ConsumerGroup(m.group),
		kgo.ConsumeTopics(destination),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(m.onAssigned),
		kgo.OnPartitionsRevoked(m.onRevoked),
		kgo.OnPartitionsLost(m.onLost),
		kgo.OnOffsetsFetched(m.onFetched),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		m.pollCancel()
		return nil, fmt.Errorf("kafka: consumer for %q: %w", destination, err)
	}
	m.cl = cl
	d.members[destination] = m
	go m.poller()
	go m.watch()
	go m.committer()
	return m, nil
}

// memberOf returns the live member for destination, or nil.
func (d *driver) memberOf(destination string) *member {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.members[destination]
}

// topicExists asks the cluster, bypassing the client's metadata cache
// (which remembers a missing topic for MetadataMinAge), whether topic
// exists. The response refreshes the cache for the offset listings that
// follow.
func (d *driver) topicExists(ctx context.Context, topic string) (bool, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, d.cl)
	if err != nil {
		return false, fmt.Errorf("kafka: looking up topic %q: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case err == nil:
			return true, nil
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			return false, nil
		default:
			return false, fmt.Errorf("kafka: looking up topic %q: %w", topic, err)
		}
	}
	return false, nil
}

// retire removes m from the store and leaves its group.
func (d *driver) retire(m *member, why string) {
	d.mu.Lock()
	if d.members[m.dest] == m {
		delete(d.members, m.dest)
	}
	d.mu.Unlock()
	m.shutdown(why)
}

// Fetch leases up to max records of the topic destination that match f,
// oldest first: in offset order within a partition (so per key), and by
// [HeaderPublishedAt] (else the record timestamp) across partitions.
//
// The first Fetch of a destination joins its replay group and waits up to
// JoinWait for partitions. Each Fetch then reads the partitions this store
// holds up to their end offsets as of the call (within MaxBufferedBytes),
// so an empty result means: nothing available to this member now — every
// record is acknowledged, leased, not matching, or in partitions another
// member of the group holds.
//
// Records that do not match f are not returned and not leased; they stay
// in the store's buffer, unacknowledged, and hold the group's committed
// offset of their partition back until a Fetch that matches them (say, an
// unfiltered one) leases them and they are acknowledged. So a filtered
// replay never loses the records it skips, and Fetch always returns: it
// reads no further than the end offsets it found.
//
// A topic that does not exist holds nothing when the store creates topics
// (Options.Topics); otherwise it is an error wrapping [broker.ErrNoStore].
func (d *driver) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	if d.readOnly {
		return nil, errReadOnly
	}
	if err := validTopic(destination); err != nil {
		return nil, err
	}
	for range 3 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := d.memberFor(ctx, destination)
		if err != nil {
			return nil, err
		}
		if m == nil {
			if d.topics == nil {
				return nil, missingTopic(destination)
			}
			return nil, nil
		}
		recs, err := m.fetch(ctx, f, max)
		if errors.Is(err, errRetired) {
			continue
		}
		return recs, err
	}
	return nil, nil
}

// Ack marks r done. Within about 100ms the group's offset of r's
// partition is committed up to the oldest record not yet acknowledged,
// with r listed in the commit metadata when it lies past that record (see
// the package documentation); a crash before then redelivers r: at least
// once, which the idempotency key makes harmless. Ack fails with
// [broker.ErrLeaseLost] when r's lease was lost: the store left the group
// (LeaseTTL passed, or Close) or the partition went to another member.
func (d *driver) Ack(ctx context.Context, r *broker.Record) error {
	return d.settle(ctx, r, true)
}

// Renew restarts r's lease: LeaseTTL from now, while this store is still
// the group member holding r's partition under r's lease. It fails with
// [broker.ErrLeaseLost] when the lease was lost (as Ack does), and also
// while the partition is being handed to another member: the rebalance
// waits for the partition's leases, and a renewal would hold it up (the
// record can be released, and the new owner replays it).
func (d *driver) Renew(ctx context.Context, r *broker.Record) error {
	if d.readOnly {
		return errReadOnly
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p, off, err := parseID(r.ID)
	if err != nil {
		return err
	}
	m := d.memberOf(r.Destination)
	if m == nil || !strings.HasPrefix(r.Lease, m.id+":") {
		return fmt.Errorf("kafka: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	at, err := m.renew(p, off, r.Lease)
	if err != nil {
		return err
	}
	r.LeaseExpires = at.Add(d.lease)
	return nil
}

// Release makes r available again at once, to this store's next Fetch
// (the partition stays with this member).
func (d *driver) Release(ctx context.Context, r *broker.Record) error {
	return d.settle(ctx, r, false)
}

func (d *driver) settle(ctx context.Context, r *broker.Record, ack bool) error {
	if d.readOnly {
		return errReadOnly
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p, off, err := parseID(r.ID)
	if err != nil {
		return err
	}
	m := d.memberOf(r.Destination)
	if m == nil || !strings.HasPrefix(r.Lease, m.id+":") {
		return fmt.Errorf("kafka: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	return m.settle(p, off, r.Lease, ack)
}

func recordID(p int32, off int64) string {
	return strconv.FormatInt(int64(p), 10) + "/" + strconv.FormatInt(off, 10)
}

func parseID(id string) (int32, int64, error) {
	ps, os, ok := strings.Cut(id, "/")
	p, err1 := strconv.ParseInt(ps, 10, 32)
	off, err2 := strconv.ParseInt(os, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("kafka: record id %q is not <partition>/<offset>: %w", id, broker.ErrInvalidArgument)
	}
	return int32(p), off, nil
}

// notify wakes everyone waiting for a state change. m.mu must be held.
func (m *member) notify() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// waitLocked releases m.mu until the state changes, ctx ends or d passes,
// and reports whether it should keep waiting.
func (m *member) waitLocked(ctx context.Context, d time.Duration) bool {
	ch := m.changed
	m.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	ok := true
	select {
	case <-ch:
	case <-t.C:
		ok = false
	case <-ctx.Done():
		ok = false
	case <-m.done:
		ok = false
	}
	m.mu.Lock()
	return ok
}

func (m *member) fetch(ctx context.Context, f broker.Filter, max int) ([]*broker.Record, error) {
	m.fetchMu.Lock()
	defer m.fetchMu.Unlock()
	joinBy := time.Now().Add(m.d.join)
	m.mu.Lock()
	expired := m.expiredLocked(time.Now())
	m.mu.Unlock()
	if expired {
		// Leave now rather than at the watchdog's next tick, so that this
		// Fetch already reads through a new member.
		m.d.retire(m, "a lease outlived LeaseTTL")
		return nil, errRetired
	}
	for {
		m.mu.Lock()
		m.lastUse = time.Now()
		for !m.active && !m.dead && ctx.Err() == nil && time.Now().Before(joinBy) {
			m.waitLocked(ctx, time.Until(joinBy))
		}
		dead, active, session, perr := m.dead, m.active, m.session, m.pollErr
		m.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if dead {
			return nil, errRetired
		}
		if !active {
			if perr != nil {
				return nil, fmt.Errorf("kafka: joining group %q for %q: %w", m.group, m.dest, perr)
			}
			// The group gave us no partitions within JoinWait: another
			// member holds them all, and is finishing its leases.
			return nil, nil
		}
		m.mu.Lock()
		enough := m.available(f, max)
		m.mu.Unlock()
		if !enough {
			if err := m.catchUp(ctx); err != nil {
				return nil, err
			}
		}
		m.mu.Lock()
		if m.dead {
			m.mu.Unlock()
			return nil, errRetired
		}
		recs := m.take(f, max)
		again := len(recs) == 0 && (!m.active || m.session != session) && time.Now().Before(joinBy)
		m.mu.Unlock()
		if !again {
			return recs, nil
		}
		// A rebalance ran while we read: wait for the new assignment and
		// read it, rather than report the group empty.
	}
}

// catchUp waits until the poller has read the partitions the member holds
// up to their end offsets as of now, or the buffer is full, or the
// assignment changes.
func (m *member) catchUp(ctx context.Context) error {
	ends, err := m.d.adm.ListEndOffsets(ctx, m.dest)
	if err != nil {
		return fmt.Errorf("kafka: listing end offsets of %q: %w", m.dest, err)
	}
	if err := ends.Error(); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("kafka: listing end offsets of %q: %w", m.dest, err)
	}
	var starts kadm.ListedOffsets
	deadline := time.Now().Add(m.d.fetchT)
	for {
		m.mu.Lock()
		if m.dead || !m.active || m.bufBytes >= m.d.bufMax {
			m.mu.Unlock()
			return nil
		}
		var behind []int32
		needStarts := false
		for p, pt := range m.parts {
			if pt.revoking {
				continue
			}
			end, ok := ends.Lookup(m.dest, p)
			if !ok {
				continue // a partition added since we listed: next Fetch
			}
			if errors.Is(end.Err, kerr.UnknownTopicOrPartition) {
				continue // the topic is being deleted: nothing to read
			}
			if end.Err != nil {
				m.mu.Unlock()
				return fmt.Errorf("kafka: listing the end offset of %s/%d: %w", m.dest, p, end.Err)
			}
			pos := pt.next
			if pos < 0 && pt.fetched {
				pos = pt.start
			}
			if pos < 0 && !pt.fetched {
				behind = append(behind, p) // the group's offsets are still loading
				continue
			}
			if pos < 0 {
				// Nothing read and no commit known (yet): the partition is
				// caught up only if it is empty.
				if starts == nil {
					needStarts = true
					continue
				}
				if st, ok := starts.Lookup(m.dest, p); ok && st.Err == nil && st.Offset >= end.Offset {
					continue
				}
				behind = append(behind, p)
				continue
			}
			if pos < end.Offset {
				behind = append(behind, p)
			}
		}
		if needStarts {
			m.mu.Unlock()
			if starts, err = m.d.adm.ListStartOffsets(ctx, m.dest); err != nil {
				return fmt.Errorf("kafka: listing start offsets of %q: %w", m.dest, err)
			}
			continue
		}
		if len(behind) == 0 {
			m.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			lastErr := m.pollErr
			m.mu.Unlock()
			slices.Sort(behind)
			return fmt.Errorf("kafka: partitions %v of %q not read up to their end offsets within %v (last fetch error: %v)", behind, m.dest, m.d.fetchT, lastErr)
		}
		// Woken by the poller and by loaded offsets.
		m.waitLocked(ctx, 100*time.Millisecond)
		m.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// poller reads records into the member's partitions until shutdown,
// pausing while the buffer is full. Polling and the group's partition
// callbacks exclude each other (BlockRebalanceOnPoll), so records read in
// one assignment never land in the next; and since only this goroutine
// polls, a rebalance waiting for leases never blocks a Fetch.
func (m *member) poller() {
	defer close(m.pollDone)
	for {
		m.mu.Lock()
		for m.bufBytes >= m.d.bufMax && !m.dead {
			m.waitLocked(m.pollCtx, time.Second)
		}
		m.mu.Unlock()
		if m.pollCtx.Err() != nil {
			return
		}
		fs := m.cl.PollRecords(m.pollCtx, 0)
		m.ingest(fs)
		m.cl.AllowRebalance()
		if fs.IsClientClosed() || m.pollCtx.Err() != nil {
			return
		}
	}
}

func (m *member) ingest(fs kgo.Fetches) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, fe := range fs.Errors() {
		if !errors.Is(fe.Err, context.Canceled) && !errors.Is(fe.Err, kgo.ErrClientClosed) {
			m.pollErr = fe.Err
		}
	}
	if fs.NumRecords() == 0 {
		return
	}
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if fp.Topic != m.dest {
			return
		}
		pt := m.parts[fp.Partition]
		if pt == nil || pt.revoking {
			return
		}
		for _, r := range fp.Records {
			if pt.next >= 0 && r.Offset < pt.next {
				continue
			}
			pt.next = r.Offset + 1
			if covered(pt.skip, r.Offset) {
				// Acknowledged before a restart or rebalance, past a
				// record that was not: keep it acknowledged.
				pt.entries = append(pt.entries, &entry{offset: r.Offset, state: stateAcked, at: publishedNS(r)})
				pt.epoch = r.LeaderEpoch
				continue
			}
			e := &entry{rec: r, offset: r.Offset, epoch: r.LeaderEpoch, at: publishedNS(r), size: recordSize(r)}
			pt.entries = append(pt.entries, e)
			m.bufBytes += e.size
		}
		pt.compact()
	})
	m.notify()
}

func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value) + 64
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// publishedNS is the record's HeaderPublishedAt, else its timestamp.
func publishedNS(r *kgo.Record) int64 {
	for _, h := range r.Headers {
		if h.Key == HeaderPublishedAt {
			if t, err := time.Parse(time.RFC3339Nano, string(h.Value)); err == nil {
				return t.UnixNano()
			}
		}
	}
	return r.Timestamp.UnixNano()
}

// available reports whether at least max records matching f are
// available without reading further. m.mu must be held.
func (m *member) available(f broker.Filter, max int) bool {
	n := 0
	for p, pt := range m.parts {
		if pt.revoking {
			continue
		}
		for _, e := range pt.entries {
			if m.matches(p, e, f) {
				if n++; n >= max {
					return true
				}
			}
		}
	}
	return false
}

// matches reports whether e, at partition p, is available and matches f,
// decoding its envelope once when f needs it. m.mu must be held.
func (m *member) matches(p int32, e *entry, f broker.Filter) bool {
	if e.state != stateAvailable {
		return false
	}
	if f.IsZero() {
		return true
	}
	if len(f.IDs) > 0 && !slices.Contains(f.IDs, recordID(p, e.offset)) {
		return false
	}
	g := f
	g.IDs = nil
	if g.IsZero() {
		return true
	}
	if !e.decoded {
		e.env, _ = envelope.Decode(e.rec.Value)
		e.decoded = true
	}
	return e.env != nil && g.Match(e.env)
}

// take leases up to max available records matching f, merging partitions
// oldest first. m.mu must be held.
func (m *member) take(f broker.Filter, max int) []*broker.Record {
	type cursor struct {
		p  int32
		pt *part
		i  int
	}
	advance := func(c *cursor) {
		for c.i < len(c.pt.entries) && !m.matches(c.p, c.pt.entries[c.i], f) {
			c.i++
		}
	}
	var cs []*cursor
	for p, pt := range m.parts {
		if pt.revoking {
			continue
		}
		c := &cursor{p: p, pt: pt}
		advance(c)
		cs = append(cs, c)
	}
	var out []*broker.Record
	now := time.Now()
	for len(out) < max {
		var best *cursor
		for _, c := range cs {
			if c.i >= len(c.pt.entries) {
				continue
			}
			if best == nil || less(c.pt.entries[c.i], c.p, best.pt.entries[best.i], best.p) {
				best = c
			}
		}
		if best == nil {
			break
		}
		e := best.pt.entries[best.i]
		m.seq++
		e.state, e.lease, e.leasedAt = stateLeased, m.id+":"+strconv.FormatUint(m.seq, 10), now
		m.leased[e] = struct{}{}
		out = append(out, m.record(best.p, e))
		best.i++
		advance(best)
	}
	return out
}

func less(a *entry, ap int32, b *entry, bp int32) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if ap != bp {
		return ap < bp
	}
	return a.offset < b.offset
}

// record builds the broker.Record handed out for e: a copy, so a caller
// that changes it cannot change what a later Fetch returns.
func (m *member) record(p int32, e *entry) *broker.Record {
	r := e.rec
	msg := MessageOf(r)
	msg.Key, msg.Body = bytes.Clone(r.Key), bytes.Clone(r.Value)
	msg.Source.Key = msg.Key
	return &broker.Record{
		ID:           recordID(p, e.offset),
		Destination:  m.dest,
		Message:      msg,
		Envelope:     e.env,
		Lease:        e.lease,
		LeaseExpires: e.leasedAt.Add(m.d.lease),
	}
}

// renew restarts the lease of the record at p/off, if lease is still its
// lease and its partition is not being revoked, and returns when the
// lease now started.
func (m *member) renew(p int32, off int64, lease string) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lost := fmt.Errorf("kafka: record %s/%s: %w", m.dest, recordID(p, off), broker.ErrLeaseLost)
	if m.dead {
		return time.Time{}, lost
	}
	pt := m.parts[p]
	if pt == nil {
		return time.Time{}, lost
	}
	if pt.revoking {
		return time.Time{}, fmt.Errorf("kafka: record %s/%s: its partition is being handed to another member: %w", m.dest, recordID(p, off), broker.ErrLeaseLost)
	}
	i := sort.Search(len(pt.entries), func(i int) bool { return pt.entries[i].offset >= off })
	if i == len(pt.entries) || pt.entries[i].offset != off {
		return time.Time{}, lost
	}
	e := pt.entries[i]
	now := time.Now()
	if e.state != stateLeased || e.lease != lease || now.Sub(e.leasedAt) > m.d.lease {
		return time.Time{}, lost
	}
	e.leasedAt = now
	m.lastUse = now
	return now, nil
}

func (m *member) settle(p int32, off int64, lease string, ack bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	lost := fmt.Errorf("kafka: record %s/%s: %w", m.dest, recordID(p, off), broker.ErrLeaseLost)
	if m.dead {
		return lost
	}
	pt := m.parts[p]
	if pt == nil {
		return lost
	}
	i := sort.Search(len(pt.entries), func(i int) bool { return pt.entries[i].offset >= off })
	if i == len(pt.entries) || pt.entries[i].offset != off {
		return lost
	}
	e := pt.entries[i]
	if e.state != stateLeased || e.lease != lease || time.Since(e.leasedAt) > m.d.lease {
		return lost // an expired lease is lost even before the watchdog notices
	}
	delete(m.leased, e)
	e.lease, e.leasedAt = "", time.Time{}
	m.lastUse = time.Now()
	if !ack {
		e.state = stateAvailable
		m.notify()
		return nil
	}
	e.state = stateAcked
	e.rec, e.env = nil, nil
	m.bufBytes -= e.size
	pt.epoch = max(pt.epoch, e.epoch)
	pt.acks++
	pt.compact()
	select {
	case m.kick <- struct{}{}:
	default:
	}
	m.notify()
	return nil
}

// compact drops the acknowledged prefix of pt.entries.
func (pt *part) compact() {
	n := 0
	for n < len(pt.entries) && pt.entries[n].state == stateAcked {
		n++
	}
	if n > 0 {
		clear(pt.entries[:n])
		pt.entries = pt.entries[n:]
	}
}

// acked returns the offsets acknowledged past the watermark: records read
// and acknowledged, and those known from the commit metadata not yet read
// again. pt's member's mu must be held.
func (pt *part) acked() []span {
	w := pt.watermark()
	var out []span
	for _, e := range pt.entries {
		if e.state != stateAcked {
			continue
		}
		if n := len(out); n > 0 && out[n-1].to+1 == e.offset {
			out[n-1].to = e.offset
		} else {
			out = append(out, span{e.offset, e.offset})
		}
	}
	for _, sp := range pt.skip {
		if sp.to >= pt.next && sp.to >= w {
			out = append(out, span{max(sp.from, pt.next, w), sp.to})
		}
	}
	return merge(out)
}

// watermark is the offset to commit for pt: the oldest record not
// acknowledged, or the next offset when every record read is. m.mu must be
// held.
func (pt *part) watermark() int64 {
	if len(pt.entries) > 0 {
		return pt.entries[0].offset
	}
	return pt.next
}

// commit commits the acknowledged prefix of the given partitions (all when
// nil), with the offsets acknowledged past it in the commit metadata, when
// either changed since this member last committed.
func (m *member) commit(ctx context.Context, only []int32) error {
	type pending struct {
		eo   kgo.EpochOffset
		meta string
		acks uint64
	}
	m.mu.Lock()
	todo := map[int32]pending{}
	for p, pt := range m.parts {
		if only != nil && !slices.Contains(only, p) {
			continue
		}
		// Only what this member acknowledged is committed: a member
		// that merely read (and released) writes nothing to the group.
		w := pt.watermark()
		if w < 0 || pt.acks == pt.commAcks {
			continue
		}
		meta := encodeSpans(pt.acked())
		if w > pt.committed || (w == pt.committed && meta != pt.meta) {
			todo[p] = pending{kgo.EpochOffset{Epoch: pt.epoch, Offset: w}, meta, pt.acks}
		} else {
			pt.commAcks = pt.acks
		}
	}
	m.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	offsets := make(map[int32]kgo.EpochOffset, len(todo))
	for p, t := range todo {
		offsets[p] = t.eo
	}
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				rp := &req.Topics[i].Partitions[j]
				if t, ok := todo[rp.Partition]; ok {
					rp.Metadata = kmsg.StringPtr(t.meta)
				}
			}
		}
		return nil
	})
	var cerr error
	m.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{m.dest: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err == nil {
				err = commitErr(resp)
			}
			cerr = err
		})
	if cerr != nil {
		m.d.log.WarnContext(ctx, "geodlq: kafka: committing replay offsets failed; acknowledged records may be redelivered",
			slog.String("topic", m.dest), slog.String("group", m.group), slog.Any("error", cerr))
		return fmt.Errorf("kafka: committing offsets of %q for group %q: %w", m.dest, m.group, cerr)
	}
	m.mu.Lock()
	for p, t := range todo {
		if pt := m.parts[p]; pt != nil && t.eo.Offset >= pt.committed {
			pt.committed, pt.meta = t.eo.Offset, t.meta
			pt.commAcks = max(pt.commAcks, t.acks)
		}
	}
	m.mu.Unlock()
	return nil
}

// committer commits in the background after acknowledgements.
func (m *member) committer() {
	for {
		select {
		case <-m.done:
			return
		case <-m.kick:
		}
		// Let acknowledgements gather into one commit.
		select {
		case <-m.done:
			return
		case <-time.After(commitDelay):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = m.commit(ctx, nil)
		cancel()
	}
}

// watch retires the member when a lease outlives LeaseTTL or the member
// has not been used for LeaseTTL.
func (m *member) watch() {
	tick := min(max(m.d.lease/8, 10*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-t.C:
		}
		now := time.Now()
		why := ""
		m.mu.Lock()
		if m.expiredLocked(now) {
			why = "a lease outlived LeaseTTL"
		}
		if why == "" && len(m.leased) == 0 && now.Sub(m.lastUse) > m.d.lease {
			why = "idle for LeaseTTL"
		}
		m.mu.Unlock()
		if why != "" {
			m.d.retire(m, why)
			return
		}
	}
}

// expiredLocked reports whether a lease outlived LeaseTTL. m.mu must be
// held.
func (m *member) expiredLocked(now time.Time) bool {
	for e := range m.leased {
		if now.Sub(e.leasedAt) > m.d.lease {
			return true
		}
	}
	return false
}

// shutdown leaves the group: it commits what was acknowledged, forfeits
// every lease, and closes the consumer client.
func (m *member) shutdown(why string) {
	m.once.Do(func() {
		m.mu.Lock()
		m.dead = true
		lost := len(m.leased)
		m.notify()
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = m.commit(ctx, nil)
		cancel()
		close(m.done)
		m.pollCancel()
		<-m.pollDone
		m.d.log.Info("geodlq: kafka: leaving replay group",
			slog.String("topic", m.dest), slog.String("group", m.group),
			slog.String("why", why), slog.Int("leases_lost", lost))
		m.cl.Close()
	})
}

func (m *member) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range assigned[m.dest] {
		if m.parts[p] == nil {
			m.parts[p] = &part{next: -1, start: -1, committed: -1, epoch: -1}
		}
	}
	m.active = true
	m.session++
	m.pollErr = nil
	m.notify()
}

// onFetched learns, for each newly assigned partition, the group's
// committed offset and the offsets acknowledged past it (the commit
// metadata), before the client starts reading.
func (m *member) onFetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	learn := func(p int32, offset int64, epoch int32, meta *string, code int16) {
		pt := m.parts[p]
		if pt == nil || code != 0 {
			return
		}
		pt.fetched, pt.start = true, offset
		if offset >= 0 {
			pt.committed, pt.epoch = offset, epoch
			if meta != nil {
				pt.meta = *meta
				pt.skip = decodeSpans(*meta)
			}
		}
	}
	for _, t := range resp.Topics {
		if t.Topic == m.dest {
			for _, p := range t.Partitions {
				learn(p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode)
			}
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			if t.Topic == m.dest || (t.Topic == "" && len(g.Topics) == 1) {
				for _, p := range t.Partitions {
					learn(p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode)
				}
			}
		}
	}
	// Partitions the response did not mention have no commit.
	for _, pt := range m.parts {
		pt.fetched = true
	}
	m.notify()
	return nil
}

// onRevoked hands partitions back: it stops leasing from them, waits until
// every lease on them is settled (or the member retires), commits their
// acknowledged prefix and forgets them.
func (m *member) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	ps := revoked[m.dest]
	if len(ps) == 0 {
		return // the end of a cooperative session that moved nothing of ours
	}
	m.mu.Lock()
	kept := 0
	for p, pt := range m.parts {
		if slices.Contains(ps, p) {
			pt.revoking = true
		} else {
			kept++
		}
	}
	if kept == 0 {
		m.active = false
	}
	m.notify()
	for !m.dead && ctx.Err() == nil && m.leasesIn(ps) > 0 {
		m.waitLocked(ctx, time.Second)
	}
	m.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	_ = m.commit(cctx, ps)
	cancel()
	m.forget(ps)
}

// onLost forgets partitions taken away without a clean revoke (the member
// was evicted): nothing can be committed, and their leases are lost.
func (m *member) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	m.mu.Lock()
	m.active = false
	m.mu.Unlock()
	m.forget(lost[m.dest])
}

func (m *member) forget(ps []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		pt := m.parts[p]
		if pt == nil {
			continue
		}
		for _, e := range pt.entries {
			if e.state == stateLeased {
				delete(m.leased, e)
			}
			if e.state != stateAcked {
				m.bufBytes -= e.size
			}
		}
		delete(m.parts, p)
	}
	m.notify()
}

// leasesIn counts the live leases in partitions ps. m.mu must be held.
func (m *member) leasesIn(ps []int32) int {
	n := 0
	for _, p := range ps {
		if pt := m.parts[p]; pt != nil {
			for _, e := range pt.entries {
				if e.state == stateLeased {
					n++
				}
			}
		}
	}
	return n
}
