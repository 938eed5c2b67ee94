package broker

import (
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

// ListOptions selects one page of records for [Store.List].
type ListOptions struct {
	// Destination lists one destination; "" lists every destination.
	Destination string
	// Filter selects records (see [Filter]).
	Filter Filter
	// IncludeReplayed lists acknowledged records too, in stores that keep
	// them.
	IncludeReplayed bool
	// Newest lists newest first. Default oldest first.
	Newest bool
	// After is the cursor from the previous page's [Page.Next]; "" starts
	// at the beginning. Cursors are opaque and belong to one store and one
	// set of options.
	After string
	// Limit is the page size. Default [DefaultListLimit], at most
	// [MaxListLimit].
	Limit int
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
}

// Page is one page of [Store.List].
type Page struct {
	// Entries are the page's records.
	Entries []Entry
	// Next is the cursor for ListOptions.After of the next page; "" when
	// this is the last page.
	Next string
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
// count.
func countByListing(ctx context.Context, l Lister, opts StatsOptions) ([]Count, error) {
	type key struct {
		dest   string
		class  classify.Class
		stage  classify.Stage
		epsg   int
		kind   classify.ReasonKind
		bucket time.Time
	}
	idx := map[key]int{}
	var out []Count
	lo := ListOptions{Destination: opts.Destination, Filter: opts.Filter, IncludeReplayed: true, Limit: MaxListLimit}
	for {
		p, err := l.List(ctx, lo)
		if err != nil {
			return nil, err
		}
		for _, e := range p.Entries {
			if e.Record == nil || (!opts.Filter.IsZero() && !opts.Filter.MatchRecord(e.Record)) {
				continue
			}
			k := key{dest: e.Record.Destination}
			if env, err := EnvelopeOf(e.Record.Message); err == nil {
				k.class, k.stage, k.epsg = env.FailureClass, env.FailedStage, EPSGOf(env)
				if env.GeometryError != nil {
					k.kind = classify.ReasonKind(env.GeometryError.Kind)
				}
				if opts.Bucket > 0 {
					k.bucket = BucketOf(env.DeadLetteredAt, opts.Bucket)
				}
			} else if e.Record.Envelope != nil {
				k.class, k.stage = e.Record.Envelope.FailureClass, e.Record.Envelope.FailedStage
			}
			i, ok := idx[k]
			if !ok {
				i = len(out)
				idx[k] = i
				out = append(out, Count{Destination: k.dest, Class: k.class, Stage: k.stage, EPSG: k.epsg, ReasonKind: k.kind, Bucket: k.bucket})
			}
			switch e.Status {
			case StatusReplayed:
				out[i].Replayed++
			case StatusLeased:
				out[i].Leased++
			default:
				out[i].Pending++
			}
		}
		if p.Next == "" {
			break
		}
		lo.After = p.Next
	}
	slices.SortFunc(out, func(a, b Count) int {
		return strings.Compare(fmt.Sprint(a.Destination, a.Class, a.Stage, a.EPSG, a.ReasonKind, a.Bucket.UnixNano()),
			fmt.Sprint(b.Destination, b.Class, b.Stage, b.EPSG, b.ReasonKind, b.Bucket.UnixNano()))
	})
	return out, nil
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
