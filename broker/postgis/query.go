package postgis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
)

// sqlArgs collects positional parameters.
type sqlArgs struct{ list []any }

// add appends v and returns its placeholder.
func (a *sqlArgs) add(v any) string {
	a.list = append(a.list, v)
	return "$" + strconv.Itoa(len(a.list))
}

// where renders f as SQL conditions, each starting with " AND", matching
// exactly what broker.Filter.MatchRecord accepts. Every field but IDs is
// a property of the envelope, so rows that are not envelopes match only a
// filter without them. The text and source fields need the summary
// columns (current): without them they are left to the portable store.
func where(f broker.Filter, a *sqlArgs, current bool) string {
	if f.IsZero() {
		return ""
	}
	var b strings.Builder
	if len(f.IDs) > 0 {
		ids := make([]int64, 0, len(f.IDs))
		for _, s := range f.IDs {
			// Record ids are the decimal row ids; anything else names no
			// record of this store.
			if id, err := strconv.ParseInt(s, 10, 64); err == nil && strconv.FormatInt(id, 10) == s {
				ids = append(ids, id)
			}
		}
		b.WriteString(" AND id = ANY(" + a.add(ids) + "::bigint[])")
	}
	env := f
	env.IDs = nil
	if env.IsZero() {
		return b.String()
	}
	b.WriteString(" AND is_envelope")
	if len(f.Classes) > 0 {
		b.WriteString(" AND failure_class = ANY(" + a.add(texts(f.Classes)) + "::text[])")
	}
	if len(f.Stages) > 0 {
		b.WriteString(" AND failed_stage = ANY(" + a.add(texts(f.Stages)) + "::text[])")
	}
	if len(f.ReasonKinds) > 0 {
		b.WriteString(" AND reason_kind = ANY(" + a.add(texts(f.ReasonKinds)) + "::text[])")
	}
	if len(f.EPSG) > 0 {
		v := make([]int64, len(f.EPSG))
		for i, e := range f.EPSG {
			v[i] = int64(e)
		}
		b.WriteString(" AND epsg = ANY(" + a.add(v) + "::bigint[])")
	}
	if len(f.EventIDs) > 0 {
		v := make([]string, len(f.EventIDs))
		for i, e := range f.EventIDs {
			v[i] = keyText(e)
		}
		b.WriteString(" AND event_id = ANY(" + a.add(v) + "::text[])")
	}
	// dead_lettered_at holds microseconds; dead_lettered_ns the rest, so
	// the row comparison is exact to the nanosecond.
	if !f.Since.IsZero() {
		b.WriteString(" AND (dead_lettered_at, dead_lettered_ns) >= (" + a.add(f.Since) + "::timestamptz, " +
			a.add(int16(f.Since.Nanosecond()%1000)) + "::smallint)")
	}
	if !f.Until.IsZero() {
		b.WriteString(" AND (dead_lettered_at, dead_lettered_ns) < (" + a.add(f.Until) + "::timestamptz, " +
			a.add(int16(f.Until.Nanosecond()%1000)) + "::smallint)")
	}
	if f.BBox != nil {
		b.WriteString(" AND " + bboxCond(*f.BBox, a))
	}
	if !current {
		return b.String()
	}
	if f.Text != "" {
		// LIKE is served by the trigram index on search, when pg_trgm is
		// installed; the text is folded as search was.
		b.WriteString(` AND search LIKE '%' || ` + a.add(likeEscape(broker.SearchFold(f.Text))) + `::text || '%'`)
	}
	if len(f.Sources) > 0 {
		b.WriteString(" AND " + sourceExpr(f.SourcePointer, a) + " = ANY(" + a.add(texts(f.Sources)) + "::text[])")
	}
	if f.SourcePrefix != "" {
		b.WriteString(" AND starts_with(" + sourceExpr(f.SourcePointer, a) + ", " + a.add(lossyText(f.SourcePrefix)) + "::text)")
	}
	return b.String()
}

// likeEscape escapes LIKE's wildcards (and its escape character) in s.
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// sourceExpr is the SQL of a record's source at pointer (see
// [broker.SourceValue]): the source column for the default pointer, else
// the text of attrs between "\n" + pointer + "\t" and the next "\n".
func sourceExpr(pointer string, a *sqlArgs) string {
	if pointer == "" || pointer == broker.DefaultSourcePointer {
		return "COALESCE(source, '')"
	}
	return "split_part(split_part(COALESCE(attrs, ''), " + a.add("\n"+pointer+"\t") + "::text, 2), E'\\n', 1)"
}

// sortExpr is the column a sort key orders by.
func sortExpr(k broker.SortKey) string {
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

// ListCapabilities implements [broker.ListCapabler]: a table at schema
// version 3 is sorted, counted, summarised, searched and grouped by source
// in SQL; an older one lists the old way.
func (d *driver) ListCapabilities() broker.ListCapabilities {
	if !d.current(context.Background()) {
		return broker.ListCapabilities{}
	}
	return broker.ListCapabilities{Sorts: broker.SortKeys()[1:], Summaries: true, Total: true, MaxBytes: true, Stats: true}
}

// texts converts string-backed values (classes, stages, reason kinds) for
// a text[] parameter.
func texts[S ~string](vs []S) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = lossyText(string(v))
	}
	return out
}

// bboxCond selects rows whose geometry error location lies in bb, edges
// included, comparing raw coordinates whatever the SRID — exactly
// orb.Bound.Contains, as broker.Filter.Match uses it.
//
// A finite bound is first an && against ST_MakeEnvelope, which the GiST
// index on ST_SetSRID(location, 0) serves and which never misses a point
// (index boxes are rounded outwards); then the coordinates are compared
// exactly. ST_Intersects is not used here: its side-of-edge test multiplies
// coordinate differences, which underflow for tiny boxes and overflow for
// huge ones, and it then counts points just outside as on the boundary
// (the tests found both). A NaN bound value never excludes anything, as in
// Go (broker.Filter.Validate refuses such bounds before they get here; the
// store's own tests reach this with them).
func bboxCond(bb orb.Bound, a *sqlArgs) string {
	minX, minY, maxX, maxY := bb.Min[0], bb.Min[1], bb.Max[0], bb.Max[1]
	var conds []string
	if finite(minX) && finite(minY) && finite(maxX) && finite(maxY) {
		conds = append(conds, "ST_SetSRID(location, 0) && ST_MakeEnvelope("+a.add(minX)+"::float8, "+a.add(minY)+
			"::float8, "+a.add(maxX)+"::float8, "+a.add(maxY)+"::float8, 0)")
	} else {
		conds = append(conds, "location IS NOT NULL")
	}
	cmp := func(expr string, op string, v float64) {
		if math.IsNaN(v) {
			return
		}
		conds = append(conds, expr+" "+op+" "+a.add(v)+"::float8")
	}
	cmp("ST_X(location)", ">=", minX)
	cmp("ST_X(location)", "<=", maxX)
	cmp("ST_Y(location)", ">=", minY)
	cmp("ST_Y(location)", "<=", maxY)
	return "(" + strings.Join(conds, " AND ") + ")"
}

// statusSQL is a row's status as broker.Status reports it: a leased row
// whose lease ran out is pending.
const statusSQL = `CASE WHEN status = 'leased' AND lease_until <= now() THEN 'pending' ELSE status END`

// intersects is the geometry selection of [ListIntersecting].
type intersects struct {
	bound orb.Bound
	srid  int32
}

type intersectsKey struct{}

// ListIntersecting is [broker.Store.List] restricted to the records whose
// stored geometry — the geom column, not the geometry error's location,
// which Filter.BBox selects — intersects bound, by PostGIS's
// ST_Intersects, among the geometries in SRID srid (0 means 4326). The
// table mixes SRIDs; records in another SRID, and records without a
// parsed geometry (offloaded, missing, unparseable), do not match. Every
// ListOptions field, paging included, works as for List, and the GiST
// index on geom serves the bound. s must be a PostGIS store; for any other
// store the error wraps [errors.ErrUnsupported]. A bound that is not
// finite, or whose min exceeds its max, or an srid outside 0..998999, is
// refused with an error wrapping [broker.ErrInvalidArgument].
func ListIntersecting(ctx context.Context, s *broker.Store, opts broker.ListOptions, bound orb.Bound, srid int) (broker.Page, error) {
	if driverOf(s) == nil {
		return broker.Page{}, fmt.Errorf("postgis: ListIntersecting on a store that is not a PostGIS store: %w", errors.ErrUnsupported)
	}
	if err := (broker.Filter{BBox: &bound}).Validate(); err != nil {
		return broker.Page{}, fmt.Errorf("postgis: ListIntersecting: %w", err)
	}
	if srid < 0 || srid > maxSRID {
		return broker.Page{}, fmt.Errorf("postgis: ListIntersecting: SRID %d out of range 0..%d: %w", srid, maxSRID, broker.ErrInvalidArgument)
	}
	if srid == 0 {
		srid = 4326
	}
	// The selection travels to the driver through the portable store's
	// List, which keeps its closed-state check, argument checks, filter
	// and span.
	return s.List(context.WithValue(ctx, intersectsKey{}, &intersects{bound: bound, srid: int32(srid)}), opts)
}

// List implements [broker.Lister]: rows in id order (ids increase with
// every write, across destinations), or by opts.Sort then id, descending
// with opts.Descending, every filter field in SQL; a page ends at
// opts.Limit rows or once its bodies hold opts.MaxBytes. With
// opts.Summaries no body is read (a row written by an older geodlq,
// without a summary, is summarised from its body). The cursor is the
// decimal id of the page's last row, preceded by its sort value and ":"
// in a sorted listing.
func (d *driver) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	current := d.current(ctx)
	if !current && (opts.Sort != broker.SortWritten || opts.Summaries || opts.Total) {
		return broker.Page{}, fmt.Errorf("postgis: list: %s is older than schema version %d and lists in the written order only: %w", d.table, summaryVersion, errors.ErrUnsupported)
	}
	key := sortExpr(opts.Sort)
	var afterKey, afterID int64
	if opts.After != "" {
		rest := opts.After
		var err error
		if key != "" {
			k, r, ok := strings.Cut(rest, ":")
			afterKey, err = strconv.ParseInt(k, 10, 64)
			if !ok || err != nil {
				return broker.Page{}, fmt.Errorf("postgis: list cursor %q: %w", opts.After, broker.ErrInvalidArgument)
			}
			rest = r
		}
		if afterID, err = strconv.ParseInt(rest, 10, 64); err != nil {
			return broker.Page{}, fmt.Errorf("postgis: list cursor %q: %w", opts.After, broker.ErrInvalidArgument)
		}
	}
	a := &sqlArgs{}
	cond := ` FROM ` + d.table + ` WHERE true`
	if opts.Destination != "" {
		cond += ` AND destination = ` + a.add(opts.Destination) + `::text`
	}
	if !opts.IncludeReplayed {
		cond += ` AND replayed_at IS NULL`
	}
	cond += where(opts.Filter, a, current)
	if in, ok := ctx.Value(intersectsKey{}).(*intersects); ok {
		bb := in.bound
		p := a.add(in.srid)
		box := "ST_MakeEnvelope(" + a.add(bb.Min[0]) + "::float8, " + a.add(bb.Min[1]) + "::float8, " +
			a.add(bb.Max[0]) + "::float8, " + a.add(bb.Max[1]) + "::float8, " + p + "::integer)"
		// && uses the GiST index and tolerates mixed SRIDs; ST_Intersects
		// raises on them, so it runs only on rows of the bound's SRID (a
		// CASE, because AND does not fix the order of evaluation).
		cond += ` AND geom && ` + box + ` AND CASE WHEN ST_SRID(geom) = ` + p + `::integer THEN ST_Intersects(geom, ` + box + `) ELSE false END`
	}
	countQ, countArgs := `SELECT count(*)`+cond, slices.Clone(a.list)
	sel := `SELECT id, destination, ` + statusSQL + `, published_at, replayed_at, deliveries`
	if opts.Summaries {
		sel += `, summary, ` + sourceExpr(opts.Filter.SourcePointer, a) + `, CASE WHEN summary IS NULL THEN headers END,
			CASE WHEN summary IS NULL THEN binary_headers END, CASE WHEN summary IS NULL THEN body END, NULL::bytea`
	} else {
		sel += `, NULL::text, '', headers, binary_headers, body, msg_key`
	}
	if key != "" {
		sel += `, ` + key
	} else {
		sel += `, 0::bigint`
	}
	q := sel + cond
	op, dir := ">", ""
	if opts.Descending {
		op, dir = "<", " DESC"
	}
	if opts.After != "" {
		if key != "" {
			q += ` AND (` + key + `, id) ` + op + ` (` + a.add(afterKey) + `::bigint, ` + a.add(afterID) + `::bigint)`
		} else {
			q += ` AND id ` + op + ` ` + a.add(afterID) + `::bigint`
		}
	}
	if key != "" {
		q += ` ORDER BY ` + key + dir + `, id` + dir
	} else {
		q += ` ORDER BY id` + dir
	}
	q += ` LIMIT ` + a.add(opts.Limit+1) + `::bigint`
	var page broker.Page
	_, within := ctx.Value(intersectsKey{}).(*intersects)
	switch {
	case opts.Total && !within && countable(opts.Filter) && d.counted(ctx):
		n, err := d.total(ctx, opts)
		if err != nil {
			return broker.Page{}, err
		}
		page.Total = n
	case opts.Total && opts.TotalCap > 0:
		// Count no further than one past the cap.
		countArgs = append(countArgs, opts.TotalCap+1)
		q := `SELECT count(*) FROM (SELECT 1` + strings.TrimPrefix(countQ, `SELECT count(*)`) + ` LIMIT $` + strconv.Itoa(len(countArgs)) + `::bigint) capped`
		if err := d.pool.QueryRow(ctx, q, countArgs...).Scan(&page.Total); err != nil {
			return broker.Page{}, fmt.Errorf("postgis: list: counting: %w", err)
		}
		if page.Total > opts.TotalCap {
			page.Total, page.TotalIsLowerBound = opts.TotalCap, true
		}
	case opts.Total:
		if err := d.pool.QueryRow(ctx, countQ, countArgs...).Scan(&page.Total); err != nil {
			return broker.Page{}, fmt.Errorf("postgis: list: counting: %w", err)
		}
	}
	rows, err := d.pool.Query(ctx, q, a.list...)
	if err != nil {
		return broker.Page{}, fmt.Errorf("postgis: list: %w", err)
	}
	defer rows.Close()
	var lastKey, lastID int64
	bytes := 0
	for rows.Next() {
		var (
			id, k             int64
			dest, status      string
			key, binary, body []byte
			headers           map[string]string
			published         time.Time
			replayed          *time.Time
			deliveries        int
			summary           *string
			source            string
		)
		if err := rows.Scan(&id, &dest, &status, &published, &replayed, &deliveries, &summary, &source, &headers, &binary, &body, &key, &k); err != nil {
			return broker.Page{}, fmt.Errorf("postgis: list: %w", err)
		}
		if len(page.Entries) == opts.Limit || (!opts.Summaries && len(page.Entries) > 0 && opts.MaxBytes > 0 && bytes+len(body) > opts.MaxBytes) {
			page.Next = strconv.FormatInt(lastID, 10)
			if sortExpr(opts.Sort) != "" {
				page.Next = strconv.FormatInt(lastKey, 10) + ":" + page.Next
			}
			break
		}
		lastKey, lastID = k, id
		e := broker.Entry{
			Record:      &broker.Record{ID: strconv.FormatInt(id, 10), Destination: dest, Deliveries: deliveries},
			Status:      broker.Status(status),
			PublishedAt: published.UTC(),
		}
		if replayed != nil {
			e.ReplayedAt = replayed.UTC()
		}
		if opts.Summaries && summary != nil {
			var sum broker.Summary
			if err := json.Unmarshal([]byte(*summary), &sum); err != nil {
				return broker.Page{}, fmt.Errorf("postgis: record %d: its summary column is not the JSON this package wrote: %w", id, err)
			}
			sum.Source = source
			e.Summary = &sum
		} else {
			h, err := decodeHeaders(headers, binary)
			if err != nil {
				return broker.Page{}, fmt.Errorf("postgis: record %d: %w", id, err)
			}
			m := &broker.Message{Key: key, Body: body, Headers: h}
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
		return broker.Page{}, fmt.Errorf("postgis: list: %w", err)
	}
	return page, nil
}

// Destinations implements [broker.Lister]: every destination that holds a
// row, replayed or not, found by skipping through the two partial indexes
// on (destination, …) rather than by reading the table.
func (d *driver) Destinations(ctx context.Context) ([]string, error) {
	q := `WITH RECURSIVE
	live(dest) AS (
		SELECT min(destination) FROM {t} WHERE replayed_at IS NULL
		UNION ALL
		SELECT (SELECT min(destination) FROM {t} WHERE replayed_at IS NULL AND destination > live.dest)
		FROM live WHERE live.dest IS NOT NULL),
	done(dest) AS (
		SELECT min(destination) FROM {t} WHERE replayed_at IS NOT NULL
		UNION ALL
		SELECT (SELECT min(destination) FROM {t} WHERE replayed_at IS NOT NULL AND destination > done.dest)
		FROM done WHERE done.dest IS NOT NULL)
SELECT dest FROM live WHERE dest IS NOT NULL
UNION
SELECT dest FROM done WHERE dest IS NOT NULL
ORDER BY 1`
	rows, err := d.pool.Query(ctx, d.render(q))
	if err != nil {
		return nil, fmt.Errorf("postgis: destinations: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("postgis: destinations: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgis: destinations: %w", err)
	}
	return out, nil
}

// bucketOrigin aligns [broker.StatsOptions.Bucket]: multiples of the
// bucket since the Unix epoch.
const bucketOrigin = `timestamptz '1970-01-01 00:00:00+00'`

// Stats implements [broker.Statser] with one GROUP BY: records by
// destination, class, stage, EPSG, reason kind and, with opts.Bucket, by
// dead-letter time in buckets of that width (date_bin, from the Unix
// epoch, to the microsecond), counted by status. Rows that are not
// envelopes count with empty fields when the filter allows them.
func (d *driver) Stats(ctx context.Context, opts broker.StatsOptions) ([]broker.Count, error) {
	if opts.Bucket <= 0 && countable(opts.Filter) && (!opts.BySource || defaultPointer(opts.Filter.SourcePointer)) && d.counted(ctx) {
		return d.statsFromCounts(ctx, opts)
	}
	a := &sqlArgs{}
	bucket := "NULL::timestamptz"
	if opts.Bucket > 0 {
		bucket = "date_bin(" + a.add(max(opts.Bucket.Microseconds(), 1)) + "::bigint * interval '1 microsecond', dead_lettered_at, " + bucketOrigin + ")"
	}
	current := d.current(ctx)
	src := "''"
	if opts.BySource && current {
		src = "CASE WHEN is_envelope THEN " + sourceExpr(opts.Filter.SourcePointer, a) + " ELSE '' END"
	}
	q := `SELECT destination, COALESCE(failure_class, ''), COALESCE(failed_stage, ''), COALESCE(epsg, 0), COALESCE(reason_kind, ''), ` + bucket + `, ` + src + `,
		count(*) FILTER (WHERE status = 'pending' OR (status = 'leased' AND lease_until <= now())),
		count(*) FILTER (WHERE status = 'leased' AND lease_until > now()),
		count(*) FILTER (WHERE status = 'replayed')
		FROM ` + d.table + ` WHERE true`
	if opts.Destination != "" {
		q += ` AND destination = ` + a.add(opts.Destination) + `::text`
	}
	q += where(opts.Filter, a, current) + ` GROUP BY 1, 2, 3, 4, 5, 6, 7 ORDER BY 1, 2, 3, 4, 5, 6, 7`
	rows, err := d.pool.Query(ctx, q, a.list...)
	if err != nil {
		return nil, fmt.Errorf("postgis: stats: %w", err)
	}
	defer rows.Close()
	var out []broker.Count
	for rows.Next() {
		var (
			c                   broker.Count
			class, stage, kind  string
			epsg                int64
			b                   *time.Time
			pending, leased, rp int64
		)
		if err := rows.Scan(&c.Destination, &class, &stage, &epsg, &kind, &b, &c.Source, &pending, &leased, &rp); err != nil {
			return nil, fmt.Errorf("postgis: stats: %w", err)
		}
		c.Class, c.Stage, c.ReasonKind = classify.Class(class), classify.Stage(stage), classify.ReasonKind(kind)
		c.EPSG = int(epsg)
		c.Pending, c.Leased, c.Replayed = int(pending), int(leased), int(rp)
		if b != nil {
			c.Bucket = b.UTC()
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgis: stats: %w", err)
	}
	if opts.BySource && opts.SourceDepth > 0 {
		out = broker.MergeCounts(out, func(c *broker.Count) { c.Source = broker.SourceGroup(c.Source, opts.SourceDepth) })
	}
	return out, nil
}
