package stores

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/sqlite" // the sqlite:// scheme of broker.OpenStore
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/offload"
)

// sqlite://PATH opens the embedded store through broker.OpenStore (the
// URL and its parameters are documented by broker/sqlite).
//
// file://DIR opens a blob directory (offload.NewDirStore).
func init() {
	register("sqlite", openSQLite)
	registerBlobs("file", openDir)
}

func openSQLite(ctx context.Context, _ *url.URL, raw string, opts Options) (Store, error) {
	s, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{Create: opts.Create, Store: broker.StoreOptions{Logger: opts.Logger}})
	if err != nil {
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // Open names the store itself
		}
		return nil, err
	}
	return portable{s}, nil
}

// portable is a [Lister] and [Purger] over a store's own List, Stats and
// Purge.
type portable struct{ *broker.Store }

// Destinations implements [Lister]: the destinations holding envelopes,
// replayed ones included.
func (s portable) Destinations(ctx context.Context) ([]string, error) {
	counts, err := s.Stats(ctx, broker.StatsOptions{})
	if err != nil {
		return nil, err
	}
	var withEnvelopes []broker.Count
	for _, c := range counts {
		if c.Class != "" {
			withEnvelopes = append(withEnvelopes, c)
		}
	}
	return destinationsOf(withEnvelopes, func(c broker.Count) string { return c.Destination }), nil
}

// Scan implements [Lister] with the store's List, scanPage records a page.
func (s portable) Scan(ctx context.Context, dest string, f broker.Filter, replayed bool, fn func(Entry) error) error {
	return s.ScanAll(ctx, broker.ListOptions{Destination: dest, Filter: f, IncludeReplayed: replayed, Limit: scanPage},
		func(e broker.Entry) error {
			return fn(Entry{Record: e.Record, Status: string(e.Status), PublishedAt: e.PublishedAt, ReplayedAt: e.ReplayedAt})
		})
}

// Purge implements [Purger] with the store's Purge.
func (s portable) Purge(ctx context.Context, req PurgeRequest) (PurgeResult, error) {
	f := broker.Filter{Until: req.Before}
	for _, c := range req.Classes {
		cl, err := classify.ParseClass(c)
		if err != nil {
			return PurgeResult{}, err
		}
		f.Classes = append(f.Classes, cl)
	}
	r, err := s.Store.Purge(ctx, broker.PurgeRequest{Destination: req.Destination, Filter: f, IncludePending: !req.ReplayedOnly, DryRun: req.DryRun})
	if err != nil {
		return PurgeResult{}, err
	}
	if req.Destination == "" {
		for i, id := range r.IDs { // "destination/id": the command wants the id
			r.IDs[i] = id[strings.LastIndexByte(id, '/')+1:]
		}
	}
	return PurgeResult{IDs: r.IDs, BlobURIs: r.BlobURIs, Orphaned: r.Orphaned}, nil
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
