package stores

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/offload"
)

// sqlite://PATH opens the embedded store in the file PATH, relative
// (sqlite://./dlq.db) or absolute (sqlite:///var/lib/geodlq/dlq.db).
// Query parameter lease_ttl (a Go duration) sets the lease of fetched
// records; default 30s.
//
// file://DIR opens a blob directory (offload.NewDirStore).
func init() {
	register("sqlite", openSQLite)
	registerBlobs("file", openDir)
}

func openSQLite(ctx context.Context, u *url.URL, raw string, opts Options) (Store, error) {
	path := afterScheme(raw)
	if path == "" {
		return nil, errors.New("sqlite: empty path (want sqlite://./dlq.db or sqlite:///abs/dlq.db)")
	}
	if !opts.Create {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
	}
	o := &sqlite.Options{}
	if v := u.Query().Get("lease_ttl"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("sqlite: lease_ttl: %w", err)
		}
		o.LeaseTTL = d
	}
	s, err := sqlite.Open(ctx, path, o)
	if err != nil {
		return nil, err
	}
	return sqliteStore{s}, nil
}

type sqliteStore struct{ *sqlite.Store }

// Destinations implements [Lister] with the store's Stats.
func (s sqliteStore) Destinations(ctx context.Context) ([]string, error) {
	counts, err := s.Stats(ctx, broker.Filter{})
	if err != nil {
		return nil, err
	}
	return destinationsOf(counts, func(c sqlite.Count) string { return c.Destination }), nil
}

// Scan implements [Lister] with the store's List, 500 rows a page.
func (s sqliteStore) Scan(ctx context.Context, dest string, f broker.Filter, replayed bool, fn func(Entry) error) error {
	return scanByID(func(after int64, limit int) ([]sqlite.Entry, error) {
		return s.List(ctx, dest, f, sqlite.ListOptions{IncludeReplayed: replayed, AfterID: after, Limit: limit})
	}, func(e sqlite.Entry) Entry {
		st := StatusPending
		if !e.ReplayedAt.IsZero() {
			st = StatusReplayed
		}
		return Entry{Record: e.Record, Status: st, PublishedAt: e.PublishedAt, ReplayedAt: e.ReplayedAt}
	}, fn)
}

// Purge implements [Purger] with sqlite.Store.Purge.
func (s sqliteStore) Purge(ctx context.Context, req PurgeRequest) (PurgeResult, error) {
	f := broker.Filter{Until: req.Before}
	for _, c := range req.Classes {
		cl, err := classify.ParseClass(c)
		if err != nil {
			return PurgeResult{}, err
		}
		f.Classes = append(f.Classes, cl)
	}
	r, err := s.Store.Purge(ctx, req.Destination, sqlite.PurgeOptions{Filter: f, Pending: !req.ReplayedOnly, DryRun: req.DryRun})
	return PurgeResult{IDs: r.IDs, BlobURIs: r.BlobURIs, Orphaned: r.Orphaned}, err
}

func openDir(_ context.Context, _ *url.URL, raw string, create bool) (offload.Store, io.Closer, error) {
	dir := afterScheme(raw)
	if dir == "" {
		return nil, nil, errors.New("file: empty directory (want file:///abs/dir or file://./dir)")
	}
	if _, err := os.Stat(dir); !create && errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("file: %w", err)
	}
	d, err := offload.NewDirStore(dir)
	if err != nil {
		return nil, nil, err
	}
	return listedDir{d, offload.DirLister(d)}, d, nil
}
