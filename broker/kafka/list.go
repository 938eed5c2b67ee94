package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
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

// Listing reads topics with Fetch requests of its own, sent through the
// store's client to each partition's leader: no consumer group, no
// commits, no leases, nothing written. The replay group's committed
// offsets (and the acknowledged offsets past them in the commit metadata)
// tell pending records from replayed ones.

// Listing limits.
const (
	// listFetchBytes bounds one listing Fetch response, per partition and
	// in total (Kafka returns at least one whole batch even if larger).
	listFetchBytes = 1 << 20
	// listFirstFetchBytes is a partition's first fetch of a List call;
	// later ones double up to listFetchBytes, so that a small page reads
	// little ahead of what it lists.
	listFirstFetchBytes = 64 << 10
	// listWindowBytes bounds the records a newest-first listing holds per
	// partition.
	listWindowBytes = 1 << 20
	// listPageBytes ends a page early once its records hold this many
	// bytes; the cursor goes on from there.
	listPageBytes = 16 << 20
	// listScanRecords ends a page early once it examined this many
	// records (a filter that matches little), so that every List call is
	// bounded; the cursor goes on from there.
	listScanRecords = 20_000
	// maxCursorLen bounds a cursor the caller hands back.
	maxCursorLen = 64 << 10
	// listParallel bounds the concurrent fetches of one List call.
	listParallel = 8
)

// topicState is what a listing knows of a topic at the start of a call.
type topicState struct {
	name  string
	id    [16]byte
	parts []*partState // by partition number
}

// partState is one partition of a topicState.
type partState struct {
	p         int32
	leader    int32
	start     int64  // log start offset
	end       int64  // end offset (high watermark) at the start of the call
	committed int64  // the replay group's committed offset; -1 none
	skip      []span // offsets acknowledged past it (the commit metadata)
}

// low is the first offset a listing reads: the log start with replayed
// records, else the group's committed offset.
func (ps *partState) low(replayed bool) int64 {
	if replayed || ps.committed < ps.start {
		return ps.start
	}
	return min(ps.committed, ps.end)
}

// replayed reports whether the record at off was acknowledged by the
// replay group.
func (ps *partState) replayed(off int64) bool {
	return (ps.committed >= 0 && off < ps.committed) || covered(ps.skip, off)
}

// loadTopic reads topic's partitions, leaders, offsets and its replay
// group's commits. It returns nil, nil when the topic does not exist.
func (d *driver) loadTopic(ctx context.Context, topic string) (*topicState, error) {
	// This store's own acknowledgements count before the group's commit
	// is read: commit them first.
	if m := d.memberOf(topic); m != nil {
		_ = m.commit(ctx, nil) // on failure (logged) they are listed pending
	}
	md, err := d.adm.Metadata(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: metadata of %q: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return nil, nil
	}
	if td.Err != nil {
		return nil, fmt.Errorf("kafka: metadata of %q: %w", topic, td.Err)
	}
	starts, err := d.adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: start offsets of %q: %w", topic, err)
	}
	ends, err := d.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: end offsets of %q: %w", topic, err)
	}
	commits, err := d.groupOffsets(ctx, d.group(topic))
	if err != nil {
		return nil, err
	}
	ts := &topicState{name: topic, id: td.ID}
	for _, pd := range td.Partitions.Sorted() {
		ps := &partState{p: pd.Partition, leader: pd.Leader, committed: -1}
		st, ok1 := starts.Lookup(topic, pd.Partition)
		en, ok2 := ends.Lookup(topic, pd.Partition)
		if !ok1 || !ok2 || st.Err != nil || en.Err != nil {
			return nil, fmt.Errorf("kafka: offsets of %s/%d: %w", topic, pd.Partition, errors.Join(st.Err, en.Err, errors.New("not listed")))
		}
		ps.start, ps.end = st.Offset, en.Offset
		if c, ok := commits.Lookup(topic, pd.Partition); ok && c.Err == nil && c.At >= 0 {
			ps.committed = c.At
			ps.skip = decodeSpans(c.Metadata)
		}
		ts.parts = append(ts.parts, ps)
	}
	return ts, nil
}

// groupOffsets returns a group's committed offsets; none for a group
// that does not exist.
func (d *driver) groupOffsets(ctx context.Context, group string) (kadm.OffsetResponses, error) {
	os, err := d.adm.FetchOffsets(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("kafka: committed offsets of group %q: %w", group, err)
	}
	return os, nil
}

// readAt fetches the records of one partition from offset from: one
// Fetch response's worth (at most max bytes, but at least one batch). It
// returns the records at offsets in [from, until) and the offset to read
// next, which passes gaps, control batches and records a compaction
// removed.
func (d *driver) readAt(ctx context.Context, ts *topicState, ps *partState, from, until int64, max int32) ([]*kgo.Record, int64, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, from, err
		}
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = 0
		req.MinBytes = 1
		req.MaxBytes = max
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = ts.name, ts.id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = ps.p
		rp.FetchOffset = from
		rp.PartitionMaxBytes = max
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := d.cl.Broker(int(ps.leader)).RetriableRequest(ctx, req)
		if err != nil {
			return nil, from, fmt.Errorf("kafka: fetching %s/%d at %d: %w", ts.name, ps.p, from, err)
		}
		resp := kresp.(*kmsg.FetchResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return nil, from, fmt.Errorf("kafka: fetching %s/%d at %d: %w", ts.name, ps.p, from, err)
		}
		var part *kmsg.FetchResponseTopicPartition
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				if resp.Topics[i].Partitions[j].Partition == ps.p {
					part = &resp.Topics[i].Partitions[j]
				}
			}
		}
		if part == nil {
			return nil, from, fmt.Errorf("kafka: fetching %s/%d at %d: the response holds no such partition", ts.name, ps.p, from)
		}
		switch perr := kerr.ErrorForCode(part.ErrorCode); {
		case perr == nil:
		case errors.Is(perr, kerr.OffsetOutOfRange) && from < part.LogStartOffset:
			// Retention deleted records since the offsets were listed:
			// go on from the new start.
			return nil, part.LogStartOffset, nil
		case attempt < 3 && (errors.Is(perr, kerr.NotLeaderForPartition) || errors.Is(perr, kerr.FencedLeaderEpoch) ||
			errors.Is(perr, kerr.UnknownLeaderEpoch) || errors.Is(perr, kerr.LeaderNotAvailable)):
			if err := d.refreshLeader(ctx, ts, ps); err != nil {
				return nil, from, err
			}
			continue
		default:
			return nil, from, fmt.Errorf("kafka: fetching %s/%d at %d: %w", ts.name, ps.p, from, perr)
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: from, Topic: ts.name, Partition: ps.p}, part, d.decomp, nil)
		if fp.Err != nil && len(fp.Records) == 0 {
			return nil, from, fmt.Errorf("kafka: reading %s/%d at %d: %w", ts.name, ps.p, from, fp.Err)
		}
		recs := slices.DeleteFunc(fp.Records, func(r *kgo.Record) bool { return r.Offset < from || r.Offset >= until })
		if next <= from {
			if from >= part.HighWatermark || attempt >= 3 {
				// Nothing more to read here: the high watermark is behind
				// the listed end (a truncation), or the broker keeps
				// answering empty.
				return recs, until, nil
			}
			continue
		}
		return recs, next, nil
	}
}

// refreshLeader reloads the leader of ps.
func (d *driver) refreshLeader(ctx context.Context, ts *topicState, ps *partState) error {
	md, err := d.adm.Metadata(ctx, ts.name)
	if err != nil {
		return fmt.Errorf("kafka: metadata of %q: %w", ts.name, err)
	}
	if pd, ok := md.Topics[ts.name].Partitions[ps.p]; ok && pd.Leader >= 0 {
		ps.leader = pd.Leader
		return nil
	}
	return fmt.Errorf("kafka: %s/%d has no leader: %w", ts.name, ps.p, kerr.LeaderNotAvailable)
}

// lister reads one topic for one List call, merging its partitions.
type lister struct {
	d      *driver
	ts     *topicState
	opts   broker.ListOptions
	leased map[string]bool // record ids this store holds leases on
	rs     []*partReader
	bytes  int
	seen   int
}

// partReader is one partition of a listing. Oldest first, pos is the
// next offset to list and queue holds records from pos on; newest first,
// pos is the offset after the next record to list (the records below pos
// are to come), queue holds records below pos, highest first, and lo is
// the lowest offset queue covers.
type partReader struct {
	ps    *partState
	low   int64
	pos   int64
	lo    int64
	next  int64 // oldest first: where the next fetch starts
	fetch int32 // oldest first: the next fetch's size in bytes
	queue []queued
	done  bool
	win   int64 // newest first: the next window's size in offsets
}

// queued is a record read ahead, with its publish time (the merge key).
type queued struct {
	rec *kgo.Record
	at  int64
}

func queue(recs []*kgo.Record) []queued {
	q := make([]queued, len(recs))
	for i, r := range recs {
		q[i] = queued{r, publishedNS(r)}
	}
	return q
}

// cursor is the position of a listing: the destination it was in, and
// each partition's position there, or done when that destination is
// listed to its end (a listing of every destination goes on with the
// next one). Its text form is "o1:<topic>:<p>=<pos>,…" ("n1:" newest
// first; "…:*" done).
type cursor struct {
	newest bool
	topic  string
	done   bool
	pos    map[int32]int64
}

func (c cursor) String() string {
	var b strings.Builder
	if c.newest {
		b.WriteString("n1:")
	} else {
		b.WriteString("o1:")
	}
	b.WriteString(c.topic)
	if c.done {
		b.WriteString(":*")
		return b.String()
	}
	ps := make([]int32, 0, len(c.pos))
	for p := range c.pos {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for i, p := range ps {
		if i == 0 {
			b.WriteByte(':')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(p), 10))
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(c.pos[p], 10))
	}
	return b.String()
}

// parseCursor reads what cursor.String wrote; it refuses anything else
// with an error wrapping [broker.ErrInvalidArgument].
func parseCursor(s string) (cursor, error) {
	bad := func(why string) (cursor, error) {
		if len(s) > 80 {
			s = s[:80] + "…"
		}
		return cursor{}, fmt.Errorf("kafka: list cursor %q: %s: %w", s, why, broker.ErrInvalidArgument)
	}
	if len(s) > maxCursorLen {
		return bad("too long")
	}
	var c cursor
	switch {
	case strings.HasPrefix(s, "o1:"):
	case strings.HasPrefix(s, "n1:"):
		c.newest = true
	default:
		return bad("not a cursor of this store")
	}
	rest := s[3:]
	topic, parts, _ := strings.Cut(rest, ":")
	if validTopic(topic) != nil {
		return bad("bad topic")
	}
	c.topic = topic
	c.pos = map[int32]int64{}
	if parts == "*" {
		c.done = true
		return c, nil
	}
	if parts == "" {
		return c, nil
	}
	for f := range strings.SplitSeq(parts, ",") {
		ps, os, ok := strings.Cut(f, "=")
		p, err1 := strconv.ParseInt(ps, 10, 32)
		off, err2 := strconv.ParseInt(os, 10, 64)
		if !ok || err1 != nil || err2 != nil || p < 0 || off < 0 {
			return bad("bad partition position")
		}
		if _, dup := c.pos[int32(p)]; dup {
			return bad("partition given twice")
		}
		c.pos[int32(p)] = off
	}
	return c, nil
}

// List implements [broker.Lister] with direct reads (see the package doc):
// records of a topic in the order Fetch leases them — offset order within
// a partition, merged across partitions by [HeaderPublishedAt] (else the
// record timestamp) — or the reverse with opts.Descending; every destination
// (opts.Destination "") one after another, by name. Records below the
// replay group's committed offset, or listed in its commit metadata, are
// replayed; records this store holds leases on are leased; others are
// pending (another store's leases are not visible). A page ends early,
// with a cursor, once it holds 16 MiB or examined 20,000 records.
func (d *driver) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	var after *cursor
	if opts.After != "" {
		c, err := parseCursor(opts.After)
		if err != nil {
			return broker.Page{}, err
		}
		if c.newest != opts.Descending || (opts.Destination != "" && c.topic != opts.Destination) {
			return broker.Page{}, fmt.Errorf("kafka: list cursor of other options: %w", broker.ErrInvalidArgument)
		}
		after = &c
	}
	if opts.Destination != "" {
		if err := validTopic(opts.Destination); err != nil {
			return broker.Page{}, err
		}
		var page broker.Page
		next, err := d.listTopic(ctx, opts.Destination, opts, after, &page, opts.Limit)
		if err != nil {
			return broker.Page{}, err
		}
		if next != nil {
			page.Next = next.String()
		}
		return page, nil
	}
	dests, err := d.destinations(ctx, opts.IncludeReplayed)
	if err != nil {
		return broker.Page{}, err
	}
	if opts.Descending {
		slices.Reverse(dests)
	}
	var page broker.Page
	for _, t := range dests {
		if after != nil {
			if (!opts.Descending && t < after.topic) || (opts.Descending && t > after.topic) {
				continue
			}
			if t == after.topic && after.done {
				after = nil
				continue
			}
			if t != after.topic {
				after = nil
			}
		}
		if len(page.Entries) >= opts.Limit {
			// Full at the end of the previous topic: go on after it.
			return page, nil
		}
		next, err := d.listTopic(ctx, t, opts, after, &page, opts.Limit-len(page.Entries))
		after = nil
		if err != nil {
			return broker.Page{}, err
		}
		if next != nil {
			page.Next = next.String()
			return page, nil
		}
		page.Next = cursor{newest: opts.Descending, topic: t, done: true}.String()
	}
	page.Next = ""
	return page, nil
}

// listTopic appends up to limit entries of topic to page, from the
// cursor (nil: the beginning), and returns the cursor to go on from, or
// nil when topic is listed to its end.
func (d *driver) listTopic(ctx context.Context, topic string, opts broker.ListOptions, after *cursor, page *broker.Page, limit int) (*cursor, error) {
	ts, err := d.loadTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	if ts == nil {
		if opts.Destination != "" && d.topics == nil {
			return nil, missingTopic(topic)
		}
		return nil, nil
	}
	l := &lister{d: d, ts: ts, opts: opts, leased: d.leasedIDs(topic)}
	for _, ps := range ts.parts {
		r := &partReader{ps: ps, low: ps.low(opts.IncludeReplayed)}
		if opts.Descending {
			r.pos = ps.end
		} else {
			r.pos = r.low
		}
		if after != nil {
			if after.done {
				r.done = true
			} else if pos, ok := after.pos[ps.p]; ok {
				r.pos = pos
			}
		}
		if opts.Descending {
			r.pos = min(r.pos, ps.end)
			r.lo = r.pos
			r.win = int64(min(max(2*limit, 16), 1024))
			r.done = r.done || r.pos <= r.low
		} else {
			r.pos = max(r.pos, r.low)
			r.next = r.pos
			r.done = r.done || r.pos >= ps.end
		}
		l.rs = append(l.rs, r)
	}
	return l.run(ctx, page, limit)
}

// leasedIDs returns the ids of the records of topic this store leases.
func (d *driver) leasedIDs(topic string) map[string]bool {
	m := d.memberOf(topic)
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for p, pt := range m.parts {
		for _, e := range pt.entries {
			if e.state == stateLeased {
				out[recordID(p, e.offset)] = true
			}
		}
	}
	return out
}

func (l *lister) run(ctx context.Context, page *broker.Page, limit int) (*cursor, error) {
	for {
		if err := l.fill(ctx); err != nil {
			return nil, err
		}
		var best *partReader
		for _, r := range l.rs {
			if len(r.queue) == 0 {
				continue
			}
			if best == nil || l.before(r, best) {
				best = r
			}
		}
		if best == nil {
			return nil, nil // every partition listed to its end
		}
		if len(page.Entries) >= limit || l.bytes >= listPageBytes || l.seen >= listScanRecords {
			return l.cursor(), nil
		}
		rec, at := best.queue[0].rec, best.queue[0].at
		best.queue[0] = queued{}
		best.queue = best.queue[1:]
		if l.opts.Descending {
			best.pos = rec.Offset
		} else {
			best.pos = rec.Offset + 1
		}
		l.seen++
		if e, ok := l.entry(best.ps, rec, at); ok {
			page.Entries = append(page.Entries, e)
			l.bytes += recordSize(rec)
		}
	}
}

// before reports whether a's next record comes before b's in the listing.
func (l *lister) before(a, b *partReader) bool {
	qa, qb := a.queue[0], b.queue[0]
	if l.opts.Descending {
		qa, qb, a, b = qb, qa, b, a
	}
	if qa.at != qb.at {
		return qa.at < qb.at
	}
	if a.ps.p != b.ps.p {
		return a.ps.p < b.ps.p
	}
	return qa.rec.Offset < qb.rec.Offset
}

func (l *lister) cursor() *cursor {
	c := &cursor{newest: l.opts.Descending, topic: l.ts.name, pos: make(map[int32]int64, len(l.rs))}
	for _, r := range l.rs {
		c.pos[r.ps.p] = r.pos
	}
	return c
}

// entry builds the listing entry of rec, or reports that the listing
// leaves it out (replayed, or not matching the filter).
func (l *lister) entry(ps *partState, rec *kgo.Record, at int64) (broker.Entry, bool) {
	st := broker.StatusPending
	id := recordID(ps.p, rec.Offset)
	switch {
	case ps.replayed(rec.Offset):
		if !l.opts.IncludeReplayed {
			return broker.Entry{}, false
		}
		st = broker.StatusReplayed
	case l.leased[id]:
		st = broker.StatusLeased
	}
	msg := MessageOf(rec)
	msg.Key, msg.Body = bytes.Clone(rec.Key), bytes.Clone(rec.Value)
	msg.Source.Key = msg.Key
	r := &broker.Record{ID: id, Destination: l.ts.name, Message: msg}
	if f := l.opts.Filter; !f.IsZero() {
		if len(f.IDs) > 0 && !slices.Contains(f.IDs, id) {
			return broker.Entry{}, false
		}
		g := f
		g.IDs = nil
		if !g.IsZero() {
			env, err := envelope.Decode(rec.Value)
			if err != nil || !g.Match(env) {
				return broker.Entry{}, false
			}
			r.Envelope = env
		}
	}
	return broker.Entry{Record: r, Status: st, PublishedAt: time.Unix(0, at).UTC()}, true
}

// fill makes sure every partition not listed to its end has its next
// record queued, fetching concurrently.
func (l *lister) fill(ctx context.Context) error {
	var need []*partReader
	for _, r := range l.rs {
		if len(r.queue) == 0 && !r.done {
			need = append(need, r)
		}
	}
	if len(need) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.d.fetchT)
	defer cancel()
	sem := make(chan struct{}, listParallel)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, r := range need {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var err error
			if l.opts.Descending {
				err = l.fillBackward(ctx, r)
			} else {
				err = l.fillForward(ctx, r)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fillForward queues the records after r.next, until one is queued or
// the partition's listed end is reached.
func (l *lister) fillForward(ctx context.Context, r *partReader) error {
	for len(r.queue) == 0 && !r.done {
		if r.fetch == 0 {
			r.fetch = listFirstFetchBytes
		}
		recs, next, err := l.d.readAt(ctx, l.ts, r.ps, r.next, r.ps.end, r.fetch)
		if err != nil {
			return err
		}
		r.fetch = min(2*r.fetch, listFetchBytes)
		r.queue = queue(recs)
		r.next = next
		if len(recs) == 0 && next >= r.ps.end {
			r.done = true
			r.pos = r.ps.end
		}
	}
	return nil
}

// fillBackward queues the records just below r.lo, highest first, until
// one is queued or r.low is reached: a window of offsets read forward, of
// which the highest within listWindowBytes are kept.
func (l *lister) fillBackward(ctx context.Context, r *partReader) error {
	for len(r.queue) == 0 && !r.done {
		if r.lo <= r.low {
			r.done = true
			r.pos = r.low
			return nil
		}
		from := max(r.low, r.lo-r.win)
		var win []*kgo.Record
		bytes := 0
		dropped := false
		at := from
		for at < r.lo {
			recs, next, err := l.d.readAt(ctx, l.ts, r.ps, at, r.lo, listFetchBytes)
			if err != nil {
				return err
			}
			for _, rec := range recs {
				win = append(win, rec)
				bytes += recordSize(rec)
			}
			// Keep the highest records within the budget (at least one).
			for len(win) > 1 && bytes > listWindowBytes {
				bytes -= recordSize(win[0])
				win[0] = nil
				win = win[1:]
				dropped = true
			}
			at = next
		}
		newLo := from
		if dropped {
			// Records below the kept ones were dropped: read them again
			// in the next window, a smaller one.
			newLo = win[0].Offset
			r.win = max(r.win/2, 1)
		} else if r.win < 1024 {
			r.win *= 2
		}
		slices.Reverse(win)
		r.queue = queue(win)
		r.lo = newLo
	}
	return nil
}

// Destinations implements [broker.Lister]: the topics holding pending
// records written by a geodlq store, sorted. A topic counts when the first
// pending record of its lowest-numbered partition holding any carries
// [HeaderPublishedAt], which every record a store writes does; so topics
// other producers write — source topics — are left out unless geodlq
// re-injected into them first. Name them in ListOptions.Destination to
// list them.
func (d *driver) Destinations(ctx context.Context) ([]string, error) {
	return d.destinations(ctx, false)
}

// destinations returns the topics whose first pending record (first
// record at all, with replayed) in the lowest partition holding one a
// geodlq store wrote.
func (d *driver) destinations(ctx context.Context, replayed bool) ([]string, error) {
	tds, err := d.adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafka: listing topics: %w", err)
	}
	var names []string
	for name, td := range tds {
		if td.Err == nil && !td.IsInternal && !strings.HasPrefix(name, "__") && validTopic(name) == nil {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	starts, err := d.adm.ListStartOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("kafka: start offsets: %w", err)
	}
	ends, err := d.adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("kafka: end offsets: %w", err)
	}
	// Commit this store's acknowledgements, so that they count.
	d.mu.Lock()
	ms := make([]*member, 0, len(d.members))
	for _, m := range d.members {
		ms = append(ms, m)
	}
	d.mu.Unlock()
	for _, m := range ms {
		_ = m.commit(ctx, nil) // on failure (logged) they count as pending
	}
	var commits kadm.FetchOffsetsResponses
	if !replayed {
		groups := make([]string, 0, len(names))
		for _, n := range names {
			groups = append(groups, d.group(n))
		}
		commits = d.adm.FetchManyOffsets(ctx, groups...)
	}
	// The first pending offset of each partition that has one.
	type firstPending struct {
		ps   *partState
		from int64
	}
	cand := map[string][]firstPending{}
	for _, n := range names {
		var c kadm.OffsetResponses
		if !replayed {
			if r, ok := commits[d.group(n)]; ok && r.Err == nil {
				c = r.Fetched
			}
		}
		for p, en := range ends[n] {
			st, ok := starts.Lookup(n, p)
			if en.Err != nil || !ok || st.Err != nil {
				continue
			}
			ps := &partState{p: p, start: st.Offset, end: en.Offset, committed: -1}
			if o, ok := c.Lookup(n, p); ok && o.Err == nil && o.At >= 0 {
				ps.committed, ps.skip = o.At, decodeSpans(o.Metadata)
			}
			from := ps.low(replayed)
			for _, sp := range ps.skip {
				if sp.from <= from && from <= sp.to {
					from = sp.to + 1
				}
			}
			if from < ps.end {
				cand[n] = append(cand[n], firstPending{ps, from})
			}
		}
	}
	if len(cand) == 0 {
		return nil, nil
	}
	topics := make([]string, 0, len(cand))
	for n := range cand {
		topics = append(topics, n)
	}
	md, err := d.adm.Metadata(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("kafka: metadata: %w", err)
	}
	var (
		mu   sync.Mutex
		out  []string
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, listParallel)
	for _, n := range topics {
		td, ok := md.Topics[n]
		if !ok || td.Err != nil {
			continue
		}
		ts := &topicState{name: n, id: td.ID}
		fps := cand[n]
		slices.SortFunc(fps, func(a, b firstPending) int { return int(a.ps.p - b.ps.p) })
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ours, err := d.wroteFirst(ctx, ts, md.Topics[n].Partitions, fps[0].ps, fps[0].from)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if ours {
				out = append(out, n)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// wroteFirst reports whether the first record at or after from in
// partition ps of ts carries HeaderPublishedAt: a geodlq store wrote it.
func (d *driver) wroteFirst(ctx context.Context, ts *topicState, pds kadm.PartitionDetails, ps *partState, from int64) (bool, error) {
	pd, ok := pds[ps.p]
	if !ok || pd.Leader < 0 {
		return false, nil
	}
	ps.leader = pd.Leader
	for from < ps.end {
		recs, next, err := d.readAt(ctx, ts, ps, from, ps.end, 64<<10)
		if err != nil {
			return false, err
		}
		for _, r := range recs {
			if ps.replayed(r.Offset) {
				continue
			}
			for _, h := range r.Headers {
				if h.Key == HeaderPublishedAt {
					return true, nil
				}
			}
			return false, nil
		}
		from = next
	}
	return false, nil
}
