package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/geodlq/geodlq/broker"
)

// ListOptions narrows [Store.List].
type ListOptions struct {
	// IncludeReplayed lists acknowledged (replayed) records too.
	IncludeReplayed bool
	// Limit caps the number of records. 0 means 1000.
	Limit int
	// AfterID lists records with a larger id only, for paging.
	AfterID int64
}

// Entry is a record as [Store.List] returns it: without a lease.
type Entry struct {
	// Record holds the id, destination and message (envelope bytes).
	Record *broker.Record
	// PublishedAt is when the record was written.
	PublishedAt time.Time
	// ReplayedAt is when the record was acknowledged, or zero.
	ReplayedAt time.Time
	// Deliveries is how many times it was leased.
	Deliveries int
}

// List returns records of destination matching f, oldest first, without
// leasing them. An empty destination lists every destination.
func (s *Store) List(ctx context.Context, destination string, f broker.Filter, opts ListOptions) ([]Entry, error) {
	cond, args := where(f)
	q := `SELECT id, destination, msg_key, headers, body, deliveries, published_at, acked_at FROM dlq_records WHERE id > ?`
	all := []any{opts.AfterID}
	if destination != "" {
		q += ` AND destination = ?`
		all = append(all, destination)
	}
	if !opts.IncludeReplayed {
		q += ` AND acked_at IS NULL`
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = 1000
	}
	q += cond + ` ORDER BY id LIMIT ?`
	all = append(append(all, args...), limit)
	rows, err := s.db.QueryContext(ctx, q, all...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var (
			id         int64
			dest       string
			key        []byte
			headers    string
			body       []byte
			deliveries int
			published  int64
			acked      sql.NullInt64
		)
		if err := rows.Scan(&id, &dest, &key, &headers, &body, &deliveries, &published, &acked); err != nil {
			return nil, fmt.Errorf("sqlite: list: %w", err)
		}
		m := &broker.Message{Key: key, Body: body}
		if err := json.Unmarshal([]byte(headers), &m.Headers); err != nil {
			return nil, fmt.Errorf("sqlite: record %d headers: %w", id, err)
		}
		e := Entry{
			Record:      &broker.Record{ID: strconv.FormatInt(id, 10), Destination: dest, Message: m, Deliveries: deliveries},
			PublishedAt: time.Unix(0, published).UTC(),
			Deliveries:  deliveries,
		}
		if acked.Valid {
			e.ReplayedAt = time.Unix(0, acked.Int64).UTC()
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Count is one row of [Store.Stats].
type Count struct {
	Destination string
	Class       string
	Stage       string
	EPSG        int
	ReasonKind  string
	Pending     int
	Replayed    int
}

// Stats counts envelopes by destination, class, stage, EPSG and reason
// kind, pending and replayed separately.
func (s *Store) Stats(ctx context.Context, f broker.Filter) ([]Count, error) {
	cond, args := where(f)
	q := `SELECT destination, COALESCE(failure_class,''), COALESCE(failed_stage,''), COALESCE(epsg,0), COALESCE(reason_kind,''),
		SUM(acked_at IS NULL), SUM(acked_at IS NOT NULL)
		FROM dlq_records WHERE is_envelope = 1` + cond + `
		GROUP BY 1,2,3,4,5 ORDER BY 1,2,3,4,5`
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	defer rows.Close()
	var out []Count
	for rows.Next() {
		var c Count
		if err := rows.Scan(&c.Destination, &c.Class, &c.Stage, &c.EPSG, &c.ReasonKind, &c.Pending, &c.Replayed); err != nil {
			return nil, fmt.Errorf("sqlite: stats: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
