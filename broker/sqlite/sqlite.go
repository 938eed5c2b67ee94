package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
)

// Options configures a [Store]. Nil means defaults.
type Options struct {
	// LeaseTTL is how long a fetched record stays invisible to other
	// fetchers before it is redelivered. Default 30s.
	LeaseTTL time.Duration
	// MaxMessageBytes refuses larger bodies with [classify.ErrTooLarge].
	// Default 64 MiB.
	MaxMessageBytes int
	// BusyTimeout is how long a write waits for another process's
	// transaction. Default 10s.
	BusyTimeout time.Duration
	// Synchronous is SQLite's synchronous setting: "FULL" (default: a
	// write survives power loss once Publish returns) or "NORMAL" (survives
	// a process crash; faster).
	Synchronous string
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

// Store is a dead-letter store in one SQLite file. It is safe for
// concurrent use, and several processes may open the same file.
type Store struct {
	db    *sql.DB
	path  string
	ttl   time.Duration
	limit int
	now   func() time.Time
}

var (
	_ broker.Publisher        = (*Store)(nil)
	_ broker.DeadLetterSource = (*Store)(nil)
	_ broker.Limiter          = (*Store)(nil)
)

const schema = `
CREATE TABLE IF NOT EXISTS dlq_records (
	id               INTEGER PRIMARY KEY AUTOINCREMENT,
	destination      TEXT    NOT NULL,
	msg_key          BLOB,
	headers          TEXT    NOT NULL DEFAULT '{}',
	body             BLOB    NOT NULL,
	is_envelope      INTEGER NOT NULL DEFAULT 0,
	event_id         TEXT,
	idempotency_key  TEXT,
	failure_class    TEXT,
	failed_stage     TEXT,
	epsg             INTEGER,
	reason_kind      TEXT,
	loc_x            REAL,
	loc_y            REAL,
	source_topic     TEXT,
	dead_lettered_at INTEGER,
	published_at     INTEGER NOT NULL,
	lease_token      TEXT,
	lease_until      INTEGER,
	deliveries       INTEGER NOT NULL DEFAULT 0,
	acked_at         INTEGER
);
CREATE INDEX IF NOT EXISTS dlq_pending ON dlq_records (destination, acked_at, id);
CREATE INDEX IF NOT EXISTS dlq_class ON dlq_records (destination, failure_class, failed_stage);
CREATE INDEX IF NOT EXISTS dlq_epsg ON dlq_records (destination, epsg);
CREATE INDEX IF NOT EXISTS dlq_time ON dlq_records (destination, dead_lettered_at);
CREATE INDEX IF NOT EXISTS dlq_event ON dlq_records (event_id);
`

// Open opens (creating if needed) the store in the file at path.
func Open(ctx context.Context, path string, opts *Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty path")
	}
	s := &Store{path: path, ttl: 30 * time.Second, limit: 64 << 20, now: time.Now}
	busy, sync := 10*time.Second, "FULL"
	if opts != nil {
		if opts.LeaseTTL > 0 {
			s.ttl = opts.LeaseTTL
		}
		if opts.MaxMessageBytes > 0 {
			s.limit = opts.MaxMessageBytes
		}
		if opts.BusyTimeout > 0 {
			busy = opts.BusyTimeout
		}
		if opts.Now != nil {
			s.now = opts.Now
		}
		switch strings.ToUpper(opts.Synchronous) {
		case "", "FULL":
		case "NORMAL":
			sync = "NORMAL"
		default:
			return nil, fmt.Errorf("sqlite: Synchronous must be FULL or NORMAL, got %q", opts.Synchronous)
		}
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+sync+")")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// One connection per handle: SQLite has one writer at a time, and a
	// single connection turns in-process contention into queueing instead
	// of SQLITE_BUSY. Other processes are waited for by busy_timeout.
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}
	s.db = db
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Path returns the file the store is in.
func (s *Store) Path() string { return s.path }

// MaxMessageBytes implements [broker.Limiter].
func (s *Store) MaxMessageBytes(string) int { return s.limit }

// Publish writes m to destination in one transaction; when it returns nil
// the record is on disk.
func (s *Store) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m == nil {
		return errors.New("sqlite: nil message")
	}
	if destination == "" {
		return errors.New("sqlite: empty destination")
	}
	if len(m.Body) > s.limit {
		return &classify.TooLargeError{Destination: destination, Size: len(m.Body), Limit: s.limit}
	}
	headers := m.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	hj, err := json.Marshal(headers)
	if err != nil {
		return fmt.Errorf("sqlite: encoding headers: %w", err)
	}
	var (
		isEnv                                   int
		eventID, key, class, stage, kind, topic sql.NullString
		epsg, deadAt                            sql.NullInt64
		locX, locY                              sql.NullFloat64
	)
	if env, err := broker.EnvelopeOf(m); err == nil {
		isEnv = 1
		eventID = nullStr(env.EventID)
		key = nullStr(env.IdempotencyKey)
		class = nullStr(env.FailureClass.String())
		stage = nullStr(env.FailedStage.String())
		epsg = sql.NullInt64{Int64: int64(broker.EPSGOf(env)), Valid: true}
		deadAt = sql.NullInt64{Int64: env.DeadLetteredAt.UnixNano(), Valid: true}
		if ge := env.GeometryError; ge != nil {
			kind = nullStr(ge.Kind)
			if len(ge.Location) == 2 {
				locX = sql.NullFloat64{Float64: ge.Location[0], Valid: true}
				locY = sql.NullFloat64{Float64: ge.Location[1], Valid: true}
			}
		}
		if env.Source != nil {
			topic = nullStr(env.Source.Topic)
		}
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO dlq_records
		(destination, msg_key, headers, body, is_envelope, event_id, idempotency_key, failure_class, failed_stage,
		 epsg, reason_kind, loc_x, loc_y, source_topic, dead_lettered_at, published_at)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		destination, m.Key, string(hj), m.Body, isEnv, eventID, key, class, stage,
		epsg, kind, locX, locY, topic, deadAt, s.now().UnixNano())
	if err != nil {
		return fmt.Errorf("sqlite: publish to %q: %w", destination, err)
	}
	return nil
}

func nullStr(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// where renders f as SQL conditions (always starting with " AND" when
// non-empty) and arguments. Records that are not envelopes match only the
// zero filter.
func where(f broker.Filter) (string, []any) {
	if f.IsZero() {
		return "", nil
	}
	var b strings.Builder
	var args []any
	b.WriteString(" AND is_envelope = 1")
	in := func(col string, vals []any) {
		b.WriteString(" AND " + col + " IN (" + strings.TrimSuffix(strings.Repeat("?,", len(vals)), ",") + ")")
		args = append(args, vals...)
	}
	if len(f.Classes) > 0 {
		v := make([]any, len(f.Classes))
		for i, c := range f.Classes {
			v[i] = c.String()
		}
		in("failure_class", v)
	}
	if len(f.Stages) > 0 {
		v := make([]any, len(f.Stages))
		for i, s := range f.Stages {
			v[i] = s.String()
		}
		in("failed_stage", v)
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
		args = append(args, f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		b.WriteString(" AND dead_lettered_at < ?")
		args = append(args, f.Until.UnixNano())
	}
	if f.BBox != nil {
		b.WriteString(" AND loc_x >= ? AND loc_x <= ? AND loc_y >= ? AND loc_y <= ?")
		args = append(args, f.BBox.Min[0], f.BBox.Max[0], f.BBox.Min[1], f.BBox.Max[1])
	}
	return b.String(), args
}

// Fetch leases up to max pending records of destination matching f, oldest
// first.
func (s *Store) Fetch(ctx context.Context, destination string, f broker.Filter, max int) (_ []*broker.Record, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	cond, args := where(f)
	now := s.now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: fetch: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	q := `SELECT id, msg_key, headers, body, deliveries FROM dlq_records
		WHERE destination = ? AND acked_at IS NULL AND (lease_until IS NULL OR lease_until <= ?)` + cond +
		` ORDER BY id LIMIT ?`
	rows, err := tx.QueryContext(ctx, q, append(append([]any{destination, now.UnixNano()}, args...), max)...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: fetch: %w", err)
	}
	var out []*broker.Record
	for rows.Next() {
		var (
			id      int64
			key     []byte
			headers string
			body    []byte
			deliv   int
		)
		if err := rows.Scan(&id, &key, &headers, &body, &deliv); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: fetch: %w", err)
		}
		m := &broker.Message{Key: key, Body: body, DeliveryAttempt: deliv + 1}
		if err := json.Unmarshal([]byte(headers), &m.Headers); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: record %d headers: %w", id, err)
		}
		out = append(out, &broker.Record{
			ID: strconv.FormatInt(id, 10), Destination: destination, Message: m,
			Deliveries: deliv + 1, Lease: newToken(),
		})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: fetch: %w", err)
	}
	until := now.Add(s.ttl).UnixNano()
	for _, r := range out {
		if _, err := tx.ExecContext(ctx, `UPDATE dlq_records SET lease_token = ?, lease_until = ?, deliveries = deliveries + 1 WHERE id = ?`,
			r.Lease, until, r.ID); err != nil {
			return nil, fmt.Errorf("sqlite: lease: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: fetch commit: %w", err)
	}
	return out, nil
}

// Ack marks r replayed. It fails with [broker.ErrLeaseLost] if r's lease
// was taken over or the record was already acknowledged.
func (s *Store) Ack(ctx context.Context, r *broker.Record) error {
	return s.settle(ctx, r, `UPDATE dlq_records SET acked_at = ?, lease_token = NULL, lease_until = NULL
		WHERE id = ? AND destination = ? AND lease_token = ? AND acked_at IS NULL`, s.now().UnixNano())
}

// Release makes r available to fetchers again at once.
func (s *Store) Release(ctx context.Context, r *broker.Record) error {
	return s.settle(ctx, r, `UPDATE dlq_records SET lease_token = NULL, lease_until = NULL
		WHERE id = ? AND destination = ? AND lease_token = ? AND acked_at IS NULL`)
}

func (s *Store) settle(ctx context.Context, r *broker.Record, q string, first ...any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r == nil {
		return errors.New("sqlite: nil record")
	}
	res, err := s.db.ExecContext(ctx, q, append(first, r.ID, r.Destination, r.Lease)...)
	if err != nil {
		return fmt.Errorf("sqlite: record %s/%s: %w", r.Destination, r.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlite: record %s/%s: %w", r.Destination, r.ID, err)
	} else if n != 1 {
		return fmt.Errorf("sqlite: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	return nil
}

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
