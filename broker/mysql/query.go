package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/mysql/internal/schema"
	"github.com/geodlq/geodlq/broker/txretry"
	"github.com/geodlq/geodlq/classify"
)

// cond is a filter as SQL: " AND …" conditions and their arguments.
type cond struct {
	sql  string
	args []any
	// none: the filter matches no row (only record ids that cannot be
	// this store's).
	none bool
}

func (c *cond) add(sql string, args ...any) {
	c.sql += " AND " + sql
	c.args = append(c.args, args...)
}

func (c *cond) in(column string, n int, each func(i int) any) {
	c.sql += " AND " + column + " IN (" + placeholders(n) + ")"
	for i := range n {
		c.args = append(c.args, each(i))
	}
}

// where turns every field of f into SQL that matches exactly what
// f.MatchRecord accepts: record ids, then the envelope's fields (which
// only envelopes have).
func where(f broker.Filter) cond {
	var c cond
	if len(f.IDs) > 0 {
		var ids []any
		for _, s := range f.IDs {
			if id, err := strconv.ParseUint(s, 10, 64); err == nil && strconv.FormatUint(id, 10) == s {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return cond{none: true}
		}
		c.in("id", len(ids), func(i int) any { return ids[i] })
	}
	g := f
	g.IDs = nil
	if g.IsZero() {
		return c
	}
	c.add("is_envelope")
	if len(f.EventIDs) > 0 {
		c.in("event_id", len(f.EventIDs), func(i int) any { return []byte(f.EventIDs[i]) })
	}
	if len(f.Classes) > 0 {
		c.in("failure_class", len(f.Classes), func(i int) any { return []byte(f.Classes[i]) })
	}
	if len(f.Stages) > 0 {
		c.in("failed_stage", len(f.Stages), func(i int) any { return []byte(f.Stages[i]) })
	}
	if len(f.ReasonKinds) > 0 {
		c.in("reason_kind", len(f.ReasonKinds), func(i int) any { return []byte(f.ReasonKinds[i]) })
	}
	if len(f.EPSG) > 0 {
		c.in("epsg", len(f.EPSG), func(i int) any { return int64(f.EPSG[i]) })
	}
	// Since <= t < Until, to the nanosecond: (microseconds, nanoseconds).
	if !f.Since.IsZero() {
		us, ns := f.Since.UnixMicro(), int64(f.Since.Nanosecond()%1000)
		c.add("(dead_lettered_us > ? OR (dead_lettered_us = ? AND dead_lettered_ns >= ?))", us, us, ns)
	}
	if !f.Until.IsZero() {
		us, ns := f.Until.UnixMicro(), int64(f.Until.Nanosecond()%1000)
		c.add("(dead_lettered_us < ? OR (dead_lettered_us = ? AND dead_lettered_ns < ?))", us, us, ns)
	}
	if b := f.BBox; b != nil {
		c.add("loc_x BETWEEN ? AND ? AND loc_y BETWEEN ? AND ?", b.Min[0], b.Max[0], b.Min[1], b.Max[1])
	}
	return c
}

// where is [where] with the text and source fields, which need the
// search table and the attributes (schema version 2).
func (d *driver) where(f broker.Filter) cond {
	c := where(f)
	if c.none {
		return c
	}
	if f.Text != "" {
		// The narrow search table is read row by row (MySQL has no
		// substring index): far less than the table's rows, bodies and all.
		c.add("id IN (SELECT id FROM "+d.search+" WHERE LOCATE(?, search) > 0)", []byte(broker.SearchFold(f.Text)))
	}
	if len(f.Sources) > 0 {
		expr, args := sourceExpr(f.SourcePointer)
		c.sql += " AND " + expr + " IN (" + placeholders(len(f.Sources)) + ")"
		c.args = append(c.args, args...)
		for _, s := range f.Sources {
			c.args = append(c.args, []byte(s))
		}
	}
	if f.SourcePrefix != "" {
		expr, args := sourceExpr(f.SourcePointer)
		c.add("LEFT("+expr+", ?) = ?", append(args, len(f.SourcePrefix), []byte(f.SourcePrefix))...)
	}
	return c
}

// sourceExpr is the SQL of a record's source at pointer (see
// [broker.SourceValue]), with its arguments: the source column for the
// default pointer, else the bytes of attrs between "\n" + pointer + "\t"
// and the next "\n".
func sourceExpr(pointer string) (string, []any) {
	if pointer == "" || pointer == broker.DefaultSourcePointer {
		return "COALESCE(source, '')", nil
	}
	n := []byte("\n" + pointer + "\t")
	return "IF(LOCATE(?, attrs) > 0, SUBSTRING_INDEX(SUBSTRING(attrs, LOCATE(?, attrs) + ?), '\\n', 1), '')", []any{n, n, len(n)}
}

// sortColumn is the column a sort key orders by.
func sortColumn(k broker.SortKey) string {
	switch k {
	case broker.SortDeadLetteredAt:
		return "dead_lettered_nanos"
	case broker.SortVertexCount:
		return "vertex_count"
	case broker.SortGeometryBytes:
		return "geometry_bytes"
	case broker.SortAttempts:
		return "attempts"
	}
	return ""
}

// ListCapabilities implements [broker.ListCapabler]: every list option,
// in SQL.
func (d *driver) ListCapabilities() broker.ListCapabilities {
	return broker.ListCapabilities{Sorts: broker.SortKeys()[1:], Summaries: true, Total: true, MaxBytes: true, Stats: true}
}

// statusSQL is a row's status: replayed, leased (a live lease) or
// pending.
const statusSQL = `CASE WHEN acked_at IS NOT NULL THEN 'replayed'
	WHEN lease_until > UTC_TIMESTAMP(6) THEN 'leased' ELSE 'pending' END`

// usSQL is a DATETIME(6) column in microseconds since the Unix epoch,
// whatever the session's time zone and the DSN's parseTime.
func usSQL(col string) string {
	return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ")"
}

// List implements [broker.Lister]: records in id order, or by opts.Sort
// then id (descending with opts.Descending), across destinations, every
// filter field in SQL; a page ends at opts.Limit records or once its
// bodies hold opts.MaxBytes. With opts.Summaries no body is read (a row an
// older geodlq wrote, without a summary, is summarised from its body).
// The cursor is the last listed id, preceded by its sort value and ":" in
// a sorted listing.
func (d *driver) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	w := d.where(opts.Filter)
	if w.none {
		return broker.Page{}, nil
	}
	key := sortColumn(opts.Sort)
	var c cond
	if opts.Destination != "" {
		c.add("destination = ?", []byte(opts.Destination))
	}
	if !opts.IncludeReplayed {
		c.add("acked_at IS NULL")
	}
	c.sql += w.sql
	c.args = append(c.args, w.args...)
	var page broker.Page
	switch {
	case opts.Total && countable(opts.Filter):
		n, err := d.total(ctx, opts)
		if err != nil {
			return broker.Page{}, err
		}
		page.Total = n
	case opts.Total && opts.TotalCap > 0:
		// Count no further than one past the cap.
		q := `SELECT COUNT(*) FROM (SELECT 1 FROM ` + d.table + ` WHERE TRUE` + c.sql + ` LIMIT ?) capped`
		if err := d.db.QueryRowContext(ctx, q, append(slices.Clone(c.args), opts.TotalCap+1)...).Scan(&page.Total); err != nil {
			return broker.Page{}, fmt.Errorf("mysql: list: counting: %w", err)
		}
		if page.Total > opts.TotalCap {
			page.Total, page.TotalIsLowerBound = opts.TotalCap, true
		}
	case opts.Total:
		if err := d.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+d.table+` WHERE TRUE`+c.sql, c.args...).Scan(&page.Total); err != nil {
			return broker.Page{}, fmt.Errorf("mysql: list: counting: %w", err)
		}
	}
	order := " ASC"
	op := ">"
	if opts.Descending {
		order, op = " DESC", "<"
	}
	if opts.After != "" {
		rest := opts.After
		var afterKey int64
		if key != "" {
			k, r, ok := strings.Cut(rest, ":")
			v, err := strconv.ParseInt(k, 10, 64)
			if !ok || err != nil {
				return broker.Page{}, fmt.Errorf("mysql: list cursor %q: %w", opts.After, broker.ErrInvalidArgument)
			}
			afterKey, rest = v, r
		}
		after, err := strconv.ParseUint(rest, 10, 64)
		if err != nil {
			return broker.Page{}, fmt.Errorf("mysql: list cursor %q: %w", opts.After, broker.ErrInvalidArgument)
		}
		if key != "" {
			c.add("("+key+", id) "+op+" (?, ?)", afterKey, after)
		} else {
			c.add("id "+op+" ?", after)
		}
	}
	var selArgs []any
	cols := `msg_key, headers, binary_headers, body, NULL, ''`
	if opts.Summaries {
		src, srcArgs := sourceExpr(opts.Filter.SourcePointer)
		cols = `NULL, IF(indexed, NULL, headers), IF(indexed, NULL, binary_headers), IF(indexed, NULL, body), IF(indexed, summary, NULL), ` + src
		selArgs = srcArgs
	}
	keyCol := "0"
	orderBy := "id" + order
	if key != "" {
		keyCol = key
		orderBy = key + order + ", id" + order
	}
	q := `SELECT id, destination, ` + cols + `, ` + keyCol + `, deliveries, ` + statusSQL + `,
		` + usSQL("published_at") + `, COALESCE(` + usSQL("acked_at") + `, 0)
		FROM ` + d.table + ` WHERE TRUE` + c.sql + ` ORDER BY ` + orderBy + ` LIMIT ?`
	args := append(append(selArgs, c.args...), opts.Limit+1)
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return broker.Page{}, fmt.Errorf("mysql: list: %w", err)
	}
	defer rows.Close()
	var (
		last    uint64
		lastKey int64
		bytes   int
	)
	for rows.Next() {
		var (
			id                  uint64
			k                   int64
			dest                []byte
			key, hdr, bin, body []byte
			summary, source     []byte
			deliveries          int
			status              string
			published, acked    int64
		)
		if err := rows.Scan(&id, &dest, &key, &hdr, &bin, &body, &summary, &source, &k, &deliveries, &status, &published, &acked); err != nil {
			return broker.Page{}, fmt.Errorf("mysql: list: %w", err)
		}
		if len(page.Entries) == opts.Limit || (!opts.Summaries && len(page.Entries) > 0 && opts.MaxBytes > 0 && bytes+len(body) > opts.MaxBytes) {
			page.Next = strconv.FormatUint(last, 10)
			if sortColumn(opts.Sort) != "" {
				page.Next = strconv.FormatInt(lastKey, 10) + ":" + page.Next
			}
			break
		}
		last, lastKey = id, k
		e := broker.Entry{
			Record: &broker.Record{ID: strconv.FormatUint(id, 10), Destination: string(dest), Deliveries: deliveries},
			Status: broker.Status(status), PublishedAt: time.UnixMicro(published).UTC(),
		}
		if acked != 0 {
			e.ReplayedAt = time.UnixMicro(acked).UTC()
		}
		if opts.Summaries && summary != nil {
			var sum broker.Summary
			if err := json.Unmarshal(summary, &sum); err != nil {
				return broker.Page{}, fmt.Errorf("mysql: list: record %d: its summary column is not the JSON this package wrote: %w", id, err)
			}
			sum.Source = string(source)
			e.Summary = &sum
		} else {
			h, err := decodeHeaders(hdr, bin)
			if err != nil {
				return broker.Page{}, fmt.Errorf("mysql: list: record %d: %w", id, err)
			}
			if body == nil {
				body = []byte{}
			}
			m := &broker.Message{Key: key, Body: body, Headers: h, DeliveryAttempt: deliveries}
			if opts.Summaries {
				sum := broker.SummaryOf(&broker.Record{Message: m}, opts.Filter.SourcePointer)
				e.Summary = &sum
			} else {
				bytes += len(body)
				e.Record.Message = m
			}
		}
		page.Entries = append(page.Entries, e)
	}
	if err := rows.Err(); err != nil {
		return broker.Page{}, fmt.Errorf("mysql: list: %w", err)
	}
	return page, nil
}

// Destinations implements [broker.Lister]: the destinations that hold
// rows, replayed ones included.
func (d *driver) Destinations(ctx context.Context) ([]string, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT DISTINCT destination FROM `+d.table+` ORDER BY destination`)
	if err != nil {
		return nil, fmt.Errorf("mysql: destinations: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("mysql: destinations: %w", err)
		}
		out = append(out, string(b))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: destinations: %w", err)
	}
	return out, nil
}

// Stats implements [broker.Statser]: from the counts the triggers keep
// (see [driver.statsFromCounts]) when they can answer — no time bucket,
// a countable filter, sources at the default pointer — else with one
// GROUP BY over the triage columns (and the time bucket, in whole
// microseconds since the Unix epoch).
func (d *driver) Stats(ctx context.Context, opts broker.StatsOptions) ([]broker.Count, error) {
	if opts.Bucket <= 0 && countable(opts.Filter) && (!opts.BySource || defaultPointer(opts.Filter.SourcePointer)) {
		return d.statsFromCounts(ctx, opts)
	}
	w := d.where(opts.Filter)
	if w.none {
		return nil, nil
	}
	var c cond
	var args []any
	bucket := "NULL"
	var bucketUS int64
	if opts.Bucket > 0 {
		bucketUS = max(opts.Bucket.Microseconds(), 1)
		// Floor division, for times before 1970 too.
		bucket = "IF(dead_lettered_us >= 0, dead_lettered_us DIV ?, -((? - 1 - dead_lettered_us) DIV ?))"
		args = append(args, bucketUS, bucketUS, bucketUS)
	}
	if opts.Destination != "" {
		c.add("destination = ?", []byte(opts.Destination))
	}
	c.sql += w.sql
	c.args = append(c.args, w.args...)
	src := "''"
	if opts.BySource {
		expr, srcArgs := sourceExpr(opts.Filter.SourcePointer)
		src = "IF(is_envelope, " + expr + ", '')"
		args = append(args, srcArgs...)
	}
	q := `SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0),
		COALESCE(reason_kind, ''), ` + bucket + ` AS bucket, ` + src + `,
		SUM(acked_at IS NULL AND (lease_until IS NULL OR lease_until <= UTC_TIMESTAMP(6))),
		SUM(acked_at IS NULL AND lease_until IS NOT NULL AND lease_until > UTC_TIMESTAMP(6)),
		SUM(acked_at IS NOT NULL)
		FROM ` + d.table + ` WHERE TRUE` + c.sql + `
		GROUP BY 1, 2, 3, 4, 5, 6, 7 ORDER BY 1, 2, 3, 4, 5, 6, 7`
	rows, err := d.db.QueryContext(ctx, q, append(args, c.args...)...)
	if err != nil {
		return nil, fmt.Errorf("mysql: stats: %w", err)
	}
	defer rows.Close()
	var out []broker.Count
	for rows.Next() {
		var (
			dest, class, stage, kind []byte
			source                   []byte
			epsg                     int64
			b                        sql.NullInt64
			cnt                      broker.Count
		)
		if err := rows.Scan(&dest, &class, &stage, &epsg, &kind, &b, &source, &cnt.Pending, &cnt.Leased, &cnt.Replayed); err != nil {
			return nil, fmt.Errorf("mysql: stats: %w", err)
		}
		cnt.Destination, cnt.Class, cnt.Stage = string(dest), classify.Class(class), classify.Stage(stage)
		cnt.EPSG, cnt.ReasonKind, cnt.Source = int(epsg), classify.ReasonKind(kind), string(source)
		if b.Valid {
			cnt.Bucket = time.UnixMicro(b.Int64 * bucketUS).UTC()
		}
		out = append(out, cnt)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: stats: %w", err)
	}
	if opts.BySource && opts.SourceDepth > 0 {
		out = broker.MergeCounts(out, func(c *broker.Count) { c.Source = broker.SourceGroup(c.Source, opts.SourceDepth) })
	}
	return out, nil
}

// Purge implements [broker.Purger] in one REPEATABLE READ transaction:
// a SELECT … FOR UPDATE takes the matching rows that are replayed (or,
// with IncludePending, not under a live lease), they are deleted, and the
// offload URIs they referenced are looked up in the remaining rows with
// locking reads, whose next-key locks keep a concurrent writer from
// adding a reference until the transaction ends. A dry run is the same
// transaction, rolled back.
func (d *driver) Purge(ctx context.Context, req broker.PurgeRequest) (broker.PurgeResult, error) {
	if !req.DryRun {
		if err := d.writable("purge"); err != nil {
			return broker.PurgeResult{}, err
		}
	}
	w := d.where(req.Filter)
	if w.none {
		return broker.PurgeResult{}, nil
	}
	var c cond
	if req.Destination != "" {
		c.add("destination = ?", []byte(req.Destination))
	}
	if req.IncludePending {
		c.add("(acked_at IS NOT NULL OR lease_until IS NULL OR lease_until <= UTC_TIMESTAMP(6))")
	} else {
		c.add("acked_at IS NOT NULL")
	}
	c.sql += w.sql
	c.args = append(c.args, w.args...)
	var res broker.PurgeResult
	// A transaction InnoDB rolled back to resolve a conflict (a deadlock
	// with a writer's locks, a lock-wait timeout) is run again.
	err := txretry.Do(ctx, schema.Kind, func(ctx context.Context, _ txretry.Attempt) error {
		var err error
		res, err = d.purge(ctx, req, c)
		return err
	}, nil)
	if err != nil {
		return broker.PurgeResult{}, err
	}
	return res, nil
}

// purge is one attempt of [driver.Purge], in one transaction.
func (d *driver) purge(ctx context.Context, req broker.PurgeRequest, c cond) (broker.PurgeResult, error) {
	var res broker.PurgeResult
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return res, fmt.Errorf("mysql: purge: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, `SELECT id, destination, geometry_uri, raw_payload_uri FROM `+d.table+
		` WHERE TRUE`+c.sql+` ORDER BY id FOR UPDATE`, c.args...)
	if err != nil {
		return res, fmt.Errorf("mysql: purge: %w", err)
	}
	var ids []any
	uris := map[string]bool{}
	for rows.Next() {
		var id uint64
		var dest, gu, ru []byte
		if err := rows.Scan(&id, &dest, &gu, &ru); err != nil {
			rows.Close()
			return res, fmt.Errorf("mysql: purge: %w", err)
		}
		ids = append(ids, id)
		name := strconv.FormatUint(id, 10)
		if req.Destination == "" {
			name = string(dest) + "/" + name
		}
		res.IDs = append(res.IDs, name)
		for _, u := range [][]byte{gu, ru} {
			if len(u) > 0 {
				uris[string(u)] = true
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("mysql: purge: %w", err)
	}
	for chunk := range slices.Chunk(ids, 1000) {
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+d.table+` WHERE id IN (`+placeholders(len(chunk))+`)`, chunk...); err != nil {
			return res, fmt.Errorf("mysql: purge: %w", err)
		}
	}
	for u := range uris {
		res.BlobURIs = append(res.BlobURIs, u)
	}
	slices.Sort(res.BlobURIs)
	for _, u := range res.BlobURIs {
		used := false
		for _, col := range []string{"geometry_uri", "raw_payload_uri"} {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM `+d.table+` WHERE `+col+` = ? LIMIT 1 LOCK IN SHARE MODE`, []byte(u)).Scan(&one)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return res, fmt.Errorf("mysql: purge: reference check: %w", err)
			}
			if used = err == nil; used {
				break
			}
		}
		if !used {
			res.Orphaned = append(res.Orphaned, u)
		}
	}
	if req.DryRun {
		return res, nil // rolled back
	}
	if err := tx.Commit(); err != nil {
		return broker.PurgeResult{}, fmt.Errorf("mysql: purge: commit: %w", err)
	}
	d.wrote(ctx, len(ids))
	return res, nil
}
