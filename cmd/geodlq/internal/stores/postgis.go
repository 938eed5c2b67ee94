package stores

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/envelope"
)

// postgres://USER@HOST:PORT/DB?sslmode=…&geodlq_schema=S&geodlq_table=T&lease_ttl=30s
// opens the PostGIS store (broker/postgis) in table S.T (default
// geodlq.dead_letters); the geodlq_* and lease_ttl parameters are taken
// out before the URL goes to pgx. Commands that may create the store run
// its migrations.
func init() {
	register("postgres", openPostGIS)
	register("postgresql", openPostGIS)
}

func openPostGIS(ctx context.Context, u *url.URL, _ string, opts Options) (Store, error) {
	q := u.Query()
	o := &postgis.Options{Schema: q.Get("geodlq_schema"), Table: q.Get("geodlq_table"), Migrate: opts.Create, Logger: opts.Logger}
	if v := q.Get("lease_ttl"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("postgis: lease_ttl: %w", err)
		}
		o.LeaseTTL = d
	}
	for _, k := range []string{"geodlq_schema", "geodlq_table", "lease_ttl"} {
		q.Del(k)
	}
	dsn := *u
	dsn.RawQuery = q.Encode()
	pool, err := pgxpool.New(ctx, dsn.String())
	if err != nil {
		return nil, err
	}
	s, err := postgis.New(ctx, pool, o)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pgStore{s}, nil
}

type pgStore struct{ *postgis.Store }

// Close closes the pool the opener made.
func (s pgStore) Close() error {
	s.Pool().Close()
	return nil
}

// Destinations implements [Lister] with the store's Stats.
func (s pgStore) Destinations(ctx context.Context) ([]string, error) {
	counts, err := s.Stats(ctx, "", broker.Filter{}, nil)
	if err != nil {
		return nil, err
	}
	return destinationsOf(counts, func(c postgis.Count) string { return c.Destination }), nil
}

// Scan implements [Lister] with the store's List, 500 rows a page.
func (s pgStore) Scan(ctx context.Context, dest string, f broker.Filter, replayed bool, fn func(Entry) error) error {
	return scanByID(func(after int64, limit int) ([]postgis.Entry, error) {
		return s.List(ctx, dest, f, &postgis.ListOptions{IncludeReplayed: replayed, AfterID: after, Limit: limit})
	}, func(e postgis.Entry) Entry {
		return Entry{Record: e.Record, Status: e.Status, PublishedAt: e.PublishedAt, ReplayedAt: e.ReplayedAt}
	}, fn)
}

// Purge deletes in one transaction that first takes a SHARE ROW EXCLUSIVE
// lock on the table: writers wait for it (readers do not), so no envelope
// can be written between the delete and the reference check.
func (s pgStore) Purge(ctx context.Context, req PurgeRequest) (res PurgeResult, err error) {
	if req.Before.IsZero() {
		return res, errors.New("postgis: purge needs a cutoff time")
	}
	tx, err := s.Pool().BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return res, fmt.Errorf("postgis: purge: %w", err)
	}
	defer func() {
		if err != nil || req.DryRun {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	t := s.Table()
	if _, err := tx.Exec(ctx, `LOCK TABLE `+t+` IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		return res, fmt.Errorf("postgis: purge: %w", err)
	}
	classes := req.Classes
	if classes == nil {
		classes = []string{}
	}
	cond := ` WHERE is_envelope AND dead_lettered_at < $1
		AND ($2::text = '' OR destination = $2::text)
		AND (cardinality($3::text[]) = 0 OR failure_class = ANY($3::text[]))
		AND (status = 'replayed' OR (NOT $4::boolean AND (status = 'pending' OR (status = 'leased' AND lease_until <= now()))))`
	q := `DELETE FROM ` + t + cond + ` RETURNING id, body`
	if req.DryRun {
		q = `SELECT id, body FROM ` + t + cond
	}
	rows, err := tx.Query(ctx, q, req.Before, req.Destination, classes, req.ReplayedOnly)
	if err != nil {
		return res, fmt.Errorf("postgis: purge: %w", err)
	}
	var ids []int64
	uris := map[string]bool{}
	for rows.Next() {
		var id int64
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			rows.Close()
			return res, fmt.Errorf("postgis: purge: %w", err)
		}
		ids = append(ids, id)
		if env, err := envelope.Decode(body); err == nil {
			for _, u := range []string{env.Geometry.OffloadURI, env.RawPayloadOffloadURI} {
				if u != "" {
					uris[u] = true
				}
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("postgis: purge: %w", err)
	}
	slices.Sort(ids)
	for _, id := range ids {
		res.IDs = append(res.IDs, strconv.FormatInt(id, 10))
	}
	for u := range uris {
		res.BlobURIs = append(res.BlobURIs, u)
	}
	slices.Sort(res.BlobURIs)
	for _, u := range res.BlobURIs {
		var used bool
		// Deleted rows are gone inside this transaction; in a dry run the
		// selected rows are excluded by id.
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+t+` WHERE position($1::bytea IN body) > 0 AND id <> ALL($2::bigint[]))`,
			[]byte(u), ids).Scan(&used); err != nil {
			return res, fmt.Errorf("postgis: purge: reference check: %w", err)
		}
		if !used {
			res.Orphaned = append(res.Orphaned, u)
		}
	}
	if req.DryRun {
		return res, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("postgis: purge commit: %w", err)
	}
	return res, nil
}
