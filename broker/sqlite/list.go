package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
)

// where renders f as SQL conditions (each starting with " AND") and their
// arguments. Every field is applied in SQL; a filter with a field other
// than IDs matches envelopes only, as [broker.Filter] says. The text and
// source fields need a file at [schemaVersion]: for an older one (read
// only) they are left out, and the portable store applies them.
func where(f broker.Filter, current bool) (string, []any) {
	return whereWith(f, current, indexed)
}

// plan is how [whereWith] renders a filter: which fields SQLite may read
// from an index (every matching row found there, then sorted) and which
// it checks row by row as it walks the listing's order (a page found
// after the first matches, when matches are many). A page's query is
// rendered by [drv.planFor]; counts, Stats and Purge use [indexed].
type plan struct {
	// text is how Filter.Text is rendered.
	text textMode
	// fields: Classes, ReasonKinds and EPSG compared as columns (indexes
	// led by them may be read: dlq_*_attempts for a listing by attempts);
	// else as +column, checked row by row.
	fields bool
	// time: Since and Until on the expression of dlq_sort_time too, so
	// that its range may be read.
	time bool
	// source: Sources at another pointer than the default compared as
	// the expression of its index (Options.SourcePointers); else as
	// +expression, checked row by row.
	source bool
}

// indexed lets SQLite read every index it may.
var indexed = plan{text: textIndexed, fields: true, time: true, source: true}

// textMode is how [whereWith] renders Filter.Text.
type textMode int

const (
	// textIndexed: the rows the trigram index finds (all of them, then
	// checked): for a text few records hold.
	textIndexed textMode = iota
	// textRows: each row's own search text checked as the listing walks
	// its order: for a common text (see [commonText]), of which a page is
	// found after a few rows, where reading every match from the index
	// would cost the whole count.
	textRows
	// textJoined: left out; the caller's query joins dlq_text.
	textJoined
)

// whereWith is [where] rendered as pl says.
func whereWith(f broker.Filter, current bool, pl plan) (string, []any) {
	mode := pl.text
	plus := "+"
	if pl.fields {
		plus = ""
	}
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
		in(plus+"failure_class", v)
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
		in(plus+"reason_kind", v)
	}
	if len(f.EPSG) > 0 {
		v := make([]any, len(f.EPSG))
		for i, e := range f.EPSG {
			v[i] = e
		}
		in(plus+"epsg", v)
	}
	if len(f.EventIDs) > 0 {
		v := make([]any, len(f.EventIDs))
		for i, e := range f.EventIDs {
			v[i] = e
		}
		in("event_id", v)
	}
	// Each time bound twice: on the column, and on the expression the
	// dlq_sort_time index holds, so that a range of it is read rather
	// than every record (the same rows: nanos is above the expression's
	// stand-in for no time).
	if !f.Since.IsZero() {
		b.WriteString(" AND dead_lettered_at >= ?")
		args = append(args, nanos(f.Since))
		if pl.time {
			b.WriteString(" AND " + sortExpr(broker.SortDeadLetteredAt) + " >= ?")
			args = append(args, nanos(f.Since))
		}
	}
	if !f.Until.IsZero() {
		b.WriteString(" AND dead_lettered_at < ?")
		args = append(args, nanos(f.Until))
		if pl.time {
			b.WriteString(" AND " + sortExpr(broker.SortDeadLetteredAt) + " < ?")
			args = append(args, nanos(f.Until))
		}
	}
	if f.BBox != nil {
		b.WriteString(" AND loc_x >= ? AND loc_x <= ? AND loc_y >= ? AND loc_y <= ?")
		args = append(args, f.BBox.Min[0], f.BBox.Max[0], f.BBox.Min[1], f.BBox.Max[1])
	}
	if !current {
		return b.String(), args
	}
	switch {
	case f.Text == "" || mode == textJoined:
	case mode == textRows:
		b.WriteString(` AND instr(search, ?) > 0`)
		args = append(args, broker.SearchFold(f.Text))
	default:
		// The trigram index (detail=none: which rows hold a trigram, not
		// where) narrows the rows to those holding every trigram of the
		// text; instr checks the exact substring in the index's own copy
		// of the text (narrow rows). Text shorter than a trigram is
		// searched in that copy row by row.
		text := broker.SearchFold(f.Text)
		if q := trigramQuery(text); q != "" {
			b.WriteString(` AND id IN (SELECT rowid FROM dlq_text WHERE dlq_text MATCH ? AND instr(search, ?) > 0)`)
			args = append(args, q, text)
		} else {
			b.WriteString(` AND id IN (SELECT rowid FROM dlq_text WHERE instr(search, ?) > 0)`)
			args = append(args, text)
		}
	}
	if len(f.Sources) > 0 {
		v := make([]any, len(f.Sources))
		for i, s := range f.Sources {
			v[i] = s
		}
		if pl.source || defaultPointer(f.SourcePointer) {
			in(sourceExpr(f.SourcePointer), v)
		} else {
			in("+"+sourceExpr(f.SourcePointer), v)
		}
	}
	if f.SourcePrefix != "" {
		b.WriteString(" AND substr(" + sourceExpr(f.SourcePointer) + ", 1, length(?)) = ?")
		args = append(args, f.SourcePrefix, f.SourcePrefix)
	}
	return b.String(), args
}

// pagePlan is the plan of a page's query (see [plan]), its FROM clause
// (base, or base reading dlq_sort_time) and a bound on its ids with its
// arguments: a filter's index is read when its matches are few (fewer
// than [commonMatches], found by counting that many in the index) or
// lead in the listing's order; else the listing's order is walked and
// each row checked, which finds a page of common matches after a few
// hundred rows. In the written order, many matches of a time range are
// walked from the first (or last) id in the range, read from the
// range of dlq_sort_time: records are mostly written in the order they
// were dead-lettered, so a recent range is at the end of the id order.
func (d *drv) pagePlan(ctx context.Context, opts broker.ListOptions, mode textMode, base string) (pl plan, from, bound string, boundArgs []any, err error) {
	f := opts.Filter
	pl = plan{text: mode, fields: opts.Sort == broker.SortAttempts, source: opts.Sort == broker.SortWritten}
	timed := !f.Since.IsZero() || !f.Until.IsZero()
	pl.time = timed && opts.Sort == broker.SortDeadLetteredAt
	var probes []string
	var args [][]any
	var rng string
	var rngArgs []any
	if timed && !pl.time {
		if !f.Since.IsZero() {
			rng += ` AND ` + sortExpr(broker.SortDeadLetteredAt) + ` >= ?`
			rngArgs = append(rngArgs, nanos(f.Since))
		}
		if !f.Until.IsZero() {
			rng += ` AND ` + sortExpr(broker.SortDeadLetteredAt) + ` < ?`
			rngArgs = append(rngArgs, nanos(f.Until))
		}
		probes, args = append(probes, `SELECT count(*) FROM (SELECT 1 FROM dlq_records WHERE 1`+rng+` LIMIT ?)`), append(args, append(slices.Clone(rngArgs), d.common))
	} else {
		probes, args = append(probes, ""), append(args, nil)
	}
	if len(f.Sources) > 0 && !defaultPointer(f.SourcePointer) && opts.Sort != broker.SortWritten {
		q := `SELECT count(*) FROM (SELECT 1 FROM dlq_records WHERE ` + sourceExpr(f.SourcePointer) + ` IN (` +
			strings.TrimSuffix(strings.Repeat("?,", len(f.Sources)), ",") + `) LIMIT ?)`
		var a []any
		for _, v := range f.Sources {
			a = append(a, v)
		}
		probes, args = append(probes, q), append(args, append(a, d.common))
	}
	// The records of the destination and of the filter's class, stage,
	// reason kind and EPSG, counted in dlq_counts.
	cf := broker.Filter{Classes: f.Classes, Stages: f.Stages, ReasonKinds: f.ReasonKinds, EPSG: f.EPSG}
	cq := `SELECT COALESCE(SUM(n), 0) FROM dlq_counts WHERE 1`
	var ca []any
	if opts.Destination != "" {
		cq += ` AND destination = ?`
		ca = append(ca, opts.Destination)
	}
	if !opts.IncludeReplayed {
		cq += ` AND acked = 0`
	}
	narrowed := opts.Destination != "" || !cf.IsZero()
	if narrowed {
		fc, fa := where(cf, true)
		cq += fc
		ca = append(ca, fa...)
	}
	var fieldsFew bool
	var few []bool
	var edge sql.NullInt64
	_, err = read(ctx, d, func(ctx context.Context, db *sql.DB) (struct{}, error) {
		few = few[:0]
		if narrowed {
			var n int
			if err := db.QueryRowContext(ctx, cq, ca...).Scan(&n); err != nil {
				return struct{}{}, err
			}
			fieldsFew = n < d.common
		}
		for i, q := range probes {
			if q == "" {
				few = append(few, false)
				continue
			}
			if i == 1 {
				// Without the index, counting would read every record.
				var n int
				if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = ?`, sourceIndex(f.SourcePointer)).Scan(&n); err != nil {
					return struct{}{}, err
				}
				if n == 0 {
					few = append(few, false)
					continue
				}
			}
			var n int
			if err := db.QueryRowContext(ctx, q, args[i]...).Scan(&n); err != nil {
				return struct{}{}, err
			}
			few = append(few, n < d.common)
		}
		if timed && !few[0] && opts.Sort == broker.SortWritten {
			edge.Valid = false
			agg := "min"
			if opts.Descending {
				agg = "max"
			}
			return struct{}{}, db.QueryRowContext(ctx, `SELECT `+agg+`(id) FROM dlq_records INDEXED BY dlq_sort_time WHERE 1`+rng, rngArgs...).Scan(&edge)
		}
		return struct{}{}, nil
	})
	if err != nil {
		return plan{}, "", "", nil, err
	}
	from = base
	if few[0] {
		// Few records in the time range: read them from the range of
		// dlq_sort_time and sort them (SQLite would walk the order).
		pl.time = true
		from = strings.Replace(base, ` FROM dlq_records WHERE`, ` FROM dlq_records INDEXED BY dlq_sort_time WHERE`, 1)
	} else if timed && opts.Sort == broker.SortWritten {
		switch {
		case !edge.Valid:
			bound = ` AND 0` // no record in the range
		case opts.Descending:
			bound, boundArgs = ` AND id <= ?`, []any{edge.Int64}
		default:
			bound, boundArgs = ` AND id >= ?`, []any{edge.Int64}
		}
	}
	if len(few) > 1 && few[1] {
		pl.source = true
	}
	switch {
	case fieldsFew:
		// Few records of the destination and fields: read from an index
		// led by them and sorted.
		pl.fields = true
	case opts.Sort != broker.SortWritten && opts.Destination != "":
		// Many: walk the order, checking the destination row by row
		// (dlq_pending, led by it, would have them all read and sorted).
		from = strings.Replace(from, ` AND destination = ?`, ` AND +destination = ?`, 1)
	}
	return pl, from, bound, boundArgs, nil
}

// commonMatches is how many records a filter's field (a text, by the
// trigram index; a time range; a source; a destination, class, reason
// kind or EPSG) must match for it to be common: a listing then walks its
// order and checks each row (see [drv.pagePlan], [textRows]) rather than
// reading every match from an index and sorting them.
const commonMatches = 5000

// commonText reports whether at least d.common ([commonMatches]) records
// hold every trigram of text (folded), read from the index's lists of
// rows only. A text shorter than a trigram is common: the index cannot
// find it.
func (d *drv) commonText(ctx context.Context, text string) (bool, error) {
	q := trigramQuery(text)
	if q == "" {
		return true, nil
	}
	return read(ctx, d, func(ctx context.Context, db *sql.DB) (bool, error) {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM dlq_text WHERE dlq_text MATCH ? LIMIT ?)`, q, d.common).Scan(&n)
		return n >= d.common, err
	})
}

// maxTrigrams bounds the trigrams of a text search's index query (spread
// over the text; instr checks the rest).
const maxTrigrams = 12

// trigramQuery is the FTS5 query for the rows holding every trigram of
// text (each a quoted string, all ANDed), or "" when text has fewer than
// three characters.
func trigramQuery(text string) string {
	runes := []rune(text)
	n := len(runes) - 2
	if n < 1 {
		return ""
	}
	step := max(1, (n+maxTrigrams-1)/maxTrigrams)
	seen := map[string]bool{}
	var parts []string
	for i := 0; i < n; i += step {
		t := string(runes[i : i+3])
		if !seen[t] {
			seen[t] = true
			parts = append(parts, `"`+strings.ReplaceAll(t, `"`, `""`)+`"`)
		}
	}
	if last := string(runes[n-1:]); !seen[last] {
		parts = append(parts, `"`+strings.ReplaceAll(last, `"`, `""`)+`"`)
	}
	return strings.Join(parts, " AND ")
}

// sourceExpr is the SQL of a record's source at pointer (see
// [broker.SourceValue]): the source column for the default pointer, else
// the text of attrs between "\n" + pointer + "\t" and the next "\n". The
// pointer is valid (broker.ValidSourcePointer: no control characters), so
// it is written as a string literal.
func sourceExpr(pointer string) string {
	if pointer == "" || pointer == broker.DefaultSourcePointer {
		return "COALESCE(source, '')"
	}
	n := "(char(10) || '" + strings.ReplaceAll(pointer, "'", "''") + "' || char(9))"
	at := "instr(attrs, " + n + ")"
	rest := "substr(attrs, " + at + " + length(" + n + "))"
	return "(CASE WHEN " + at + " > 0 THEN substr(" + rest + ", 1, instr(" + rest + ", char(10)) - 1) ELSE '' END)"
}

// sortExpr is the SQL of a sort key's value; rows that are not envelopes
// have 0 counts and no dead-letter time (below every time).
func sortExpr(k broker.SortKey) string {
	switch k {
	case broker.SortDeadLetteredAt:
		return "COALESCE(dead_lettered_at, -9223372036854775807)"
	case broker.SortVertexCount:
		return "vertex_count"
	case broker.SortGeometryBytes:
		return "geometry_bytes"
	case broker.SortAttempts:
		return "attempts"
	}
	return ""
}

// ListCapabilities implements [broker.ListCapabler]: a file at
// [schemaVersion] is sorted, counted, summarised, searched and grouped by
// source in SQL; an older one (read-only) lists the old way.
func (d *drv) ListCapabilities() broker.ListCapabilities {
	if !d.current() {
		return broker.ListCapabilities{}
	}
	return broker.ListCapabilities{Sorts: broker.SortKeys()[1:], Summaries: true, Total: true, MaxBytes: true, Stats: true}
}

// listCursor is a List cursor: the last record's id, preceded by its sort
// value and ":" in a sorted listing.
type listCursor struct {
	key int64
	id  int64
}

func parseListCursor(s string, sorted bool) (listCursor, error) {
	var c listCursor
	rest := s
	if sorted {
		k, r, ok := strings.Cut(s, ":")
		v, err := strconv.ParseInt(k, 10, 64)
		if !ok || err != nil {
			return c, fmt.Errorf("sqlite: list cursor %q: %w", s, broker.ErrInvalidArgument)
		}
		c.key, rest = v, r
	}
	v, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || v <= 0 {
		return c, fmt.Errorf("sqlite: list cursor %q: %w", s, broker.ErrInvalidArgument)
	}
	c.id = v
	return c, nil
}

// List implements [broker.Lister]: records in id (publish) order, or by
// opts.Sort then id, every filter field applied in SQL, the page ending at
// opts.Limit records or once their bodies hold opts.MaxBytes. Replayed
// records are kept until purged, so IncludeReplayed lists them too. With
// opts.Summaries no body is read: the summary, kept beside it, is (or,
// for a record an older geodlq wrote, its body is summarised here). The
// cursor is the last record id of the page, in decimal, preceded by its
// sort value and ":" in a sorted listing.
func (d *drv) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	current := d.current()
	if !current && (opts.Sort != broker.SortWritten || opts.Summaries || opts.Total) {
		return broker.Page{}, fmt.Errorf("sqlite: list: %s is at schema version 0, which lists in the written order only: %w", d.path, errors.ErrUnsupported)
	}
	key := sortExpr(opts.Sort)
	var after *listCursor
	if opts.After != "" {
		c, err := parseListCursor(opts.After, key != "")
		if err != nil {
			return broker.Page{}, err
		}
		after = &c
	}
	if opts.Limit <= 0 || opts.Limit > broker.MaxListLimit {
		opts.Limit = broker.DefaultListLimit // the portable store never asks for these
	}
	sel := `SELECT id, destination, deliveries, published_at, lease_until, acked_at`
	switch {
	case opts.Summaries:
		sel += `, summary, ` + sourceExpr(opts.Filter.SourcePointer) + `,
			CASE WHEN summary IS NULL THEN headers END, CASE WHEN summary IS NULL THEN body END`
	default:
		sel += `, msg_key, headers, body`
	}
	if key != "" {
		sel += `, ` + key
	}
	cond := ` FROM dlq_records WHERE 1`
	var args []any
	if opts.Destination != "" {
		cond += ` AND destination = ?`
		args = append(args, opts.Destination)
	}
	if !opts.IncludeReplayed {
		cond += ` AND acked_at IS NULL`
	}
	mode, fold := textIndexed, broker.SearchFold(opts.Filter.Text)
	if current && opts.Filter.Text != "" {
		common, err := d.commonText(ctx, fold)
		if err != nil {
			return broker.Page{}, fmt.Errorf("sqlite: list: %w", err)
		}
		if common {
			mode = textRows
		}
	}
	base, baseArgs := cond, slices.Clone(args)
	fcond, fargs := whereWith(opts.Filter, current, plan{text: mode, fields: true, time: true, source: true})
	cond += fcond
	args = append(args, fargs...)
	countQ, countArgs := `SELECT count(*)`+cond, slices.Clone(args)
	capped := opts.TotalCap > 0
	switch {
	case capped && mode == textRows && trigramQuery(fold) != "":
		// A common text: its matches found by the index, checked in the
		// index's copy of the text, joined to their rows for the rest of
		// the filter, until there are more than the cap.
		jcond, jargs := whereWith(opts.Filter, current, plan{text: textJoined, fields: true, time: true, source: true})
		countQ = `SELECT count(*) FROM (SELECT 1 FROM dlq_text JOIN dlq_records ON dlq_records.id = dlq_text.rowid
			WHERE dlq_text MATCH ? AND instr(dlq_text.search, ?) > 0` + strings.TrimPrefix(base, ` FROM dlq_records WHERE 1`) + jcond + ` LIMIT ?)`
		countArgs = append(append([]any{trigramQuery(fold), fold}, baseArgs...), jargs...)
		countArgs = append(countArgs, opts.TotalCap+1)
	case capped:
		countQ = `SELECT count(*) FROM (SELECT 1` + cond + ` LIMIT ?)`
		countArgs = append(countArgs, opts.TotalCap+1)
	default:
		capped = false
	}
	if countable(opts.Filter) {
		capped = false
		// dlq_counts answers for the counts' own fields.
		countQ = `SELECT COALESCE(SUM(n), 0) FROM dlq_counts WHERE 1`
		countArgs = nil
		if opts.Destination != "" {
			countQ += ` AND destination = ?`
			countArgs = append(countArgs, opts.Destination)
		}
		if !opts.IncludeReplayed {
			countQ += ` AND acked = 0`
		}
		countQ += fcond
		countArgs = append(countArgs, fargs...)
	}
	op, dir := ">", ""
	if opts.Descending {
		op, dir = "<", " DESC"
	}
	pl, from, bound, boundArgs := indexed, base, "", []any(nil)
	if current {
		var err error
		if pl, from, bound, boundArgs, err = d.pagePlan(ctx, opts, mode, base); err != nil {
			return broker.Page{}, fmt.Errorf("sqlite: list: %w", err)
		}
	}
	if len(opts.Filter.IDs) > 0 {
		// Records named by id are read by their rowids, in order. Led by
		// the destination's index (id IN (…) as bound parameters), SQLite
		// read every named record and sorted them, bodies and all, through
		// a temporary file, for each page: the console placing 40 records
		// of 20 MB one page at a time read 78 GB and wrote 16 GB.
		from = strings.Replace(from, ` AND destination = ?`, ` AND +destination = ?`, 1)
	}
	pcond, pargs := whereWith(opts.Filter, current, pl)
	q := sel + from + pcond + bound
	args = append(append(slices.Clone(baseArgs), pargs...), boundArgs...)
	if after != nil {
		if key != "" {
			q += ` AND (` + key + `, id) ` + op + ` (?, ?)`
			args = append(args, after.key, after.id)
		} else {
			q += ` AND id ` + op + ` ?`
			args = append(args, after.id)
		}
	}
	if key != "" {
		q += ` ORDER BY ` + key + dir + `, id` + dir
	} else {
		q += ` ORDER BY id` + dir
	}
	q += ` LIMIT ?`
	args = append(args, opts.Limit+1)
	now := nanos(d.now())
	page, err := read(ctx, d, func(ctx context.Context, db *sql.DB) (broker.Page, error) {
		var p broker.Page
		if opts.Total {
			if err := db.QueryRowContext(ctx, countQ, countArgs...).Scan(&p.Total); err != nil {
				return broker.Page{}, err
			}
			if capped && p.Total > opts.TotalCap {
				p.Total, p.TotalIsLowerBound = opts.TotalCap, true
			}
		}
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return broker.Page{}, err
		}
		defer rows.Close()
		var last listCursor
		bytes := 0
		for rows.Next() {
			var (
				id                int64
				dest              string
				deliveries        int
				published         int64
				leaseUntil, acked sql.NullInt64
				k                 int64
				e                 broker.Entry
			)
			dst := []any{&id, &dest, &deliveries, &published, &leaseUntil, &acked}
			var (
				msgKey, body     []byte
				headers, summary sql.NullString
				source           string
			)
			if opts.Summaries {
				dst = append(dst, &summary, &source, &headers, &body)
			} else {
				dst = append(dst, &msgKey, &headers, &body)
			}
			if key != "" {
				dst = append(dst, &k)
			}
			if err := rows.Scan(dst...); err != nil {
				return broker.Page{}, err
			}
			if len(p.Entries) == opts.Limit || (!opts.Summaries && len(p.Entries) > 0 && bytes+len(body) > opts.MaxBytes && opts.MaxBytes > 0) {
				p.Next = strconv.FormatInt(last.id, 10)
				if key != "" {
					p.Next = strconv.FormatInt(last.key, 10) + ":" + p.Next
				}
				break
			}
			last = listCursor{key: k, id: id}
			e.Record = &broker.Record{ID: strconv.FormatInt(id, 10), Destination: dest, Deliveries: deliveries}
			e.Status, e.PublishedAt = broker.StatusPending, time.Unix(0, published).UTC()
			switch {
			case acked.Valid:
				e.Status, e.ReplayedAt = broker.StatusReplayed, time.Unix(0, acked.Int64).UTC()
			case leaseUntil.Valid && leaseUntil.Int64 > now:
				e.Status = broker.StatusLeased
			}
			if opts.Summaries {
				sum, err := d.summary(ctx, id, summary, source, headers, body, opts.Filter.SourcePointer)
				if err != nil {
					return broker.Page{}, err
				}
				e.Summary = sum
			} else {
				bytes += len(body)
				e.Record.Message = &broker.Message{Key: msgKey, Body: body, Headers: d.headers(ctx, id, headers.String)}
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

// summary decodes a summary column; a row without one (an older geodlq
// wrote it after the migration) is summarised from its body.
func (d *drv) summary(ctx context.Context, id int64, col sql.NullString, source string, headers sql.NullString, body []byte, pointer string) (*broker.Summary, error) {
	var s broker.Summary
	if col.Valid {
		if err := json.Unmarshal([]byte(col.String), &s); err != nil {
			return nil, fmt.Errorf("record %d: its summary column is not the JSON this package wrote: %w", id, err)
		}
		s.Source = source
		return &s, nil
	}
	s = broker.SummaryOf(&broker.Record{Message: &broker.Message{Body: body, Headers: d.headers(ctx, id, headers.String)}}, pointer)
	return &s, nil
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

// defaultPointer reports whether pointer is the default source pointer,
// whose value the source column holds.
func defaultPointer(pointer string) bool {
	return pointer == "" || pointer == broker.DefaultSourcePointer
}

// countable reports whether dlq_counts can answer for f: its fields are
// the counts' own (class, stage, reason kind, EPSG, the default source).
func countable(f broker.Filter) bool {
	g := f
	g.Classes, g.Stages, g.ReasonKinds, g.EPSG = nil, nil, nil, nil
	if defaultPointer(f.SourcePointer) {
		g.Sources, g.SourcePrefix = nil, ""
	}
	return g.IsZero()
}

// keptCounts reads counts kept by triggers and the records under a live
// lease, and moves those from pending to leased: q gives each group's
// fields (destination, class, stage, EPSG, reason kind, then its source or,
// bucketed, its time bucket, NULL for none) and its pending and replayed
// records; lq (its arguments largs), the records under a live lease by
// the same fields (dlq_leases: few rows). What lq counts in a group q does
// not hold (written since) is left out.
func (d *drv) keptCounts(ctx context.Context, q string, qargs []any, lq string, largs []any, bucketed bool) ([]broker.Count, error) {
	type key struct {
		dest, class, stage string
		epsg               int
		kind, source       string
		bucket             sql.NullInt64
	}
	sixth := func(k *key) any {
		if bucketed {
			return &k.bucket
		}
		return &k.source
	}
	return read(ctx, d, func(ctx context.Context, db *sql.DB) ([]broker.Count, error) {
		idx := map[key]int{}
		var out []broker.Count
		rows, err := db.QueryContext(ctx, q, qargs...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var k key
			var c broker.Count
			if err := rows.Scan(&k.dest, &k.class, &k.stage, &k.epsg, &k.kind, sixth(&k), &c.Pending, &c.Replayed); err != nil {
				return nil, err
			}
			c.Destination, c.Class, c.Stage, c.EPSG = k.dest, classify.Class(k.class), classify.Stage(k.stage), k.epsg
			c.ReasonKind, c.Source = classify.ReasonKind(k.kind), k.source
			if k.bucket.Valid {
				c.Bucket = time.Unix(0, k.bucket.Int64).UTC()
			}
			idx[k] = len(out)
			out = append(out, c)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		rows.Close()
		lrows, err := db.QueryContext(ctx, lq, largs...)
		if err != nil {
			return nil, err
		}
		defer lrows.Close()
		for lrows.Next() {
			var k key
			var n int
			if err := lrows.Scan(&k.dest, &k.class, &k.stage, &k.epsg, &k.kind, sixth(&k), &n); err != nil {
				return nil, err
			}
			if i, ok := idx[k]; ok {
				n = min(n, out[i].Pending)
				out[i].Pending -= n
				out[i].Leased += n
			}
		}
		return out, lrows.Err()
	})
}

// countsWhere is the condition, and its arguments, on the kept counts'
// fields (and on the records' under a lease) that select opts's
// destination and filter.
func countsWhere(opts broker.StatsOptions) (string, []any) {
	cond := ""
	var args []any
	if opts.Destination != "" {
		cond += ` AND destination = ?`
		args = append(args, opts.Destination)
	}
	fcond, fargs := where(opts.Filter, true)
	return cond + fcond, append(args, fargs...)
}

// statsFromCounts is Stats from dlq_counts (a few thousand rows rather than
// every record): open and replayed records by their fields, with the
// records under a live lease (found by dlq_leases) moved from pending to
// leased.
func (d *drv) statsFromCounts(ctx context.Context, opts broker.StatsOptions) ([]broker.Count, error) {
	src := "''"
	if opts.BySource {
		src = "source"
	}
	cond, args := countsWhere(opts)
	q := `SELECT destination, failure_class, failed_stage, epsg, reason_kind, ` + src + `,
		SUM(CASE WHEN acked = 0 THEN n ELSE 0 END), SUM(CASE WHEN acked = 1 THEN n ELSE 0 END)
		FROM dlq_counts WHERE n > 0` + cond + ` GROUP BY 1, 2, 3, 4, 5, 6`
	lq := `SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0),
		COALESCE(reason_kind, ''), CASE WHEN is_envelope THEN COALESCE(` + src + `, '') ELSE '' END, count(*)
		FROM dlq_records INDEXED BY dlq_leases WHERE acked_at IS NULL AND lease_until IS NOT NULL AND lease_until > ?` + cond + `
		GROUP BY 1, 2, 3, 4, 5, 6`
	counts, err := d.keptCounts(ctx, q, args, lq, append([]any{nanos(d.now())}, args...), false)
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	counts = slices.DeleteFunc(counts, func(c broker.Count) bool { return c.Total() == 0 })
	if opts.BySource && opts.SourceDepth > 0 {
		return broker.MergeCounts(counts, func(c *broker.Count) { c.Source = broker.SourceGroup(c.Source, opts.SourceDepth) }), nil
	}
	slices.SortFunc(counts, broker.CompareCounts)
	return counts, nil
}

// Stats implements [broker.Statser] with one GROUP BY over the indexed
// columns: counts by destination, class, stage, EPSG, reason kind and,
// with opts.Bucket, dead-letter time, each split into pending, leased and
// replayed, in that order of fields.
func (d *drv) Stats(ctx context.Context, opts broker.StatsOptions) ([]broker.Count, error) {
	if d.current() && opts.Bucket <= 0 && countable(opts.Filter) && (!opts.BySource || defaultPointer(opts.Filter.SourcePointer)) {
		return d.statsFromCounts(ctx, opts)
	}
	if d.hourly() && hours(opts) {
		return d.statsFromHours(ctx, opts)
	}
	return d.scanStats(ctx, opts)
}

// hours reports whether dlq_hour_counts answers opts: a bucket of whole
// hours, no grouping by source and a filter on the fields it keeps.
func hours(opts broker.StatsOptions) bool {
	return opts.Bucket > 0 && opts.Bucket%time.Hour == 0 && opts.Bucket.Nanoseconds() <= math.MaxInt64/2 &&
		!opts.BySource && countable(opts.Filter) && len(opts.Filter.Sources) == 0 && opts.Filter.SourcePrefix == ""
}

// statsFromHours is Stats by time from dlq_hour_counts, as statsFromCounts
// is without it: each hour floored to the bucket (a whole number of hours,
// so that the floor of the hour is the floor of the time), the records
// under a live lease, found by dlq_leases, moved from pending to leased.
func (d *drv) statsFromHours(ctx context.Context, opts broker.StatsOptions) ([]broker.Count, error) {
	b := opts.Bucket.Nanoseconds()
	cond, args := countsWhere(opts)
	q := `SELECT destination, failure_class, failed_stage, epsg, reason_kind,
		CASE WHEN hour = ` + strconv.Itoa(noHour) + ` THEN NULL ELSE hour - ((hour % ?) + ?) % ? END,
		SUM(CASE WHEN acked = 0 THEN n ELSE 0 END), SUM(CASE WHEN acked = 1 THEN n ELSE 0 END)
		FROM dlq_hour_counts WHERE n > 0` + cond + ` GROUP BY 1, 2, 3, 4, 5, 6`
	lq := `SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0),
		COALESCE(reason_kind, ''), dead_lettered_at - ((dead_lettered_at % ?) + ?) % ?, count(*)
		FROM dlq_records INDEXED BY dlq_leases WHERE acked_at IS NULL AND lease_until IS NOT NULL AND lease_until > ?` + cond + `
		GROUP BY 1, 2, 3, 4, 5, 6`
	counts, err := d.keptCounts(ctx, q, append([]any{b, b, b}, args...), lq, append([]any{b, b, b, nanos(d.now())}, args...), true)
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	counts = slices.DeleteFunc(counts, func(c broker.Count) bool { return c.Total() == 0 })
	slices.SortFunc(counts, broker.CompareCounts)
	return counts, nil
}

// scanStats is Stats by one GROUP BY over the records (dlq_stats holds
// every column it reads).
func (d *drv) scanStats(ctx context.Context, opts broker.StatsOptions) ([]broker.Count, error) {
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
	current := d.current()
	src := "''"
	if opts.BySource && current {
		src = "CASE WHEN is_envelope THEN " + sourceExpr(opts.Filter.SourcePointer) + " ELSE '' END"
	}
	q := `SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0),
		COALESCE(reason_kind, ''), ` + bucket + `, ` + src + `,
		SUM(acked_at IS NULL AND (lease_until IS NULL OR lease_until <= ?)),
		SUM(acked_at IS NULL AND COALESCE(lease_until, 0) > ?),
		SUM(acked_at IS NOT NULL)
		FROM dlq_records WHERE 1`
	if opts.Destination != "" {
		q += ` AND destination = ?`
		args = append(args, opts.Destination)
	}
	cond, fargs := where(opts.Filter, current)
	q += cond + ` GROUP BY 1, 2, 3, 4, 5, 6, 7 ORDER BY 1, 2, 3, 4, 5, 6, 7`
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
			if err := rows.Scan(&c.Destination, &class, &stage, &c.EPSG, &kind, &at, &c.Source, &c.Pending, &c.Leased, &c.Replayed); err != nil {
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
	if opts.BySource && opts.SourceDepth > 0 {
		counts = broker.MergeCounts(counts, func(c *broker.Count) { c.Source = broker.SourceGroup(c.Source, opts.SourceDepth) })
	}
	return counts, nil
}
