package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	sqlitedrv "modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// Options configures [Open]. The zero value and nil are valid.
type Options struct {
	// StoreOptions: LeaseTTL defaults to 30s. MaxMessageBytes defaults to
	// 64 MiB and is capped at 999 MiB (SQLite stores at most 10^9 bytes in
	// a row); a larger body is refused with a [*classify.TooLargeError].
	broker.StoreOptions
	// BusyTimeout is how long a call waits for another connection's
	// transaction (another handle's, another process's) to end, counted
	// like SQLite's busy_timeout: the waits, not the time spent running.
	// Default 10s.
	BusyTimeout time.Duration
	// Synchronous is SQLite's synchronous setting: "FULL" (default: a
	// write survives power loss once Publish returns) or "NORMAL"
	// (survives a process crash; faster).
	Synchronous string
	// Now returns the current time, for leases (Record.LeaseExpires is
	// read on it: a replayer compares it with time.Now). Default time.Now.
	Now func() time.Time
	// SourcePointers are source pointers besides
	// broker.DefaultSourcePointer (see broker.Filter.SourcePointer) to
	// index: a read-write open creates, once, an index of each record's
	// source at each, so that a filter on Sources at that pointer (and
	// its count) reads the index rather than every record. Creating one
	// reads every record (about 30 s a million) and holds writers off
	// meanwhile; each index costs every later write a little. Indexes of
	// pointers no longer given are kept (DROP INDEX dlq_source_… to remove
	// one). A read-only open ignores them.
	SourcePointers []string
}

const (
	defaultMaxBytes = 64 << 20
	// maxRowBytes is below SQLite's SQLITE_MAX_LENGTH (10^9), which bounds
	// a whole row: the body, the headers and the indexed columns.
	maxRowBytes = 999 << 20
)

// drv is the SQLite [broker.Driver]. It is safe for concurrent use.
type drv struct {
	path  string
	db    *sql.DB // read-write handle; nil when read-only
	ro    *roDB   // read-only handle; nil when read-write
	ttl   time.Duration
	busy  time.Duration
	limit int
	now   func() time.Time
	log   *slog.Logger
	sem   chan struct{} // the holder of the read-write handle's one connection
	// common is how many matches make a filter common (see pagePlan):
	// commonMatches; tests lower it.
	common int
	stmts  struct{ insert, avail, fetch, renew, ack, release *sql.Stmt }
}

var (
	_ broker.Driver  = (*drv)(nil)
	_ broker.Limiter = (*drv)(nil)
	_ broker.Lister  = (*drv)(nil)
	_ broker.Statser = (*drv)(nil)
	_ broker.Purger  = (*drv)(nil)
	_ broker.Aser    = (*drv)(nil)
	_ broker.Batcher = (*drv)(nil)
)

// Open opens the store in the SQLite file at path, creating the file and
// its table when missing (unless opts.ReadOnly). A file that exists but is
// not a SQLite database, or not a regular file (a FIFO, a device), is
// refused with an error wrapping [broker.ErrNoStore]; so is, read-only, a
// database without the store's table. ctx bounds opening and migrating.
// Several handles, in one process or many, may open the same file.
func Open(ctx context.Context, path string, opts *Options) (*broker.Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	d, err := open(ctx, path, &o, !o.ReadOnly)
	if err != nil {
		return nil, err
	}
	return broker.NewStore("sqlite", d, &o.StoreOptions), nil
}

// MaxMessageBytes implements [broker.Limiter].
func (d *drv) MaxMessageBytes(string) int { return d.limit }

// As implements [broker.Aser]: target may be a **sql.DB, the handle on the
// file (read-only for a read-only store).
func (d *drv) As(target any) bool {
	p, ok := target.(**sql.DB)
	if !ok {
		return false
	}
	if d.ro != nil {
		db, _, err := d.ro.get(context.Background())
		if err != nil {
			return false
		}
		*p = db
		return true
	}
	*p = d.db
	return true
}

// Close closes the database.
func (d *drv) Close() error {
	if d.ro != nil {
		return d.ro.close()
	}
	for _, st := range []*sql.Stmt{d.stmts.insert, d.stmts.avail, d.stmts.fetch, d.stmts.renew, d.stmts.ack, d.stmts.release} {
		if st != nil {
			_ = st.Close()
		}
	}
	return d.db.Close()
}

// errReadOnly is the error of a write through a read-only handle.
func errReadOnly(op string) error {
	return fmt.Errorf("sqlite: %s: %w", op, broker.ErrReadOnly)
}

// The statements of the write path, prepared once per connection.
const (
	insertSQL = `INSERT INTO dlq_records
		(destination, msg_key, headers, body, is_envelope, event_id, idempotency_key, failure_class, failed_stage,
		 epsg, reason_kind, loc_x, loc_y, source_topic, dead_lettered_at, published_at,
		 vertex_count, geometry_bytes, attempts, source, offload_uri, raw_offload_uri, summary, attrs, search)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`
	ackSQL = `UPDATE dlq_records SET acked_at = ?, lease_token = NULL, lease_until = NULL
		WHERE id = ? AND destination = ? AND lease_token = ? AND acked_at IS NULL`
	releaseSQL = `UPDATE dlq_records SET lease_token = NULL, lease_until = NULL
		WHERE id = ? AND destination = ? AND lease_token = ? AND acked_at IS NULL`
	renewSQL = `UPDATE dlq_records SET lease_until = ?
		WHERE id = ? AND destination = ? AND lease_token = ? AND acked_at IS NULL`
)

// fetchSQL leases in one statement the oldest available records of a
// destination that match cond (see [where]); the leased rows come back
// through RETURNING, in no particular order. Its arguments: the lease
// token, the lease's end, the destination, now, cond's, the limit.
func fetchSQL(cond string) string {
	return `UPDATE dlq_records SET lease_token = ?, lease_until = ?, deliveries = deliveries + 1
		WHERE id IN (SELECT id FROM dlq_records
			WHERE destination = ? AND acked_at IS NULL AND (lease_until IS NULL OR lease_until <= ?)` + cond + `
			ORDER BY id LIMIT ?)
		RETURNING id, msg_key, headers, body, deliveries`
}

// availableSQL tells whether fetchSQL(cond) would lease anything. Its
// arguments: the destination, now, cond's.
func availableSQL(cond string) string {
	return `SELECT EXISTS (SELECT 1 FROM dlq_records
		WHERE destination = ? AND acked_at IS NULL AND (lease_until IS NULL OR lease_until <= ?)` + cond + `)`
}

// prepare prepares the write path's statements.
func (d *drv) prepare(ctx context.Context) error {
	for _, p := range []struct {
		st **sql.Stmt
		q  string
	}{{&d.stmts.insert, insertSQL}, {&d.stmts.fetch, fetchSQL("")}, {&d.stmts.avail, availableSQL("")}, {&d.stmts.renew, renewSQL}, {&d.stmts.ack, ackSQL}, {&d.stmts.release, releaseSQL}} {
		err := d.retry(ctx, func() (err error) {
			*p.st, err = d.db.PrepareContext(ctx, p.q)
			return err
		})
		if err != nil {
			return fmt.Errorf("sqlite: prepare: %w", err)
		}
	}
	return nil
}

// lock takes the handle's one connection for the caller, or fails when
// ctx ends first. Every use of d.db goes through it, so that a statement
// run afterwards never waits for the pool.
func (d *drv) lock(ctx context.Context) error {
	select {
	case d.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		<-d.sem
		return err
	}
	return nil
}

func (d *drv) unlock() { <-d.sem }

// write runs fn, one statement in its own transaction, on the handle's
// connection.
//
// ctx bounds the wait for the connection and for SQLite's write lock:
// until the statement has the lock nothing has happened, and an error then
// means just that (SQLITE_BUSY is retried, and the wait ends within
// busyQuantum of ctx's end). The statement itself runs under a context without ctx's
// cancellation or deadline, so that a started write is never abandoned
// half-way: write returns nil only when the statement's transaction
// committed, and otherwise it was rolled back and nothing changed. Its
// time is bounded by SQLite (the disk), not by ctx.
func (d *drv) write(ctx context.Context, fn func(ctx context.Context) error) error {
	if err := d.lock(ctx); err != nil {
		return err
	}
	defer d.unlock()
	nc := context.WithoutCancel(ctx)
	return d.retry(ctx, func() error { return fn(nc) })
}

// tx runs fn in a write transaction (BEGIN IMMEDIATE … COMMIT) on the
// handle's connection. Like write, ctx bounds the wait for the lock, and
// COMMIT is never interrupted; fn may use ctx, and an fn that fails (or
// is interrupted) is rolled back whole.
func (d *drv) tx(ctx context.Context, fn func(c *sql.Conn) error) error {
	if err := d.lock(ctx); err != nil {
		return err
	}
	defer d.unlock()
	c, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	nc := context.WithoutCancel(ctx)
	if err := d.retry(ctx, func() error {
		_, err := c.ExecContext(nc, "BEGIN IMMEDIATE")
		return err
	}); err != nil {
		rollback(c)
		return err
	}
	if err := fn(c); err != nil {
		rollback(c)
		return err
	}
	if _, err := c.ExecContext(nc, "COMMIT"); err != nil {
		rollback(c) // a failed COMMIT can leave the transaction open
		return err
	}
	return nil
}

// rollback ends the transaction open on c, if any. A connection that
// cannot roll back is discarded, so that it never serves another call
// inside a stale transaction.
func rollback(c *sql.Conn) {
	_, err := c.ExecContext(context.Background(), "ROLLBACK")
	if err != nil && !strings.Contains(err.Error(), "no transaction is active") {
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// Publish writes m to destination in one statement; when it returns nil
// the record is on disk. Its outcome is certain (see [drv.write]).
func (d *drv) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if d.ro != nil {
		return errReadOnly("publish")
	}
	r, err := rowOf(m)
	if err != nil {
		return fmt.Errorf("sqlite: publish to %q: %w", destination, err)
	}
	if len(m.Body)+len(r.headers)+len(m.Key) > maxRowBytes {
		return &classify.TooLargeError{What: "message with its headers and key", Destination: destination,
			Size: len(m.Body) + len(r.headers) + len(m.Key), Limit: maxRowBytes}
	}
	err = d.write(ctx, func(ctx context.Context) error {
		_, err := d.stmts.insert.ExecContext(ctx, destination, m.Key, r.headers, m.Body, r.isEnv, r.eventID, r.key,
			r.class, r.stage, r.epsg, r.kind, r.locX, r.locY, r.topic, r.deadAt, nanos(d.now()),
			r.ix.vertices, r.ix.geomBytes, r.ix.attempts, r.ix.source, r.ix.offload, r.ix.rawOffload, r.ix.summary, r.ix.attrs, r.ix.search)
		return err
	})
	if err != nil {
		var se *sqlitedrv.Error
		if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_TOOBIG {
			return &classify.TooLargeError{What: "message with its headers and key", Destination: destination,
				Size: len(m.Body) + len(r.headers) + len(m.Key), Limit: maxRowBytes}
		}
		return fmt.Errorf("sqlite: publish to %q: %w", destination, err)
	}
	return nil
}

// PublishBatch implements [broker.Batcher]: every message in one write
// transaction, so that the batch costs one commit (one fsync). Its
// outcome is certain, as Publish's: nil when the transaction committed,
// else nothing was written.
func (d *drv) PublishBatch(ctx context.Context, destination string, ms []*broker.Message) error {
	if d.ro != nil {
		return errReadOnly("publish")
	}
	rows := make([]row, len(ms))
	for i, m := range ms {
		r, err := rowOf(m)
		if err != nil {
			return fmt.Errorf("sqlite: publish to %q: %w", destination, err)
		}
		if len(m.Body)+len(r.headers)+len(m.Key) > maxRowBytes {
			return &classify.TooLargeError{What: "message with its headers and key", Destination: destination,
				Size: len(m.Body) + len(r.headers) + len(m.Key), Limit: maxRowBytes}
		}
		rows[i] = r
	}
	now := nanos(d.now())
	err := d.tx(ctx, func(c *sql.Conn) error {
		nc := context.WithoutCancel(ctx)
		st, err := c.PrepareContext(nc, insertSQL)
		if err != nil {
			return err
		}
		defer st.Close()
		for i, m := range ms {
			r := rows[i]
			if _, err := st.ExecContext(nc, destination, m.Key, r.headers, m.Body, r.isEnv, r.eventID, r.key,
				r.class, r.stage, r.epsg, r.kind, r.locX, r.locY, r.topic, r.deadAt, now,
				r.ix.vertices, r.ix.geomBytes, r.ix.attempts, r.ix.source, r.ix.offload, r.ix.rawOffload, r.ix.summary, r.ix.attrs, r.ix.search); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: publish %d messages to %q: %w", len(ms), destination, err)
	}
	return nil
}

// row holds the columns Publish writes beside the body.
type row struct {
	headers                                 string
	isEnv                                   int
	eventID, key, class, stage, kind, topic sql.NullString
	epsg, deadAt                            sql.NullInt64
	locX, locY                              sql.NullFloat64
	ix                                      indexCols
}

// indexCols are the columns of broker.IndexOf: the summary (JSON), the
// attributes, the search text, the sort values, the default source and
// the offloaded blobs' URIs.
type indexCols struct {
	vertices, geomBytes, attempts int64
	source, offload, rawOffload   sql.NullString
	summary, attrs, search        string
}

// indexOf computes the index columns of m (its envelope env, nil when the
// body is not one).
func indexOf(m *broker.Message) indexCols {
	env, err := broker.EnvelopeOf(m)
	if err != nil {
		env = nil
	}
	return indexOfEnv(m, env)
}

func indexOfEnv(m *broker.Message, env *envelope.Envelope) indexCols {
	var x broker.Indexed
	if env != nil {
		x = broker.IndexOfEnvelope(env, int64(len(m.Body)), m.Headers)
	} else {
		x = broker.IndexOf(&broker.Message{Body: m.Body, Headers: m.Headers})
	}
	sum, _ := json.Marshal(x.Summary) // a Summary always encodes
	c := indexCols{summary: string(sum), attrs: x.Attrs, search: x.Search,
		vertices: int64(x.Summary.VertexCount), geomBytes: x.Summary.GeometryBytes, attempts: int64(x.Summary.Attempts)}
	if env != nil {
		c.source = nullStr(broker.SourceValue(x.Attrs, broker.DefaultSourcePointer))
		c.offload, c.rawOffload = nullStr(env.Geometry.OffloadURI), nullStr(env.RawPayloadOffloadURI)
	}
	return c
}

func rowOf(m *broker.Message) (row, error) {
	var r row
	headers := m.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	hj, err := json.Marshal(headers)
	if err != nil {
		return r, fmt.Errorf("encoding headers: %w", err)
	}
	r.headers = string(hj)
	env, err := broker.EnvelopeOf(m)
	if err != nil {
		r.ix = indexOfEnv(m, nil)
		return r, nil // stored as it is; matched by the zero filter only
	}
	r.ix = indexOfEnv(m, env)
	r.isEnv = 1
	r.eventID = nullStr(env.EventID)
	r.key = nullStr(env.IdempotencyKey)
	r.class = nullStr(string(env.FailureClass))
	r.stage = nullStr(string(env.FailedStage))
	r.epsg = sql.NullInt64{Int64: int64(broker.EPSGOf(env)), Valid: true}
	r.deadAt = sql.NullInt64{Int64: nanos(env.DeadLetteredAt), Valid: true}
	if ge := env.GeometryError; ge != nil {
		r.kind = nullStr(ge.Kind)
		if len(ge.Location) == 2 {
			r.locX = sql.NullFloat64{Float64: ge.Location[0], Valid: true}
			r.locY = sql.NullFloat64{Float64: ge.Location[1], Valid: true}
		}
	}
	if env.Source != nil {
		r.topic = nullStr(env.Source.Topic)
	}
	return r, nil
}

func nullStr(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// Times are stored as Unix nanoseconds, clamped to years 1824 to 2262 (an
// int64 from its half minimum, so that a time bucket's arithmetic cannot
// overflow), which keeps comparisons in order for any date an envelope
// claims.
var (
	minNanos = time.Unix(0, math.MinInt64/2)
	maxNanos = time.Unix(0, math.MaxInt64)
)

func nanos(t time.Time) int64 {
	switch {
	case t.Before(minNanos):
		return math.MinInt64 / 2
	case t.After(maxNanos):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// Fetch leases up to max pending records of destination matching f, oldest
// first, in one statement whose outcome is certain (see [drv.write]): the
// leases it reports are the leases it took. All of f is applied in SQL;
// the zero filter uses prepared statements.
func (d *drv) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	if d.ro != nil {
		return nil, errReadOnly("fetch")
	}
	if max <= 0 {
		return nil, nil // the portable store never asks for none; SQLite reads LIMIT -1 as all
	}
	now := d.now()
	token := newToken()
	cond, fargs := where(f, true)
	look := append([]any{destination, nanos(now)}, fargs...)
	args := append(append([]any{token, nanos(now.Add(d.ttl))}, look...), max)
	available := func(ctx context.Context) *sql.Row { return d.stmts.avail.QueryRowContext(ctx, look...) }
	lease := func(ctx context.Context) (*sql.Rows, error) { return d.stmts.fetch.QueryContext(ctx, args...) }
	if cond != "" {
		aq, lq := availableSQL(cond), fetchSQL(cond)
		available = func(ctx context.Context) *sql.Row { return d.db.QueryRowContext(ctx, aq, look...) }
		lease = func(ctx context.Context) (*sql.Rows, error) { return d.db.QueryContext(ctx, lq, args...) }
	}
	if err := d.lock(ctx); err != nil {
		return nil, fmt.Errorf("sqlite: fetch from %q: %w", destination, err)
	}
	defer d.unlock()
	// Look before leasing: a read takes no lock, so that consumers polling
	// an idle destination cost no write transactions.
	var found bool
	if err := d.retry(ctx, func() error { return available(ctx).Scan(&found) }); err != nil || !found {
		if err != nil {
			err = fmt.Errorf("sqlite: fetch from %q: %w", destination, err)
		}
		return nil, err
	}
	// Lease, in one statement that is not interrupted once it runs (see
	// [drv.write]).
	nc := context.WithoutCancel(ctx)
	var out []*broker.Record
	err := d.retry(ctx, func() error {
		out = out[:0]
		rows, err := lease(nc)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id      int64
				key     []byte
				headers string
				body    []byte
				deliv   int
			)
			if err := rows.Scan(&id, &key, &headers, &body, &deliv); err != nil {
				return err
			}
			m := &broker.Message{Key: key, Body: body, Headers: d.headers(ctx, id, headers), DeliveryAttempt: deliv}
			out = append(out, &broker.Record{ID: strconv.FormatInt(id, 10), Destination: destination, Message: m,
				Deliveries: deliv, Lease: token, LeaseExpires: now.Add(d.ttl)})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return rows.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: fetch from %q: %w", destination, err)
	}
	slices.SortFunc(out, func(a, b *broker.Record) int { return compareIDs(a.ID, b.ID) })
	return out, nil
}

// headers decodes a record's headers column. A column that is not the
// JSON object Publish wrote (the file was edited) yields no headers and a
// warning, rather than a record that can never be fetched.
func (d *drv) headers(ctx context.Context, id int64, col string) map[string]string {
	var h map[string]string
	if err := json.Unmarshal([]byte(col), &h); err != nil {
		d.log.WarnContext(ctx, "geodlq: sqlite record with unreadable headers; returned without them",
			slog.String("path", d.path), slog.Int64("record", id), slog.Any("error", err))
		return nil
	}
	return h
}

func compareIDs(a, b string) int {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// Ack marks r replayed. It fails with [broker.ErrLeaseLost] if r's lease
// was taken over or the record was already acknowledged.
func (d *drv) Ack(ctx context.Context, r *broker.Record) error {
	if d.ro != nil {
		return errReadOnly("ack")
	}
	return d.settle(ctx, r, d.stmts.ack, nanos(d.now()))
}

// Renew extends r's lease to LeaseTTL from now, if r's lease token is
// still the row's and the record is not acknowledged — after lease_until
// too, as long as no one fetched the record since. Otherwise it fails
// with [broker.ErrLeaseLost].
func (d *drv) Renew(ctx context.Context, r *broker.Record) error {
	if d.ro != nil {
		return errReadOnly("renew")
	}
	until := d.now().Add(d.ttl)
	if err := d.settle(ctx, r, d.stmts.renew, nanos(until)); err != nil {
		return err
	}
	r.LeaseExpires = until
	return nil
}

// Release makes r available to fetchers again at once.
func (d *drv) Release(ctx context.Context, r *broker.Record) error {
	if d.ro != nil {
		return errReadOnly("release")
	}
	return d.settle(ctx, r, d.stmts.release)
}

func (d *drv) settle(ctx context.Context, r *broker.Record, st *sql.Stmt, first ...any) error {
	id, err := strconv.ParseInt(r.ID, 10, 64)
	if err != nil {
		return fmt.Errorf("sqlite: record id %q is not this store's: %w", r.ID, broker.ErrInvalidArgument)
	}
	var n int64
	err = d.write(ctx, func(ctx context.Context) error {
		res, err := st.ExecContext(ctx, append(first, id, r.Destination, r.Lease)...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: record %s/%s: %w", r.Destination, r.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("sqlite: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	return nil
}

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// current reports whether the file is at [listVersion] or later, with the
// summaries, attributes, counts and search index that List, Stats and the
// text and source filters use. A read-write handle migrated the file when
// it opened it; a read-only one may be reading a file of version 0, which
// it lists the old way (the portable store then sorts, counts and
// searches).
func (d *drv) current() bool {
	if d.ro == nil {
		return true
	}
	d.ro.mu.Lock()
	defer d.ro.mu.Unlock()
	return d.ro.version >= listVersion
}

// hourly reports whether the file keeps dlq_hour_counts (version 5 or
// later): a read-only handle on an older file counts by time from the
// records.
func (d *drv) hourly() bool {
	if d.ro == nil {
		return true
	}
	d.ro.mu.Lock()
	defer d.ro.mu.Unlock()
	return d.ro.version >= 5
}

// listVersion is the oldest layout whose columns and tables List, Stats
// and Purge query: version 4 only adds indexes, which a read-only handle
// on a file of version 3 does without (slower).
const listVersion = 3
