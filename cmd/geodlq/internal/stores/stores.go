// Package stores opens dead-letter stores and blob stores by URL for the
// geodlq command.
//
// Each dead-letter store adapter registers an [Opener] for its URL scheme
// (sqlite.go, postgis.go, …: one small file each). An opened [Store] is a
// broker.Publisher and a broker.DeadLetterSource; the operator's commands
// ask for more through optional interfaces:
//
//   - [Lister]: read records without leasing them, list destinations;
//   - [Purger]: delete old records and report unreferenced blobs.
//
// A store without them still serves check, replay and triage; list,
// stats, export and verify fall back to leasing records and releasing them
// at once (see [Scan]).
package stores

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/offload"
)

// ErrUnknownScheme is wrapped by [Open] and [OpenBlobs] for a URL whose
// scheme no opener is registered for.
var ErrUnknownScheme = errors.New("unknown URL scheme")

// Store is an opened dead-letter store.
type Store interface {
	broker.Publisher
	broker.DeadLetterSource
	io.Closer
}

// The statuses of an [Entry].
const (
	StatusPending  = "pending"
	StatusLeased   = "leased"
	StatusReplayed = "replayed"
)

// Entry is a record read without a lease.
type Entry struct {
	// Record holds the id, destination and message; the body of a
	// dead-letter record is its encoded envelope.
	Record *broker.Record
	// Status is StatusPending, StatusLeased or StatusReplayed; "" when the
	// store does not say.
	Status string
	// PublishedAt is when the record was written, if known.
	PublishedAt time.Time
	// ReplayedAt is when the record was acknowledged, or zero.
	ReplayedAt time.Time
}

// Lister is implemented by stores that can read records without leasing
// them.
type Lister interface {
	// Destinations returns the destinations that hold envelopes, sorted.
	Destinations(ctx context.Context) ([]string, error)
	// Scan calls fn for every record of dest ("" for every destination)
	// that matches f, oldest first; replayed records too when replayed is
	// set. A non-zero f matches envelopes only. An error from fn stops the
	// scan and is returned.
	Scan(ctx context.Context, dest string, f broker.Filter, replayed bool, fn func(Entry) error) error
}

// scanPage is how many rows the SQL stores' [Lister.Scan] reads at a time.
const scanPage = 500

// scanByID is [Lister.Scan] over a SQL store whose record ids are
// increasing integers: it calls list for pages of scanPage rows after the
// last id seen, and fn with each row as entry makes it, until a page comes
// back short.
func scanByID[R any](list func(afterID int64, limit int) ([]R, error), entry func(R) Entry, fn func(Entry) error) error {
	var after int64
	for {
		rows, err := list(after, scanPage)
		if err != nil {
			return err
		}
		for _, r := range rows {
			e := entry(r)
			if err := fn(e); err != nil {
				return err
			}
			after, _ = strconv.ParseInt(e.Record.ID, 10, 64)
		}
		if len(rows) < scanPage {
			return nil
		}
	}
}

// destinationsOf returns the distinct destinations of a store's stats
// rows, sorted: [Lister.Destinations] for the SQL stores.
func destinationsOf[C any](counts []C, dest func(C) string) []string {
	var ds []string
	for _, c := range counts {
		if d := dest(c); !slices.Contains(ds, d) {
			ds = append(ds, d)
		}
	}
	slices.Sort(ds)
	return ds
}

// PurgeRequest selects the records a [Purger] deletes.
type PurgeRequest struct {
	// Destination is the destination to purge; "" for every destination.
	Destination string
	// Before deletes records dead-lettered before it. Required.
	Before time.Time
	// Classes, when set, deletes only records of these failure classes.
	Classes []string
	// ReplayedOnly keeps records that were never replayed.
	ReplayedOnly bool
	// DryRun deletes nothing and reports what would be deleted.
	DryRun bool
}

// PurgeResult reports what a [Purger] deleted.
type PurgeResult struct {
	// IDs are the deleted records' ids.
	IDs []string
	// BlobURIs are the offload URIs the deleted envelopes referenced.
	BlobURIs []string
	// Orphaned are the BlobURIs no remaining record references.
	Orphaned []string
}

// Purger is implemented by stores that can delete records. Records under
// a live lease are never deleted. Selection, deletion and the blob
// reference check must be atomic with respect to writers of the store.
// Blobs are not touched: the command collects them with
// offload.Offloader.Sweep.
type Purger interface {
	Purge(ctx context.Context, req PurgeRequest) (PurgeResult, error)
}

// Options are passed to an [Opener].
type Options struct {
	// Create allows the opener to create the store (a new SQLite file, a
	// table) when it does not exist. Commands that only read leave it
	// false, so a mistyped path is an error rather than an empty store.
	Create bool
	// Logger receives the adapter's log records. Nil discards.
	Logger *slog.Logger
}

// Opener opens the store a URL names. raw is the URL as given, for
// adapters whose driver takes it verbatim.
type Opener func(ctx context.Context, u *url.URL, raw string, opts Options) (Store, error)

// BlobOpener opens the blob store a URL names; the returned closer
// releases it.
type BlobOpener func(ctx context.Context, u *url.URL, raw string, create bool) (offload.Store, io.Closer, error)

// The registries are filled by init functions of this package only, and
// read-only afterwards.
var (
	openers     = map[string]Opener{}
	blobOpeners = map[string]BlobOpener{}
)

func register(scheme string, o Opener)          { openers[scheme] = o }
func registerBlobs(scheme string, o BlobOpener) { blobOpeners[scheme] = o }

// Schemes returns the registered dead-letter store schemes, sorted.
func Schemes() []string { return sortedKeys(openers) }

// BlobSchemes returns the registered blob store schemes, sorted.
func BlobSchemes() []string { return sortedKeys(blobOpeners) }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func parse(raw string) (*url.URL, error) {
	if !strings.Contains(raw, "://") {
		return nil, fmt.Errorf("%q is not a URL (want scheme://…): %w", raw, ErrUnknownScheme)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// Paths like sqlite://./a b.db are fine for us even when net/url
		// objects; keep the scheme and the rest verbatim.
		scheme, rest, _ := strings.Cut(raw, "://")
		u = &url.URL{Scheme: scheme, Opaque: rest}
	}
	return u, nil
}

// Open opens the dead-letter store raw names.
func Open(ctx context.Context, raw string, opts Options) (Store, error) {
	u, err := parse(raw)
	if err != nil {
		return nil, err
	}
	o, ok := openers[u.Scheme]
	if !ok {
		return nil, fmt.Errorf("store %s: scheme %q (known: %s): %w", Redact(raw), u.Scheme, strings.Join(Schemes(), ", "), ErrUnknownScheme)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := o(ctx, u, raw, opts)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", Redact(raw), err)
	}
	return s, nil
}

// BlobOptions shape the offloader [OpenBlobs] returns.
type BlobOptions struct {
	// BaseURI is the base URI the envelopes' offload URIs were written
	// with; default the blob store's own (the URL, for a directory the
	// absolute file:// URI). Set it when the blobs were moved.
	BaseURI string
	// Prefix is the key prefix; default offload.DefaultPrefix.
	Prefix string
	// Create allows the opener to create the blob store (a directory).
	Create bool
}

// OpenBlobs opens the blob store raw names and returns an offloader over
// it; close the closer when done.
func OpenBlobs(ctx context.Context, raw string, opts BlobOptions) (*offload.Offloader, io.Closer, error) {
	u, err := parse(raw)
	if err != nil {
		return nil, nil, err
	}
	o, ok := blobOpeners[u.Scheme]
	if !ok {
		return nil, nil, fmt.Errorf("blobs %s: scheme %q (known: %s): %w", Redact(raw), u.Scheme, strings.Join(BlobSchemes(), ", "), ErrUnknownScheme)
	}
	st, closer, err := o(ctx, u, raw, opts.Create)
	if err != nil {
		return nil, nil, fmt.Errorf("blobs %s: %w", Redact(raw), err)
	}
	off, err := offload.New(st, &offload.Options{BaseURI: opts.BaseURI, Prefix: opts.Prefix})
	if err != nil {
		_ = closer.Close()
		return nil, nil, fmt.Errorf("blobs %s: %w", Redact(raw), err)
	}
	return off, closer, nil
}

// Redact returns raw with any password replaced by "xxxxx", for messages.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}

// afterScheme returns what follows "scheme://" in raw, without a query:
// the path of a file-based store, relative ("sqlite://./dlq.db") or
// absolute ("sqlite:///var/lib/dlq.db").
func afterScheme(raw string) string {
	_, rest, _ := strings.Cut(raw, "://")
	rest, _, _ = strings.Cut(rest, "?")
	return rest
}

// Scan reads the records of dest matching f without keeping them: through
// the store's [Lister] when it has one, otherwise by leasing every
// matching pending record with Fetch and releasing them all once fn has
// seen them (replayed records cannot be read that way, and a replayer
// running at the same time skips the leased ones meanwhile).
func Scan(ctx context.Context, s Store, dest string, f broker.Filter, replayed bool, fn func(Entry) error) error {
	if l, ok := s.(Lister); ok {
		return l.Scan(ctx, dest, f, replayed, fn)
	}
	if dest == "" {
		return errors.New("this store cannot list its destinations: name them with --dest")
	}
	var held []*broker.Record
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, r := range held {
			_ = s.Release(rctx, r)
		}
	}()
	seen := map[string]bool{}
	for {
		recs, err := s.Fetch(ctx, dest, f, 100)
		if err != nil {
			return err
		}
		fresh := 0
		for _, r := range recs {
			held = append(held, r)
			if seen[r.ID] {
				continue
			}
			seen[r.ID] = true
			fresh++
			if err := fn(Entry{Record: r, Status: StatusPending}); err != nil {
				return err
			}
		}
		if fresh == 0 {
			return nil
		}
	}
}
