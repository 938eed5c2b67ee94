package broker

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The portable Store's listing for drivers that do not sort, count or
// summarise themselves (see [ListCapabler]): every matching record is
// scanned, once per call, keeping only a page's worth.

// SortValue returns the value of s that k orders by: math.MinInt64 for a
// record that is not an envelope (it comes first), dead_lettered_at in
// nanoseconds since the Unix epoch (clamped to years 1678 to 2262), or
// the count. SortWritten has no value (0).
func SortValue(s *Summary, k SortKey) int64 {
	if s == nil || !s.Envelope {
		return math.MinInt64
	}
	switch k {
	case SortDeadLetteredAt:
		return clampNanos(s.DeadLetteredAt)
	case SortVertexCount:
		return int64(s.VertexCount)
	case SortGeometryBytes:
		return s.GeometryBytes
	case SortAttempts:
		return int64(s.Attempts)
	}
	return 0
}

var (
	minNanoTime = time.Unix(0, math.MinInt64+1)
	maxNanoTime = time.Unix(0, math.MaxInt64)
)

// clampNanos is t in nanoseconds since the epoch, clamped to what an int64
// holds (above math.MinInt64, which stands for "no value").
func clampNanos(t time.Time) int64 {
	switch {
	case t.Before(minNanoTime):
		return math.MinInt64 + 1
	case t.After(maxNanoTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// sortCursor is the cursor of a listing the Store sorts: the last
// record's sort value, destination and id.
type sortCursor struct {
	V int64  `json:"v"`
	D string `json:"d"`
	I string `json:"i"`
}

const sortCursorPrefix = "s1."

func (c sortCursor) encode() string {
	b, _ := json.Marshal(c)
	return sortCursorPrefix + base64.RawURLEncoding.EncodeToString(b)
}

func decodeSortCursor(s string) (sortCursor, error) {
	var c sortCursor
	rest, ok := strings.CutPrefix(s, sortCursorPrefix)
	if !ok || len(rest) > 8192 {
		return c, fmt.Errorf("list cursor %q is not one of a sorted listing: %w", clipText(s, 40), ErrInvalidArgument)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || json.Unmarshal(b, &c) != nil {
		return c, fmt.Errorf("list cursor %q is not one of a sorted listing: %w", clipText(s, 40), ErrInvalidArgument)
	}
	return c, nil
}

// compareIDs orders record ids: numerically when both are decimal
// numbers without sign (shorter first), else byte by byte.
func compareIDs(a, b string) int {
	if decimal(a) && decimal(b) {
		if c := cmp.Compare(len(a), len(b)); c != 0 {
			return c
		}
	}
	return strings.Compare(a, b)
}

func decimal(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (c sortCursor) compare(d sortCursor) int {
	if x := cmp.Compare(c.V, d.V); x != 0 {
		return x
	}
	if x := strings.Compare(c.D, d.D); x != 0 {
		return x
	}
	return compareIDs(c.I, d.I)
}

// scanMatching calls fn for every record of opts (its destination, filter
// and IncludeReplayed) with its summary, reading the driver page by page
// in the written order: summaries when the driver lists them, else bodies
// (filtered here). fn may keep the entry; its message is dropped unless
// keepBodies.
func scanMatching(ctx context.Context, l Lister, caps ListCapabilities, opts ListOptions, keepBodies bool, fn func(Entry, *Summary) error) error {
	lo := ListOptions{Destination: opts.Destination, Filter: opts.Filter, IncludeReplayed: opts.IncludeReplayed,
		Limit: MaxListLimit, Summaries: caps.Summaries && !keepBodies, MaxBytes: opts.MaxBytes}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, err := l.List(ctx, lo)
		if err != nil {
			return err
		}
		for _, e := range p.Entries {
			if e.Record == nil {
				continue
			}
			if !lo.Summaries {
				if e.Record.Envelope == nil && e.Record.Message != nil {
					if env, err := EnvelopeOf(e.Record.Message); err == nil {
						e.Record.Envelope = env
					}
				}
				if !opts.Filter.IsZero() && !caps.Summaries && !opts.Filter.MatchRecord(e.Record) {
					continue
				}
				sum := SummaryOf(e.Record, opts.Filter.SourcePointer)
				e.Summary = &sum
				if !keepBodies {
					e.Record.Message, e.Record.Envelope = nil, nil
				}
			}
			if e.Summary == nil {
				sum := Summary{}
				e.Summary = &sum
			}
			if err := fn(e, e.Summary); err != nil {
				return err
			}
		}
		if p.Next == "" || p.Next == lo.After {
			return nil
		}
		lo.After = p.Next
	}
}

// countMatching counts the records of opts by scanning them.
func countMatching(ctx context.Context, l Lister, caps ListCapabilities, opts ListOptions) (n int, lowerBound bool, err error) {
	err = scanMatching(ctx, l, caps, opts, false, func(Entry, *Summary) error {
		if opts.TotalCap > 0 && n == opts.TotalCap {
			lowerBound = true
			return errCapped
		}
		n++
		return nil
	})
	if errors.Is(err, errCapped) {
		err = nil
	}
	return n, lowerBound, err
}

// errCapped ends countMatching's scan at ListOptions.TotalCap.
var errCapped = errors.New("count capped")

// sortItem is a candidate of a sorted page.
type sortItem struct {
	key sortCursor
	e   Entry
}

// sortHeap keeps the best candidates, the worst on top.
type sortHeap struct {
	items []sortItem
	desc  bool
}

func (h *sortHeap) Len() int { return len(h.items) }
func (h *sortHeap) Less(i, j int) bool {
	c := h.items[i].key.compare(h.items[j].key)
	if h.desc {
		return c < 0
	}
	return c > 0
}
func (h *sortHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *sortHeap) Push(x any)    { h.items = append(h.items, x.(sortItem)) }
func (h *sortHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

// listSorted is [Store.List] in an order the driver does not list in: one
// scan of every matching record keeps the page's (Limit + 1 summaries),
// then, without opts.Summaries, their bodies are read by id.
func listSorted(ctx context.Context, l Lister, caps ListCapabilities, opts ListOptions) (Page, error) {
	var after *sortCursor
	if opts.After != "" {
		c, err := decodeSortCursor(opts.After)
		if err != nil {
			return Page{}, err
		}
		after = &c
	}
	h := &sortHeap{desc: opts.Descending}
	total := 0
	err := scanMatching(ctx, l, caps, opts, false, func(e Entry, sum *Summary) error {
		total++
		k := sortCursor{V: SortValue(sum, opts.Sort), D: e.Record.Destination, I: e.Record.ID}
		if after != nil {
			c := k.compare(*after)
			if (!opts.Descending && c <= 0) || (opts.Descending && c >= 0) {
				return nil
			}
		}
		if h.Len() <= opts.Limit {
			heap.Push(h, sortItem{k, e})
			return nil
		}
		if top := h.items[0].key.compare(k); (!opts.Descending && top > 0) || (opts.Descending && top < 0) {
			h.items[0] = sortItem{k, e}
			heap.Fix(h, 0)
		}
		return nil
	})
	if err != nil {
		return Page{}, err
	}
	items := h.items
	slices.SortFunc(items, func(a, b sortItem) int {
		if opts.Descending {
			return b.key.compare(a.key)
		}
		return a.key.compare(b.key)
	})
	var p Page
	if opts.Total {
		p.Total = total
	}
	more := len(items) > opts.Limit
	items = items[:min(len(items), opts.Limit)]
	if !opts.Summaries {
		var cut bool
		if items, cut, err = withBodies(ctx, l, caps, opts, items); err != nil {
			return Page{}, err
		}
		more = more || cut
	}
	for _, it := range items {
		p.Entries = append(p.Entries, it.e)
	}
	if more && len(items) > 0 {
		p.Next = items[len(items)-1].key.encode()
	}
	return p, nil
}

// withBodies reads the messages of items (in their order) by id, up to
// opts.MaxBytes of bodies (at least one record): cut reports that the
// page ends early. Records gone meanwhile are left out.
func withBodies(ctx context.Context, l Lister, caps ListCapabilities, opts ListOptions, items []sortItem) ([]sortItem, bool, error) {
	byDest := map[string][]string{}
	for _, it := range items {
		byDest[it.e.Record.Destination] = append(byDest[it.e.Record.Destination], it.e.Record.ID)
	}
	type rk struct{ d, id string }
	got := map[rk]Entry{}
	budget := 0
	for d, ids := range byDest {
		for len(ids) > 0 && budget < opts.MaxBytes {
			p, err := l.List(ctx, ListOptions{Destination: d, Filter: Filter{IDs: ids}, IncludeReplayed: true,
				Limit: len(ids), MaxBytes: opts.MaxBytes - budget})
			if err != nil {
				return nil, false, err
			}
			n := 0
			for _, e := range p.Entries {
				if e.Record == nil || e.Record.Message == nil || !slices.Contains(ids, e.Record.ID) {
					continue
				}
				got[rk{d, e.Record.ID}] = e
				budget += len(e.Record.Message.Body)
				n++
			}
			if n == 0 {
				break
			}
			ids = slices.DeleteFunc(ids, func(id string) bool { _, ok := got[rk{d, id}]; return ok })
		}
	}
	out := items[:0]
	used := 0
	for _, it := range items {
		e, ok := got[rk{it.e.Record.Destination, it.e.Record.ID}]
		if !ok {
			if budget >= opts.MaxBytes && len(out) > 0 {
				return out, true, nil // not read: over the budget
			}
			continue // gone meanwhile
		}
		size := len(e.Record.Message.Body)
		if len(out) > 0 && used+size > opts.MaxBytes {
			return out, true, nil
		}
		used += size
		if !caps.Summaries && !opts.Filter.IsZero() && !opts.Filter.MatchRecord(e.Record) {
			continue
		}
		it.e = e
		out = append(out, it)
	}
	return out, false, nil
}
