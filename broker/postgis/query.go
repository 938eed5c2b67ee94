package postgis

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/broker"
)

// sqlArgs collects positional parameters.
type sqlArgs struct{ list []any }

// add appends v and returns its placeholder.
func (a *sqlArgs) add(v any) string {
	a.list = append(a.list, v)
	return "$" + strconv.Itoa(len(a.list))
}

// where renders f as SQL conditions, each starting with " AND", matching
// exactly what broker.Filter.Match accepts. Rows that are not envelopes
// match only the zero filter.
func where(f broker.Filter, a *sqlArgs) string {
	if f.IsZero() {
		return ""
	}
	var b strings.Builder
	b.WriteString(" AND is_envelope")
	if len(f.Classes) > 0 {
		v := make([]string, len(f.Classes))
		for i, c := range f.Classes {
			v[i] = c.String()
		}
		b.WriteString(" AND failure_class = ANY(" + a.add(v) + "::text[])")
	}
	if len(f.Stages) > 0 {
		v := make([]string, len(f.Stages))
		for i, s := range f.Stages {
			v[i] = s.String()
		}
		b.WriteString(" AND failed_stage = ANY(" + a.add(v) + "::text[])")
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
	return b.String()
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
// Go.
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

// ListOptions narrows [Store.List]. The zero value lists up to 1000
// pending and leased records.
type ListOptions struct {
	// IncludeReplayed lists replayed records too.
	IncludeReplayed bool
	// Limit caps the number of records. 0 means 1000.
	Limit int
	// AfterID lists records with a larger id only, for paging.
	AfterID int64
	// Intersects, when set, keeps the records whose stored geometry
	// (not the error location: see broker.Filter.BBox for that)
	// intersects this bound, with ST_Intersects, among the geometries in
	// SRID. Records without a parsed geometry, or in another SRID, do not
	// match.
	Intersects *orb.Bound
	// SRID is the SRID of Intersects. 0 means 4326.
	SRID int
}

// Entry is a record as [Store.List] returns it: with its row's state, and
// without a lease.
type Entry struct {
	// Record holds the id, destination and message (the exact body).
	Record *broker.Record
	// Status is pending, leased or replayed.
	Status string
	// PublishedAt is when the row was written (database clock).
	PublishedAt time.Time
	// ReplayedAt is when the record was acknowledged, or zero.
	ReplayedAt time.Time
	// LeaseUntil is when a lease ends, or zero.
	LeaseUntil time.Time
	// Deliveries is how many times the record was leased.
	Deliveries int
	// Duplicates counts writes of the same idempotency key that were
	// absorbed by this record.
	Duplicates int
	// GeometryStatus says why the geometry is or is not stored
	// (GeomParsed, GeomUnparseable, …).
	GeometryStatus string
	// GeometryError is PostGIS's message when it could not parse it.
	GeometryError string
	// SRID is the stored geometry's or location's SRID, or 0.
	SRID int
	// OffloadURI is the offloaded geometry's pointer, or "".
	OffloadURI string
}

// List returns the records of destination ("" for every destination)
// matching f, lowest id first, without leasing them.
func (s *Store) List(ctx context.Context, destination string, f broker.Filter, opts *ListOptions) ([]Entry, error) {
	var o ListOptions
	if opts != nil {
		o = *opts
	}
	a := &sqlArgs{}
	q := `SELECT id, destination, msg_key, headers, binary_headers, body, status, published_at, replayed_at,
		lease_until, deliveries, duplicates, geom_status, COALESCE(geom_error, ''),
		COALESCE(ST_SRID(geom), ST_SRID(location), 0), COALESCE(offload_uri, '')
		FROM ` + s.table + ` WHERE id > ` + a.add(o.AfterID) + `::bigint`
	if destination != "" {
		q += ` AND destination = ` + a.add(destination) + `::text`
	}
	if !o.IncludeReplayed {
		q += ` AND replayed_at IS NULL`
	}
	q += where(f, a)
	if o.Intersects != nil {
		srid := o.SRID
		if srid == 0 {
			srid = 4326
		}
		bb := *o.Intersects
		p := a.add(int32(srid))
		box := "ST_MakeEnvelope(" + a.add(bb.Min[0]) + "::float8, " + a.add(bb.Min[1]) + "::float8, " +
			a.add(bb.Max[0]) + "::float8, " + a.add(bb.Max[1]) + "::float8, " + p + "::integer)"
		// && uses the GiST index and tolerates mixed SRIDs; ST_Intersects
		// does not, so it runs only on rows of the bound's SRID.
		q += ` AND geom && ` + box + ` AND CASE WHEN ST_SRID(geom) = ` + p + `::integer THEN ST_Intersects(geom, ` + box + `) ELSE false END`
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 1000
	}
	q += ` ORDER BY id LIMIT ` + a.add(limit) + `::bigint`
	rows, err := s.pool.Query(ctx, q, a.list...)
	if err != nil {
		return nil, fmt.Errorf("postgis: list: %w", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var (
			id                   int64
			dest                 string
			key, binary, body    []byte
			headers              map[string]string
			e                    Entry
			replayed, leaseUntil *time.Time
		)
		if err := rows.Scan(&id, &dest, &key, &headers, &binary, &body, &e.Status, &e.PublishedAt, &replayed,
			&leaseUntil, &e.Deliveries, &e.Duplicates, &e.GeometryStatus, &e.GeometryError, &e.SRID, &e.OffloadURI); err != nil {
			return nil, fmt.Errorf("postgis: list: %w", err)
		}
		h, err := decodeHeaders(headers, binary)
		if err != nil {
			return nil, fmt.Errorf("postgis: record %d: %w", id, err)
		}
		e.Record = &broker.Record{ID: strconv.FormatInt(id, 10), Destination: dest,
			Message: &broker.Message{Key: key, Body: body, Headers: h}, Deliveries: e.Deliveries}
		e.PublishedAt = e.PublishedAt.UTC()
		if replayed != nil {
			e.ReplayedAt = replayed.UTC()
		}
		if leaseUntil != nil {
			e.LeaseUntil = leaseUntil.UTC()
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgis: list: %w", err)
	}
	return out, nil
}

// StatsOptions shapes [Store.Stats].
type StatsOptions struct {
	// Bucket, when positive, also groups by dead-letter time in buckets of
	// this width (date_bin, aligned to 2000-01-01T00:00:00Z). Default 0:
	// no time grouping.
	Bucket time.Duration
}

// Count is one row of [Store.Stats].
type Count struct {
	Destination string
	Class       string
	Stage       string
	// EPSG is broker.EPSGOf of the envelopes, 0 when unknown.
	EPSG int
	// ReasonKind is the geometry error's kind, or "".
	ReasonKind string
	// Bucket is the start of the time bucket, when StatsOptions.Bucket is
	// set.
	Bucket time.Time
	// Pending, Leased and Replayed count records by status.
	Pending, Leased, Replayed int
}

// Stats counts the envelopes of destination ("" for every destination)
// matching f by destination, class, stage, EPSG, reason kind and,
// optionally, time bucket, and by status.
func (s *Store) Stats(ctx context.Context, destination string, f broker.Filter, opts *StatsOptions) ([]Count, error) {
	var o StatsOptions
	if opts != nil {
		o = *opts
	}
	a := &sqlArgs{}
	bucket := "NULL::timestamptz"
	if o.Bucket > 0 {
		bucket = "date_bin(" + a.add(o.Bucket.Microseconds()) + "::bigint * interval '1 microsecond', dead_lettered_at, timestamptz '2000-01-01 00:00:00+00')"
	}
	q := `SELECT destination, failure_class, failed_stage, COALESCE(epsg, 0), COALESCE(reason_kind, ''), ` + bucket + `,
		count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'leased'),
		count(*) FILTER (WHERE status = 'replayed')
		FROM ` + s.table + ` WHERE is_envelope`
	if destination != "" {
		q += ` AND destination = ` + a.add(destination) + `::text`
	}
	q += where(f, a) + ` GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6`
	rows, err := s.pool.Query(ctx, q, a.list...)
	if err != nil {
		return nil, fmt.Errorf("postgis: stats: %w", err)
	}
	defer rows.Close()
	var out []Count
	for rows.Next() {
		var c Count
		var b *time.Time
		if err := rows.Scan(&c.Destination, &c.Class, &c.Stage, &c.EPSG, &c.ReasonKind, &b, &c.Pending, &c.Leased, &c.Replayed); err != nil {
			return nil, fmt.Errorf("postgis: stats: %w", err)
		}
		if b != nil {
			c.Bucket = b.UTC()
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgis: stats: %w", err)
	}
	return out, nil
}
