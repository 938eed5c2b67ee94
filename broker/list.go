package broker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/geodlq/geodlq/classify"
)

// List page sizes.
const (
	// DefaultListLimit is the page size of [Store.List] when
	// ListOptions.Limit is 0.
	DefaultListLimit = 100
	// MaxListLimit is the largest page [Store.List] returns.
	MaxListLimit = 1000
)

// Status is the state of a record in its store.
type Status string

// The record statuses.
const (
	// StatusPending: waiting to be replayed.
	StatusPending Status = "pending"
	// StatusLeased: fetched by a replayer whose lease is live.
	StatusLeased Status = "leased"
	// StatusReplayed: acknowledged (replayed); kept by stores that keep
	// history until purged.
	StatusReplayed Status = "replayed"
)

// DefaultListBytes is the most body bytes a page of [Store.List] holds
// when ListOptions.MaxBytes is 0.
const DefaultListBytes = 16 << 20

// SortKey is an order of [Store.List] (ListOptions.Sort): records are
// ordered by it across all pages, ties in the order they were written.
// Records whose body is not a dlq.v1 envelope have no such value: they
// come first, in the order they were written.
type SortKey string

// The orders of a listing.
const (
	// SortWritten is the order records were written: the default.
	SortWritten SortKey = ""
	// SortDeadLetteredAt orders by the envelope's dead_lettered_at.
	SortDeadLetteredAt SortKey = "dead_lettered_at"
	// SortVertexCount orders by the geometry's vertex count.
	SortVertexCount SortKey = "vertex_count"
	// SortGeometryBytes orders by the geometry's size in bytes.
	SortGeometryBytes SortKey = "geometry_bytes"
	// SortAttempts orders by the number of attempts before the event was
	// dead-lettered.
	SortAttempts SortKey = "attempts"
)

// SortKeys returns every order of a listing, the default first.
func SortKeys() []SortKey {
	return []SortKey{SortWritten, SortDeadLetteredAt, SortVertexCount, SortGeometryBytes, SortAttempts}
}

// Valid reports whether k is one of [SortKeys].
func (k SortKey) Valid() bool { return slices.Contains(SortKeys(), k) }

// ListOptions selects one page of records for [Store.List].
type ListOptions struct {
	// Destination lists one destination; "" lists every destination.
	Destination string
	// Filter selects records (see [Filter]).
	Filter Filter
	// IncludeReplayed lists acknowledged records too, in stores that keep
	// them.
	IncludeReplayed bool
	// Sort orders the records across all pages (see [SortKey]). Default
	// [SortWritten], the order records were written.
	Sort SortKey
	// Descending lists in descending order of Sort: newest first, or the
	// largest first. Default ascending (oldest first).
	Descending bool
	// After is the cursor from the previous page's [Page.Next]; "" starts
	// at the beginning. Cursors are opaque and belong to one store and one
	// set of options.
	After string
	// Limit is the page size. Default [DefaultListLimit], at most
	// [MaxListLimit].
	Limit int
	// Summaries lists summaries only: each Entry's Summary is set and its
	// Record has no Message, so that a page costs the same whatever the
	// size of its records. Default false: entries carry the record's
	// message (and no Summary).
	Summaries bool
	// MaxBytes ends a page early, with a cursor to go on, once its
	// records' bodies hold this many bytes (a page holds at least one
	// record). Default [DefaultListBytes]. Without Summaries only.
	MaxBytes int
	// Total asks for Page.Total, the number of records that match across
	// all pages.
	Total bool
	// TotalCap, when positive, lets the store stop counting Page.Total
	// once TotalCap records match: when more match and counting them all
	// would be costly (a common word of Filter.Text), Page.Total is then
	// TotalCap and Page.TotalIsLowerBound is set. Default 0: Total is
	// exact.
	TotalCap int
}

// Entry is a record read without a lease.
type Entry struct {
	// Record holds the id, destination and message (the envelope bytes),
	// and the decoded envelope when the store decoded it. Its Lease is
	// empty.
	Record *Record
	// Status is the record's status; "" when the store cannot tell.
	Status Status
	// PublishedAt is when the record was written, if known.
	PublishedAt time.Time
	// ReplayedAt is when the record was acknowledged, or zero.
	ReplayedAt time.Time
	// Summary is the record's summary, set when ListOptions.Summaries is
	// (with Summary.Source the record's source at the filter's
	// SourcePointer).
	Summary *Summary
}

// Page is one page of [Store.List].
type Page struct {
	// Entries are the page's records.
	Entries []Entry
	// Next is the cursor for ListOptions.After of the next page; "" when
	// this is the last page.
	Next string
	// Total is, when ListOptions.Total is set, the number of records that
	// match the options across all pages (After and Limit aside); 0
	// otherwise.
	Total int
	// TotalIsLowerBound reports that Total is a lower bound, not the
	// count: at least Total records match (only with ListOptions.TotalCap,
	// Total then being TotalCap). Show it as "≥ Total".
	TotalIsLowerBound bool
}

// ListCapabilities says which parts of [ListOptions] a [Lister] applies
// itself; the portable [Store] does the rest (see [ListCapabler]).
type ListCapabilities struct {
	// Sorts are the orders, besides SortWritten, the driver lists in
	// across pages, ascending and descending.
	Sorts []SortKey
	// Summaries: with ListOptions.Summaries the driver sets each entry's
	// Summary (Source included) without reading bodies, and applies every
	// field of the filter itself.
	Summaries bool
	// Total: the driver sets Page.Total when ListOptions.Total is set.
	Total bool
	// MaxBytes: the driver ends its pages at ListOptions.MaxBytes.
	MaxBytes bool
	// Stats: the driver's [Statser] groups by source
	// (StatsOptions.BySource) and applies the filter's text and source
	// fields; without it the portable Store counts such requests by
	// listing.
	Stats bool
}

// ListCapabler is implemented by a [Lister] that applies more of
// [ListOptions] than the options every Lister honours (Destination,
// IncludeReplayed, Descending in the written order, After, Limit; Filter
// as it can). For what a driver does not declare, the portable [Store]
// steps in: it sorts by scanning every matching record (keeping a page's
// worth, then reading their bodies by id), counts by scanning, computes
// summaries from bodies, and filters what the driver returns.
type ListCapabler interface {
	ListCapabilities() ListCapabilities
}

// StatsOptions selects the records [Store.Stats] counts.
type StatsOptions struct {
	// Destination counts one destination; "" counts every destination.
	Destination string
	// Filter selects records (see [Filter]); a non-zero filter counts
	// envelopes only.
	Filter Filter
	// Bucket, when positive, also groups by dead_lettered_at truncated to
	// a multiple of Bucket (since the Unix epoch, UTC): failures over time.
	Bucket time.Duration
	// BySource also groups by the event's source: its value at
	// Filter.SourcePointer ([SourceValue]), cut to its first SourceDepth
	// parts ([SourceGroup]; 0: whole).
	BySource bool
	// SourceDepth: see BySource. At most [MaxSourceDepth].
	SourceDepth int
}

// Count is the number of records sharing one combination of fields.
// Records whose body is not a dlq.v1 envelope have empty Class, Stage and
// ReasonKind and EPSG 0.
type Count struct {
	Destination string
	Class       classify.Class
	Stage       classify.Stage
	EPSG        int
	ReasonKind  classify.ReasonKind
	// Bucket is the start of the time bucket, when StatsOptions.Bucket is
	// set.
	Bucket time.Time
	// Source is the event's source, cut to StatsOptions.SourceDepth parts,
	// when StatsOptions.BySource is set ("" for none).
	Source string
	// Pending, Leased and Replayed count records by status (stores that
	// cannot tell a leased record from a pending one count it pending).
	Pending, Leased, Replayed int
}

// Total returns Pending + Leased + Replayed.
func (c Count) Total() int { return c.Pending + c.Leased + c.Replayed }

// PurgeRequest selects the records [Store.Purge] deletes.
type PurgeRequest struct {
	// Destination purges one destination; "" every destination. Required
	// with IDs, whose record ids are unique within a destination only.
	Destination string
	// Filter selects records (see [Filter]); Filter.Until purges by age,
	// Filter.IDs discards given records. At least one of Until, IDs or
	// EventIDs is required: a purge never deletes everything by accident.
	Filter Filter
	// IncludePending deletes records that were never replayed as well.
	// Default false: only replayed (acknowledged) records are deleted.
	IncludePending bool
	// DryRun deletes nothing and reports what would be deleted.
	DryRun bool
}

func (r PurgeRequest) validate() error {
	if err := r.Filter.Validate(); err != nil {
		return err
	}
	if r.Filter.Until.IsZero() && len(r.Filter.IDs) == 0 && len(r.Filter.EventIDs) == 0 {
		return fmt.Errorf("a purge needs Filter.Until, Filter.IDs or Filter.EventIDs: %w", ErrInvalidArgument)
	}
	if len(r.Filter.IDs) > 0 && r.Destination == "" {
		return fmt.Errorf("a purge by record id needs its Destination: %w", ErrInvalidArgument)
	}
	if r.Destination != "" {
		return ValidDestination(r.Destination)
	}
	return nil
}

// PurgeResult reports what [Store.Purge] deleted (or, in a dry run, would
// delete).
type PurgeResult struct {
	// IDs are the deleted records' ids, "destination/id" when the request
	// named no destination.
	IDs []string
	// BlobURIs lists, sorted and without duplicates, the offload URIs the
	// deleted envelopes referenced.
	BlobURIs []string
	// Orphaned lists the BlobURIs no remaining record of the store
	// references: the blobs that may be deleted (see offload.Sweep).
	Orphaned []string
}

// BucketOf returns the start of the time bucket of width d that holds t,
// counted from the Unix epoch in UTC, as [StatsOptions.Bucket] groups
// (time.Truncate counts from year 1, which puts week buckets on the wrong
// day). d <= 0 returns the zero time.
func BucketOf(t time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	// Whole seconds and nanoseconds separately, so that no date overflows.
	sec, nsec := t.Unix(), int64(t.Nanosecond())
	if d%time.Second == 0 {
		w := int64(d / time.Second)
		b := sec / w * w
		if sec%w < 0 {
			b -= w
		}
		return time.Unix(b, 0).UTC()
	}
	ns := sec*int64(time.Second) + nsec
	b := ns / int64(d) * int64(d)
	if ns%int64(d) < 0 {
		b -= int64(d)
	}
	return time.Unix(0, b).UTC()
}

// countByListing is [Store.Stats] for a driver that can list but not
// count: it reads every matching record's summary.
func countByListing(ctx context.Context, l Lister, opts StatsOptions) ([]Count, error) {
	type key struct {
		dest   string
		class  classify.Class
		stage  classify.Stage
		epsg   int
		kind   classify.ReasonKind
		bucket time.Time
		source string
	}
	idx := map[key]int{}
	var out []Count
	lo := ListOptions{Destination: opts.Destination, Filter: opts.Filter, IncludeReplayed: true, MaxBytes: DefaultListBytes}
	err := scanMatching(ctx, l, capabilitiesOf(l), lo, false, func(e Entry, sum *Summary) error {
		k := key{dest: e.Record.Destination}
		if sum.Envelope {
			k.class, k.stage, k.epsg, k.kind = sum.Class, sum.Stage, sum.EPSG, sum.ReasonKind
			if opts.Bucket > 0 {
				k.bucket = BucketOf(sum.DeadLetteredAt, opts.Bucket)
			}
			if opts.BySource {
				k.source = SourceGroup(sum.Source, opts.SourceDepth)
			}
		}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, Count{Destination: k.dest, Class: k.class, Stage: k.stage, EPSG: k.epsg, ReasonKind: k.kind,
				Bucket: k.bucket, Source: k.source})
		}
		switch e.Status {
		case StatusReplayed:
			out[i].Replayed++
		case StatusLeased:
			out[i].Leased++
		default:
			out[i].Pending++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, CompareCounts)
	return out, nil
}

// CompareCounts orders counts by destination, class, stage, EPSG, reason
// kind, bucket and source: the order [Store.Stats] returns them in.
func CompareCounts(a, b Count) int {
	return cmp.Or(strings.Compare(a.Destination, b.Destination), strings.Compare(string(a.Class), string(b.Class)),
		strings.Compare(string(a.Stage), string(b.Stage)), cmp.Compare(a.EPSG, b.EPSG),
		strings.Compare(string(a.ReasonKind), string(b.ReasonKind)), a.Bucket.Compare(b.Bucket),
		strings.Compare(a.Source, b.Source))
}

// ScanAll calls fn for every entry [Store.List] returns for opts, page by
// page, until the last page or until fn returns an error, which ScanAll
// returns. opts.After is where it starts.
func (s *Store) ScanAll(ctx context.Context, opts ListOptions, fn func(Entry) error) error {
	for {
		p, err := s.List(ctx, opts)
		if err != nil {
			return err
		}
		for _, e := range p.Entries {
			if err := fn(e); err != nil {
				return err
			}
		}
		if p.Next == "" || p.Next == opts.After {
			return nil
		}
		opts.After = p.Next
	}
}

// MoveLeased moves, for each count of leased (its Pending: records of
// those fields under a live lease), as many records of the count of counts
// with the same fields from Pending to Leased (at most its Pending).
// Drivers that keep counts of the open records (not of the leases, which
// lapse by themselves) read the live leases apart and settle them here.
func MoveLeased(counts, leased []Count) {
	idx := make(map[Count]int, len(counts))
	for i, c := range counts {
		c.Pending, c.Leased, c.Replayed = 0, 0, 0
		idx[c] = i
	}
	for _, l := range leased {
		n := l.Pending
		l.Pending, l.Leased, l.Replayed = 0, 0, 0
		if i, ok := idx[l]; ok {
			m := min(n, counts[i].Pending)
			counts[i].Pending -= m
			counts[i].Leased += m
		}
	}
}

// MergeCounts applies key to every count (to regroup them: cut their
// Source, drop their Bucket) and merges the counts that then share every
// field, in the order of [CompareCounts]. Drivers use it to cut sources
// to StatsOptions.SourceDepth after grouping by the whole value.
func MergeCounts(counts []Count, key func(*Count)) []Count {
	idx := map[Count]int{}
	var out []Count
	for _, c := range counts {
		key(&c)
		k := c
		k.Pending, k.Leased, k.Replayed = 0, 0, 0
		if i, ok := idx[k]; ok {
			out[i].Pending += c.Pending
			out[i].Leased += c.Leased
			out[i].Replayed += c.Replayed
			continue
		}
		idx[k] = len(out)
		out = append(out, c)
	}
	slices.SortFunc(out, CompareCounts)
	return out
}
