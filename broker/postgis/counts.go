package postgis

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/geodlq/geodlq/broker"
)

// countsVersion is the schema version with {table}_counts and
// {table}_count_log (see migration 4).
const countsVersion = 4

// compactEvery is how many rows a handle writes, acknowledges or purges
// between two foldings of the count log into the counts: the log a count
// reads stays a few thousand rows long.
const compactEvery = 4096

// counted reports whether the table keeps counts (schema version 4).
func (d *driver) counted(ctx context.Context) bool {
	return d.current(ctx) && d.version.Load() >= countsVersion
}

// defaultPointer reports whether pointer is the default source pointer,
// whose value the source column (and so the counts) holds.
func defaultPointer(pointer string) bool {
	return pointer == "" || pointer == broker.DefaultSourcePointer
}

// countable reports whether the counts can answer for f: its fields are
// the counts' own (class, stage, reason kind, EPSG, the default source).
func countable(f broker.Filter) bool {
	g := f
	g.Classes, g.Stages, g.ReasonKinds, g.EPSG = nil, nil, nil, nil
	if defaultPointer(f.SourcePointer) {
		g.Sources, g.SourcePrefix, g.SourcePointer = nil, "", ""
	}
	return g.IsZero()
}

// countsFrom is the counts with the changes not yet folded in: sum n over
// it by the fields.
const countsFrom = `(SELECT * FROM {s}.{n}_counts UNION ALL SELECT * FROM {s}.{n}_count_log) AS c`

// wrote notes that n rows were written, acknowledged or deleted, and folds
// the count log into the counts once compactEvery of them have been since
// the last time (best effort: an error is logged, and the next write
// tries again).
func (d *driver) wrote(ctx context.Context, n int) {
	if n <= 0 {
		return
	}
	after := d.sinceCompact.Add(int64(n))
	if after < compactEvery || !d.sinceCompact.CompareAndSwap(after, 0) {
		return
	}
	if d.version.Load() < countsVersion {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := d.compact(ctx); err != nil {
		d.log.WarnContext(ctx, "geodlq: folding the count log into the counts", slog.String("table", d.table), slog.Any("error", err))
	}
}

// compact folds {table}_count_log into {table}_counts in one transaction,
// unless another handle is doing it (an advisory lock: then it returns
// nil at once).
func (d *driver) compact(ctx context.Context) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtext($1))`, "geodlq counts "+d.table).Scan(&got); err != nil {
			return fmt.Errorf("postgis: counts: %w", err)
		}
		if !got {
			return nil
		}
		_, err := tx.Exec(ctx, d.render(`WITH moved AS (DELETE FROM {s}.{n}_count_log RETURNING *)
INSERT INTO {s}.{n}_counts AS c
SELECT destination, failure_class, failed_stage, epsg, reason_kind, source, is_envelope, replayed, sum(n)
FROM moved GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8
ON CONFLICT (destination, failure_class, failed_stage, epsg, reason_kind, source, is_envelope, replayed)
DO UPDATE SET n = c.n + excluded.n`))
		if err != nil {
			return fmt.Errorf("postgis: counts: %w", err)
		}
		if _, err := tx.Exec(ctx, d.render(`DELETE FROM {s}.{n}_counts WHERE n = 0`)); err != nil {
			return fmt.Errorf("postgis: counts: %w", err)
		}
		return nil
	})
}

// total is Page.Total from the counts, for a countable filter.
func (d *driver) total(ctx context.Context, opts broker.ListOptions) (int, error) {
	a := &sqlArgs{}
	q := `SELECT COALESCE(sum(n), 0) FROM ` + d.render(countsFrom) + ` WHERE true`
	if opts.Destination != "" {
		q += ` AND destination = ` + a.add(opts.Destination) + `::text`
	}
	if !opts.IncludeReplayed {
		q += ` AND NOT replayed`
	}
	q += where(opts.Filter, a, true)
	var n int64
	if err := d.pool.QueryRow(ctx, q, a.list...).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgis: list: counting: %w", err)
	}
	return int(n), nil
}

// statsFromCounts is Stats from the counts (a few thousand rows rather
// than every record): open and replayed records by their fields, with the
// records under a live lease (found by {table}_leased) moved from pending
// to leased.
func (d *driver) statsFromCounts(ctx context.Context, opts broker.StatsOptions) ([]broker.Count, error) {
	a := &sqlArgs{}
	src := "''"
	if opts.BySource {
		src = "CASE WHEN is_envelope THEN COALESCE(source, '') ELSE '' END"
	}
	cond := ""
	if opts.Destination != "" {
		cond += ` AND destination = ` + a.add(opts.Destination) + `::text`
	}
	cond += where(opts.Filter, a, true)
	q := `SELECT destination, failure_class, failed_stage, epsg, reason_kind, ` + src + `,
		COALESCE(sum(n) FILTER (WHERE NOT replayed), 0), COALESCE(sum(n) FILTER (WHERE replayed), 0)
		FROM ` + d.render(countsFrom) + ` WHERE true` + cond + ` GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6`
	lq := `SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0), COALESCE(reason_kind, ''), ` + src + `, count(*)
		FROM ` + d.table + ` WHERE status = 'leased' AND lease_until > now()` + cond + ` GROUP BY 1, 2, 3, 4, 5, 6`
	var out, leased []broker.Count
	err := pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		out, leased = nil, nil
		rows, err := tx.Query(ctx, q, a.list...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c broker.Count
			var epsg, open, replayed int64
			if err := rows.Scan(&c.Destination, &c.Class, &c.Stage, &epsg, &c.ReasonKind, &c.Source, &open, &replayed); err != nil {
				return err
			}
			if open == 0 && replayed == 0 {
				continue
			}
			c.EPSG, c.Pending, c.Replayed = int(epsg), int(open), int(replayed)
			out = append(out, c)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		lrows, err := tx.Query(ctx, lq, a.list...)
		if err != nil {
			return err
		}
		defer lrows.Close()
		for lrows.Next() {
			var c broker.Count
			var epsg, n int64
			if err := lrows.Scan(&c.Destination, &c.Class, &c.Stage, &epsg, &c.ReasonKind, &c.Source, &n); err != nil {
				return err
			}
			c.EPSG, c.Pending = int(epsg), int(n)
			leased = append(leased, c)
		}
		return lrows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("postgis: stats: %w", err)
	}
	broker.MoveLeased(out, leased)
	if opts.BySource && opts.SourceDepth > 0 {
		out = broker.MergeCounts(out, func(c *broker.Count) { c.Source = broker.SourceGroup(c.Source, opts.SourceDepth) })
	}
	return out, nil
}
