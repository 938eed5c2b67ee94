package stores

import (
	"context"
	"errors"
	"net/url"
	"strings"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/postgis" // registers postgres:// and postgresql://
	"github.com/geodlq/geodlq/classify"
)

// postgres://USER@HOST:PORT/DB?sslmode=…&geodlq_schema=S&geodlq_table=T&lease_ttl=30s
// opens the PostGIS store through broker.OpenStore, whose opener
// broker/postgis registers (its package doc has the URL form): with a
// connect timeout, migrating only for commands that may create the store,
// and refusing a database without the table otherwise.
func init() {
	register("postgres", openPostGIS)
	register("postgresql", openPostGIS)
}

func openPostGIS(ctx context.Context, _ *url.URL, raw string, opts Options) (Store, error) {
	s, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{Create: opts.Create, Store: broker.StoreOptions{Logger: opts.Logger}})
	if err != nil {
		// Open names the store in its error already.
		if inner := errors.Unwrap(err); inner != nil {
			return nil, inner
		}
		return nil, err
	}
	return postgisStore{s}, nil
}

// postgisStore adapts the portable store to this package's [Lister] and
// [Purger].
type postgisStore struct{ *broker.Store }

// Scan implements [Lister] with the store's List, scanPage rows a page.
func (s postgisStore) Scan(ctx context.Context, dest string, f broker.Filter, replayed bool, fn func(Entry) error) error {
	opts := broker.ListOptions{Destination: dest, Filter: f, IncludeReplayed: replayed, Limit: scanPage}
	return s.ScanAll(ctx, opts, func(e broker.Entry) error {
		return fn(Entry{Record: e.Record, Status: string(e.Status), PublishedAt: e.PublishedAt, ReplayedAt: e.ReplayedAt})
	})
}

// Purge implements [Purger] with the store's Purge, which deletes and
// checks blob references in one transaction that holds off writers.
func (s postgisStore) Purge(ctx context.Context, req PurgeRequest) (PurgeResult, error) {
	if req.Before.IsZero() {
		return PurgeResult{}, errors.New("postgis: purge needs a cutoff time")
	}
	f := broker.Filter{Until: req.Before}
	for _, c := range req.Classes {
		f.Classes = append(f.Classes, classify.Class(c))
	}
	res, err := s.Store.Purge(ctx, broker.PurgeRequest{Destination: req.Destination, Filter: f, IncludePending: !req.ReplayedOnly, DryRun: req.DryRun})
	if err != nil {
		return PurgeResult{}, err
	}
	out := PurgeResult{BlobURIs: res.BlobURIs, Orphaned: res.Orphaned}
	for _, id := range res.IDs {
		// Record ids, as the command reports them; across destinations the
		// store names each "destination/id".
		if i := strings.LastIndexByte(id, '/'); i >= 0 && req.Destination == "" {
			id = id[i+1:]
		}
		out.IDs = append(out.IDs, id)
	}
	return out, nil
}
