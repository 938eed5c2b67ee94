package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
)

// where renders f as SQL conditions (each starting with " AND") and their
// arguments. Every field is applied in SQL; a filter with a field other
// than IDs matches envelopes only, as [broker.Filter] says.
func where(f broker.Filter) (string, []any) {
	if f.IsZero() {
		return "", nil
	}
	var b strings.Builder
	var args []any
	in := func(col string, vals []any) {
		b.WriteString(" AND " + col + " IN (" + strings.TrimSuffix(strings.Repeat("?,", len(vals)), ",") + ")")
		args = append(args, vals...)
	}
	if len(f.IDs) > 0 {
		var ids []any
		for _, s := range f.IDs {
			if id, err := strconv.ParseInt(s, 10, 64); err == nil && id > 0 && strconv.FormatInt(id, 10) == s {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			b.WriteString(" AND 0") // no id of this store
		} else {
			in("id", ids)
		}
	}
	envelopeOnly := f
	envelopeOnly.IDs = nil
	if envelopeOnly.IsZero() {
		return b.String(), args
	}
	b.WriteString(" AND is_envelope = 1")
	if len(f.Classes) > 0 {
		v := make([]any, len(f.Classes))
		for i, c := range f.Classes {
			v[i] = string(c)
		}
		in("failure_class", v)
	}
	if len(f.Stages) > 0 {
		v := make([]any, len(f.Stages))
		for i, s := range f.Stages {
			v[i] = string(s)
		}
		in("failed_stage", v)
	}
	if len(f.ReasonKinds) > 0 {
		v := make([]any, len(f.ReasonKinds))
		for i, k := range f.ReasonKinds {
			v[i] = string(k)
		}
		in("reason_kind", v)
	}
	if len(f.EPSG) > 0 {
		v := make([]any, len(f.EPSG))
		for i, e := range f.EPSG {
			v[i] = e
		}
		in("epsg", v)
	}
	if len(f.EventIDs) > 0 {
		v := make([]any, len(f.EventIDs))
		for i, e := range f.EventIDs {
			v[i] = e
		}
		in("event_id", v)
	}
	if !f.Since.IsZero() {
		b.WriteString(" AND dead_lettered_at >= ?")
		args = append(args, nanos(f.Since))
	}
	if !f.Until.IsZero() {
		b.WriteString(" AND dead_lettered_at < ?")
		args = append(args, nanos(f.Until))
	}
	if f.BBox != nil {
		b.WriteString(" AND loc_x >= ? AND loc_x <= ? AND loc_y >= ? AND loc_y <= ?")
		args = append(args, f.BBox.Min[0], f.BBox.Max[0], f.BBox.Min[1], f.BBox.Max[1])
	}
	return b.String(), args
}

// List implements [broker.Lister]: records in id (publish) order, every
// filter field applied in SQL. Replayed records are kept until purged, so
// IncludeReplayed lists them too. The cursor is the last record id of the
// page, in decimal.
func (d *drv) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	var after int64
	if opts.After != "" {
		v, err := strconv.ParseInt(opts.After, 10, 64)
		if err != nil || v <= 0 {
			return broker.Page{}, fmt.Errorf("sqlite: list cursor %q: %w", opts.After, broker.ErrInvalidArgument)
		}
		after = v
	}
	if opts.Limit <= 0 || opts.Limit > broker.MaxListLimit {
		opts.Limit = broker.DefaultListLimit // the portable store never asks for these
	}
	q := `SELECT id, destination, msg_key, headers, body, deliveries, published_at, lease_until, acked_at FROM dlq_records WHERE 1`
	var args []any
	if opts.Destination != "" {
		q += ` AND destination = ?`
		args = append(args, opts.Destination)
	}
	if !opts.IncludeReplayed {
		q += ` AND acked_at IS NULL`
	}
	order := ` ORDER BY id`
	if after > 0 {
		if opts.Descending {
			q += ` AND id < ?`
		} else {
			q += ` AND id > ?`
		}
		args = append(args, after)
	}
	if opts.Descending {
		order += ` DESC`
	}
	cond, fargs := where(opts.Filter)
	q += cond + order + ` LIMIT ?`
	args = append(append(args, fargs...), opts.Limit+1)
	now := nanos(d.now())
	page, err := read(ctx, d, func(ctx context.Context, db *sql.DB) (broker.Page, error) {
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return broker.Page{}, err
		}
		defer rows.Close()
		var p broker.Page
		for rows.Next() {
			if len(p.Entries) == opts.Limit {
				p.Next = p.Entries[len(p.Entries)-1].Record.ID
				break
			}
			var (
				id                int64
				dest, headers     string
				key, body         []byte
				deliveries        int
				published         int64
				leaseUntil, acked sql.NullInt64
			)
			if err := rows.Scan(&id, &dest, &key, &headers, &body, &deliveries, &published, &leaseUntil, &acked); err != nil {
				return broker.Page{}, err
			}
			e := broker.Entry{
				Record: &broker.Record{ID: strconv.FormatInt(id, 10), Destination: dest, Deliveries: deliveries,
					Message: &broker.Message{Key: key, Body: body, Headers: d.headers(ctx, id, headers)}},
				Status:      broker.StatusPending,
				PublishedAt: time.Unix(0, published).UTC(),
			}
			switch {
			case acked.Valid:
				e.Status, e.ReplayedAt = broker.StatusReplayed, time.Unix(0, acked.Int64).UTC()
			case leaseUntil.Valid && leaseUntil.Int64 > now:
				e.Status = broker.StatusLeased
			}
			p.Entries = append(p.Entries, e)
		}
		return p, rows.Err()
	})
	if err != nil {
		return broker.Page{}, fmt.Errorf("sqlite: list: %w", err)
	}
	return page, nil
}

// Destinations implements [broker.Lister]: every destination holding a
// record, replayed records included (they are kept until purged).
func (d *drv) Destinations(ctx context.Context) ([]string, error) {
	ds, err := read(ctx, d, func(ctx context.Context, db *sql.DB) ([]string, error) {
		rows, err := db.QueryContext(ctx, `SELECT DISTINCT destination FROM dlq_records ORDER BY 1`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var ds []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return nil, err
			}
			ds = append(ds, s)
		}
		return ds, rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: destinations: %w", err)
	}
	return ds, nil
}

// Stats implements [broker.Statser] with one GROUP BY over the indexed
// columns: counts by destination, class, stage, EPSG, reason kind and,
// with opts.Bucket, dead-letter time, each split into pending, leased and
// replayed, in that order of fields.
func (d *drv) Stats(ctx context.Context, opts broker.StatsOptions) ([]broker.Count, error) {
	now := nanos(d.now())
	bucket := "NULL"
	var args []any // in the order of the placeholders: the bucket's, the statuses', the selection's
	if b := min(opts.Bucket.Nanoseconds(), math.MaxInt64/2); b > 0 {
		// Floor to a multiple of b since the epoch, for times before it too;
		// with times and b clamped to half an int64 nothing overflows.
		bucket = "dead_lettered_at - ((dead_lettered_at % ?) + ?) % ?"
		args = append(args, b, b, b)
	}
	args = append(args, now, now)
	q := `SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0),
		COALESCE(reason_kind, ''), ` + bucket + `,
		SUM(acked_at IS NULL AND (lease_until IS NULL OR lease_until <= ?)),
		SUM(acked_at IS NULL AND COALESCE(lease_until, 0) > ?),
		SUM(acked_at IS NOT NULL)
		FROM dlq_records WHERE 1`
	if opts.Destination != "" {
		q += ` AND destination = ?`
		args = append(args, opts.Destination)
	}
	cond, fargs := where(opts.Filter)
	q += cond + ` GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6`
	args = append(args, fargs...)
	counts, err := read(ctx, d, func(ctx context.Context, db *sql.DB) ([]broker.Count, error) {
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []broker.Count
		for rows.Next() {
			var (
				c                  broker.Count
				class, stage, kind string
				at                 sql.NullInt64
			)
			if err := rows.Scan(&c.Destination, &class, &stage, &c.EPSG, &kind, &at, &c.Pending, &c.Leased, &c.Replayed); err != nil {
				return nil, err
			}
			c.Class, c.Stage = classify.Class(class), classify.Stage(stage)
			c.ReasonKind = classify.ReasonKind(kind)
			if at.Valid {
				c.Bucket = time.Unix(0, at.Int64).UTC()
			}
			out = append(out, c)
		}
		return out, rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	return counts, nil
}
