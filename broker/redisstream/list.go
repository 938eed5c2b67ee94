package redisstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
)

// pos is a record's place in the store's order: stream id, then
// destination.
type pos struct {
	ms, seq uint64
	dest    string
}

func parseID(id string) (ms, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}

func (p pos) id() string { return strconv.FormatUint(p.ms, 10) + "-" + strconv.FormatUint(p.seq, 10) }

func cmpPos(a, b pos) int {
	if c := cmp.Compare(a.ms, b.ms); c != 0 {
		return c
	}
	if c := cmp.Compare(a.seq, b.seq); c != 0 {
		return c
	}
	return cmp.Compare(a.dest, b.dest)
}

// cursor is "<stream id>/<destination>" of a page's last position.
func (p pos) cursor() string { return p.id() + "/" + p.dest }

func parseCursor(c string) (pos, error) {
	id, dest, ok := strings.Cut(c, "/")
	ms, seq, idOK := parseID(id)
	if !ok || !idOK {
		return pos{}, fmt.Errorf("redisstream: list cursor %q: %w", c, broker.ErrInvalidArgument)
	}
	return pos{ms, seq, dest}, nil
}

// entry is a stream entry read without a lease.
type entry struct {
	p      pos
	id     string
	fields []any
}

// readRange reads up to count entries of key in [start, end] (XRANGE), or
// [end, start] newest first (XREVRANGE), as field/value pairs in stored
// order.
func (d *driver) readRange(ctx context.Context, key, dest, start, end string, count int64, newest bool) ([]entry, error) {
	cmd := "XRANGE"
	if newest {
		cmd = "XREVRANGE"
	}
	res, err := d.client.Do(ctx, cmd, key, start, end, "COUNT", count).Slice()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s %q: %w", cmd, key, err)
	}
	out := make([]entry, 0, len(res))
	for _, r := range res {
		pair, _ := r.([]any)
		if len(pair) != 2 {
			return nil, fmt.Errorf("%s %q: unexpected reply %v", cmd, key, r)
		}
		id, _ := pair[0].(string)
		fields, _ := pair[1].([]any)
		ms, seq, ok := parseID(id)
		if !ok {
			return nil, fmt.Errorf("%s %q: entry id %q", cmd, key, id)
		}
		out = append(out, entry{p: pos{ms, seq, dest}, id: id, fields: fields})
	}
	return out, nil
}

// groupState is what the consumer group says about a range of entries:
// its last-delivered id, and the pending entries.
type groupState struct {
	exists  bool
	last    pos
	pending map[string]redis.XPendingExt
}

// group reads the group's state for the entries between lo and hi (ids,
// inclusive), at most n pending entries of them.
func (d *driver) groupState(ctx context.Context, key, lo, hi string, n int64) (groupState, error) {
	var st groupState
	groups, err := d.client.XInfoGroups(ctx, key).Result()
	if err != nil {
		if isNoSuch(err) {
			return st, nil
		}
		return st, fmt.Errorf("XINFO GROUPS %q: %w", key, err)
	}
	for _, g := range groups {
		if g.Name == d.group {
			st.exists = true
			st.last.ms, st.last.seq, _ = parseID(g.LastDeliveredID)
		}
	}
	if !st.exists {
		return st, nil
	}
	pe, err := d.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: d.group, Start: lo, End: hi, Count: n}).Result()
	if err != nil {
		if isNoSuch(err) {
			return groupState{}, nil
		}
		return st, fmt.Errorf("XPENDING %q: %w", key, err)
	}
	st.pending = make(map[string]redis.XPendingExt, len(pe))
	for _, p := range pe {
		st.pending[p.ID] = p
	}
	return st, nil
}

// isNoSuch reports a missing stream or group.
func isNoSuch(err error) bool {
	s := err.Error()
	return strings.Contains(s, "no such key") || strings.Contains(s, "NOGROUP")
}

// status is an entry's status: leased while a consumer other than the
// park consumer holds it for less than the lease; pending while it is in
// the group's pending list otherwise, or was never delivered; replayed
// when it was delivered and acknowledged (kept by KeepAcked).
func (d *driver) status(st groupState, e entry) (broker.Status, int) {
	if !st.exists {
		return broker.StatusPending, 0
	}
	if p, ok := st.pending[e.id]; ok {
		if p.Consumer != parkConsumer && p.Idle < d.ttl {
			return broker.StatusLeased, int(p.RetryCount)
		}
		return broker.StatusPending, int(p.RetryCount)
	}
	if cmp.Or(cmp.Compare(e.p.ms, st.last.ms), cmp.Compare(e.p.seq, st.last.seq)) > 0 {
		return broker.StatusPending, 0
	}
	return broker.StatusReplayed, 0
}

// record builds the record of an entry, with its envelope decoded when
// the body is one.
func record(e entry) *broker.Record {
	m := message(e.fields, 0)
	r := &broker.Record{ID: e.id, Destination: e.p.dest, Message: m}
	if env, err := broker.EnvelopeOf(m); err == nil {
		r.Envelope, m.Envelope = env, env
	}
	return r
}

// matches reports whether r satisfies f.
func matches(f broker.Filter, r *broker.Record) bool {
	if f.IsZero() {
		return true
	}
	g := f
	g.IDs = nil
	if r.Envelope == nil && !g.IsZero() {
		return false
	}
	return f.MatchRecord(r)
}

// destinations returns the destinations to read: one, or the catalog's.
func (d *driver) dests(ctx context.Context, one string) ([]string, error) {
	if one != "" {
		return []string{one}, nil
	}
	return d.Destinations(ctx)
}

// Destinations implements [broker.Lister]: the catalog's destinations
// whose stream holds entries. A store whose catalog does not exist
// (written by a version before the catalog) is searched with SCAN for
// streams under the prefix instead. A RawKeys store has no catalog.
func (d *driver) Destinations(ctx context.Context) ([]string, error) {
	if d.rawKeys {
		return nil, fmt.Errorf("redisstream: a RawKeys store keeps no catalog of its destinations; name one: %w", errors.ErrUnsupported)
	}
	fields, err := d.client.HKeys(ctx, d.prefix).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstream: reading the catalog %q: %w", d.prefix, err)
	}
	var names []string
	for _, f := range fields {
		if name, ok := strings.CutPrefix(f, catalogDest); ok && name != "" {
			names = append(names, name)
		}
	}
	if len(fields) == 0 {
		if names, err = d.scanStreams(ctx, 0); err != nil {
			return nil, err
		}
	}
	slices.Sort(names)
	// Keep the destinations that hold entries.
	lens := make([]*redis.IntCmd, len(names))
	_, err = d.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			lens[i] = p.XLen(ctx, d.streamKey(n))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisstream: XLEN: %w", err)
	}
	out := names[:0]
	for i, n := range names {
		if lens[i].Val() > 0 {
			out = append(out, n)
		}
	}
	return out, nil
}

// scanStreams returns the destinations of the streams under the prefix,
// found with SCAN; at most limit (0: all).
func (d *driver) scanStreams(ctx context.Context, limit int) ([]string, error) {
	pat := globEscape(d.prefix) + ":*"
	var names []string
	iter := d.client.ScanType(ctx, 0, pat, 1000, "stream").Iterator()
	for iter.Next(ctx) {
		names = append(names, strings.TrimPrefix(iter.Val(), d.prefix+":"))
		if limit > 0 && len(names) >= limit {
			break
		}
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("redisstream: SCAN %s: %w", pat, err)
	}
	return names, nil
}

// globEscape escapes the glob characters of SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// List implements [broker.Lister] with XRANGE (XREVRANGE newest first)
// over each destination's stream, merged by stream id then destination
// name; the cursor is "<stream id>/<destination>" of the last position a
// page covers. Nothing is leased. Statuses come from the consumer group:
// leased (pending for a consumer whose lease is live), pending (never
// delivered, released, or whose lease expired) or replayed (acknowledged
// and kept by KeepAcked). One page examines at most about
// max(1000, 2×Limit) entries per destination: a selective filter may
// return a short or empty page with a cursor to go on.
func (d *driver) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	var after *pos
	if opts.After != "" {
		p, err := parseCursor(opts.After)
		if err != nil {
			return broker.Page{}, err
		}
		after = &p
	}
	dests, err := d.dests(ctx, opts.Destination)
	if err != nil {
		return broker.Page{}, err
	}
	less := func(a, b pos) bool { // a comes before b in the listing order
		if opts.Descending {
			return cmpPos(a, b) > 0
		}
		return cmpPos(a, b) < 0
	}
	var (
		all      []broker.Entry
		allPos   []pos
		frontier *pos // the earliest (in listing order) position a destination stopped at
	)
	for _, dest := range dests {
		if err := ctx.Err(); err != nil {
			return broker.Page{}, err
		}
		ents, ps, stop, err := d.listOne(ctx, dest, opts, after)
		if err != nil {
			return broker.Page{}, fmt.Errorf("redisstream: list %q: %w", dest, err)
		}
		all, allPos = append(all, ents...), append(allPos, ps...)
		if stop != nil && (frontier == nil || less(*stop, *frontier)) {
			frontier = stop
		}
	}
	idx := make([]int, 0, len(all))
	for i := range all {
		if frontier == nil || !less(*frontier, allPos[i]) {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(i, j int) int {
		if less(allPos[i], allPos[j]) {
			return -1
		}
		return 1
	})
	var page broker.Page
	for _, i := range idx[:min(len(idx), opts.Limit)] {
		page.Entries = append(page.Entries, all[i])
	}
	switch {
	case len(idx) > opts.Limit:
		page.Next = allPos[idx[opts.Limit-1]].cursor()
	case frontier != nil:
		page.Next = frontier.cursor()
	}
	return page, nil
}

// listOne reads one destination for List: up to opts.Limit matching
// entries after the cursor, with their positions, and where it stopped
// (nil when it reached the end of the stream).
func (d *driver) listOne(ctx context.Context, dest string, opts broker.ListOptions, after *pos) ([]broker.Entry, []pos, *pos, error) {
	key := d.streamKey(dest)
	start, end := "-", "+"
	if opts.Descending {
		start, end = "+", "-"
	}
	if after != nil {
		// Positions at the cursor's id come before or after it by
		// destination name.
		inclusive := dest > after.dest
		if opts.Descending {
			inclusive = dest < after.dest
		}
		start = after.id()
		if !inclusive {
			start = "(" + start
		}
	}
	if len(opts.Filter.IDs) > 0 {
		return d.listIDs(ctx, dest, opts, after)
	}
	budget := max(1000, 2*opts.Limit)
	var (
		ents    []broker.Entry
		ps      []pos
		last    *pos // the last entry examined
		scanned int
		stop    *pos
	)
	for {
		n := min(opts.Limit-len(ents)+1, 500, budget)
		if n <= 0 {
			stop = last // the budget ran out
			break
		}
		batch, err := d.readRange(ctx, key, dest, start, end, int64(n), opts.Descending)
		if err != nil {
			return nil, nil, nil, err
		}
		more := false
		for _, e := range batch {
			if len(ents) == opts.Limit {
				more = true // an entry follows the page's last match
				break
			}
			budget--
			scanned++
			p := e.p
			last = &p
			if r := record(e); matches(opts.Filter, r) {
				ents = append(ents, broker.Entry{Record: r, PublishedAt: time.UnixMilli(int64(min(e.p.ms, 1<<62)))})
				ps = append(ps, e.p)
			}
		}
		if more {
			stop = last
			break
		}
		if len(batch) < n {
			break // the end of the stream
		}
		start = "(" + batch[len(batch)-1].id
	}
	ents, ps, err := d.withStatus(ctx, key, opts.IncludeReplayed, ents, ps, scanned)
	return ents, ps, stop, err
}

// listIDs is listOne for a filter with record ids: it reads those
// entries only.
func (d *driver) listIDs(ctx context.Context, dest string, opts broker.ListOptions, after *pos) ([]broker.Entry, []pos, *pos, error) {
	key := d.streamKey(dest)
	var want []pos
	for _, id := range opts.Filter.IDs {
		ms, seq, ok := parseID(id)
		if !ok {
			continue
		}
		p := pos{ms, seq, dest}
		if after != nil && (opts.Descending && cmpPos(p, *after) >= 0 || !opts.Descending && cmpPos(p, *after) <= 0) {
			continue
		}
		want = append(want, p)
	}
	slices.SortFunc(want, func(a, b pos) int {
		if opts.Descending {
			return cmpPos(b, a)
		}
		return cmpPos(a, b)
	})
	want = slices.CompactFunc(want, func(a, b pos) bool { return cmpPos(a, b) == 0 })
	cmds := make([]*redis.Cmd, len(want))
	if len(want) > 0 {
		_, err := d.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, w := range want {
				cmds[i] = p.Do(ctx, "XRANGE", key, w.id(), w.id())
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, nil, fmt.Errorf("XRANGE %q: %w", key, err)
		}
	}
	var (
		ents []broker.Entry
		ps   []pos
		stop *pos
	)
	for i, c := range cmds {
		res, _ := c.Slice()
		if len(res) != 1 {
			continue
		}
		pair, _ := res[0].([]any)
		if len(pair) != 2 {
			continue
		}
		fields, _ := pair[1].([]any)
		e := entry{p: want[i], id: want[i].id(), fields: fields}
		if r := record(e); matches(opts.Filter, r) {
			if len(ents) == opts.Limit {
				stop = &ps[len(ps)-1]
				break
			}
			ents = append(ents, broker.Entry{Record: r, PublishedAt: time.UnixMilli(int64(min(e.p.ms, 1<<62)))})
			ps = append(ps, e.p)
		}
	}
	ents, ps, err := d.withStatus(ctx, key, opts.IncludeReplayed, ents, ps, len(want))
	return ents, ps, stop, err
}

// withStatus sets the status and delivery count of the entries of one
// stream from its consumer group, and drops replayed ones unless
// includeReplayed. scanned bounds the pending entries read: the entries
// examined between the first and the last of ents.
func (d *driver) withStatus(ctx context.Context, key string, includeReplayed bool, ents []broker.Entry, ps []pos, scanned int) ([]broker.Entry, []pos, error) {
	if len(ents) == 0 {
		return ents, ps, nil
	}
	lo, hi := ps[0], ps[len(ps)-1]
	if cmpPos(lo, hi) > 0 {
		lo, hi = hi, lo
	}
	st, err := d.groupState(ctx, key, lo.id(), hi.id(), int64(scanned)+16)
	if err != nil {
		return nil, nil, err
	}
	kept, keptPos := ents[:0], ps[:0]
	for i, e := range ents {
		status, n := d.status(st, entry{p: ps[i], id: e.Record.ID})
		if status == broker.StatusReplayed && !includeReplayed {
			continue
		}
		e.Status = status
		e.Record.Deliveries = n
		kept, keptPos = append(kept, e), append(keptPos, ps[i])
	}
	return kept, keptPos, nil
}
