package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/mysql/internal/schema"
	"github.com/geodlq/geodlq/broker/txretry"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// Defaults of [Options].
const (
	// DefaultTable is the dead-letter table's name.
	DefaultTable = "geodlq_dead_letters"
	// DefaultLeaseTTL is how long a fetched record stays leased.
	DefaultLeaseTTL = 30 * time.Second
	// DefaultMaxMessageBytes caps the default body limit, which is
	// otherwise the server's max_allowed_packet less [packetReserve].
	DefaultMaxMessageBytes = 64 << 20
)

// packetReserve is what the body limit leaves of max_allowed_packet for
// the rest of a row: the message key, the headers (which repeat the
// idempotency key and event id), the triage columns and the protocol.
// Publish checks that the whole row fits.
const packetReserve = 1 << 20

// rowOverhead is what a row costs besides the sizes Publish adds up.
const rowOverhead = 16 << 10

// maxTableLen leaves room for the "_migrations" suffix in MySQL's 64-byte
// identifiers.
const maxTableLen = 48

// Options configures [New]. Nil means defaults.
type Options struct {
	// StoreOptions: LeaseTTL is how long a fetched record stays invisible
	// to other fetchers (lease_until = UTC_TIMESTAMP(6) + LeaseTTL on the
	// database's clock), default 30s, at least 1ms. MaxMessageBytes is the
	// largest body accepted, default the server's max_allowed_packet less
	// 1 MiB (16 MiB - 1 MiB = 15 MiB on a default MariaDB), at most 64
	// MiB; New reads max_allowed_packet from the server and refuses a
	// MaxMessageBytes the packet cannot carry.
	broker.StoreOptions
	// Table is the dead-letter table's name, in the connection's database;
	// its bookkeeping table is Table + "_migrations". Lower-case letters,
	// digits and underscores, at most 48 bytes. Default
	// "geodlq_dead_letters".
	Table string
	// Create creates the table when the database lacks it. Without it New
	// fails with an error wrapping [broker.ErrNoStore] on a database
	// without the table, and writes nothing.
	Create bool
}

// driver is the MySQL/MariaDB [broker.Driver].
type driver struct {
	db       *sql.DB
	ownsDB   bool // the opener made db; Close closes it
	name     string
	table    string // quoted
	search   string // the search table, quoted
	ttl      time.Duration
	limit    int
	packet   int
	readOnly bool
	// sinceCompact counts the rows written, acknowledged or deleted since
	// the count log was last folded (see [driver.wrote]).
	sinceCompact atomic.Int64

	insertSQL, ackSQL, releaseSQL, renewSQL string
}

var (
	_ broker.Driver  = (*driver)(nil)
	_ broker.Limiter = (*driver)(nil)
	_ broker.Lister  = (*driver)(nil)
	_ broker.Statser = (*driver)(nil)
	_ broker.Purger  = (*driver)(nil)
	_ broker.Aser    = (*driver)(nil)
	_ broker.Batcher = (*driver)(nil)
)

// New returns a dead-letter store in a table of db's database. db stays
// the caller's: closing the store does not close it. New reads the
// server's version and max_allowed_packet, and brings the table up to
// [SchemaVersion] under a named lock (creating it only with opts.Create),
// unless opts.ReadOnly. It needs MariaDB 10.6 or MySQL 8.0.1 or later, for
// FOR UPDATE SKIP LOCKED.
func New(ctx context.Context, db *sql.DB, opts *Options) (*broker.Store, error) {
	d, err := newDriver(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	return broker.NewStore("mysql", d, &d.storeOptions(opts).StoreOptions), nil
}

func (d *driver) storeOptions(opts *Options) *Options {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.LeaseTTL, o.MaxMessageBytes = d.ttl, d.limit
	return &o
}

func newDriver(ctx context.Context, db *sql.DB, opts *Options) (*driver, error) {
	if db == nil {
		return nil, fmt.Errorf("mysql: nil *sql.DB: %w", broker.ErrInvalidArgument)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := schema.CheckIdent("mysql", "table", o.Table, maxTableLen); err != nil {
		return nil, err
	}
	switch {
	case o.LeaseTTL == 0:
		o.LeaseTTL = DefaultLeaseTTL
	case o.LeaseTTL < time.Millisecond:
		return nil, fmt.Errorf("mysql: LeaseTTL %v is under 1ms: %w", o.LeaseTTL, broker.ErrInvalidArgument)
	}
	if o.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("mysql: MaxMessageBytes %d is negative: %w", o.MaxMessageBytes, broker.ErrInvalidArgument)
	}
	d := &driver{db: db, name: o.Table, table: schema.Quote(o.Table), search: schema.Quote(o.Table + "_search"), ttl: o.LeaseTTL, readOnly: o.ReadOnly}
	if err := d.checkServer(ctx); err != nil {
		return nil, err
	}
	room := d.packet - packetReserve
	switch {
	case room < 1<<10:
		return nil, fmt.Errorf("mysql: max_allowed_packet %d leaves no room for a message (raise it above %d)", d.packet, packetReserve+1<<10)
	case o.MaxMessageBytes == 0:
		d.limit = min(room, DefaultMaxMessageBytes)
	case o.MaxMessageBytes > room:
		return nil, fmt.Errorf("mysql: MaxMessageBytes %d does not fit the server's max_allowed_packet %d (at most %d; raise max_allowed_packet): %w",
			o.MaxMessageBytes, d.packet, room, broker.ErrInvalidArgument)
	default:
		d.limit = o.MaxMessageBytes
	}
	if o.ReadOnly {
		v, err := schema.Version(ctx, db, d.target())
		if err != nil {
			return nil, err
		}
		if v != SchemaVersion {
			return nil, fmt.Errorf("mysql: table %s is at schema version %d, this package reads %d (a read-write open migrates it)", d.name, v, SchemaVersion)
		}
	} else {
		if err := schema.Migrate(ctx, db, d.target(), migrations, o.Create); err != nil {
			return nil, err
		}
		if err := d.backfill(ctx); err != nil {
			return nil, err
		}
		// The log other handles left unfolded (each folds after its own
		// compactEvery writes) is folded at each read-write open.
		if err := d.compact(ctx); err != nil {
			return nil, err
		}
	}
	d.insertSQL = d.render(insertSQL)
	d.ackSQL = d.render(ackSQL)
	d.releaseSQL = d.render(releaseSQL)
	d.renewSQL = d.render(renewSQL)
	return d, nil
}

var mariaRE = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+).*MariaDB`)
var mysqlRE = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)`)

// checkServer reads max_allowed_packet and refuses servers without SKIP
// LOCKED.
func (d *driver) checkServer(ctx context.Context) error {
	var version string
	var packet int64
	if err := d.db.QueryRowContext(ctx, `SELECT VERSION(), @@max_allowed_packet`).Scan(&version, &packet); err != nil {
		return fmt.Errorf("mysql: reading the server's version and max_allowed_packet: %w", err)
	}
	d.packet = int(min(packet, 1<<30))
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	if m := mariaRE.FindStringSubmatch(version); m != nil {
		if v := [2]int{num(m[1]), num(m[2])}; v[0] < 10 || (v[0] == 10 && v[1] < 6) {
			return fmt.Errorf("mysql: MariaDB %s lacks FOR UPDATE SKIP LOCKED (10.6 or later needed)", version)
		}
	} else if m := mysqlRE.FindStringSubmatch(version); m != nil {
		if v := [3]int{num(m[1]), num(m[2]), num(m[3])}; v[0] < 8 || (v[0] == 8 && v[1] == 0 && v[2] < 1) {
			return fmt.Errorf("mysql: MySQL %s lacks FOR UPDATE SKIP LOCKED (8.0.1 or later needed)", version)
		}
	}
	return nil
}

// MaxMessageBytes implements [broker.Limiter]: one limit for every
// destination.
func (d *driver) MaxMessageBytes(string) int { return d.limit }

// As implements [broker.Aser]: a **sql.DB gets the store's pool.
func (d *driver) As(target any) bool {
	if p, ok := target.(**sql.DB); ok {
		*p = d.db
		return true
	}
	return false
}

// Close closes the pool when the store's opener made it; a pool passed to
// New stays open.
func (d *driver) Close() error {
	if d.ownsDB {
		return d.db.Close()
	}
	return nil
}

func (d *driver) writable(op string) error {
	if d.readOnly {
		return fmt.Errorf("mysql: %s: %w", op, broker.ErrReadOnly)
	}
	return nil
}

const insertSQL = `INSERT INTO {t} (destination, msg_key, headers, binary_headers, body, is_envelope,
	event_id, idempotency_key, failure_class, failed_stage, epsg, reason_kind, dead_lettered_us, dead_lettered_ns,
	loc_x, loc_y, geometry_uri, raw_payload_uri,
	vertex_count, geometry_bytes, attempts, dead_lettered_nanos, source, summary, attrs, indexed, published_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, TRUE, UTC_TIMESTAMP(6))`

// insertSearchSQL writes the search text of the row just inserted.
const insertSearchSQL = `INSERT INTO {s} (id, search) VALUES (?, ?)`

// insert writes r, and its search text, in tx; it returns the row's id.
func (d *driver) insert(ctx context.Context, tx *sql.Tx, r *row) (int64, error) {
	res, err := tx.ExecContext(ctx, d.insertSQL, r.args()...)
	if err != nil {
		return 0, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, err
	}
	_, err = tx.ExecContext(ctx, d.render(insertSearchSQL), id, r.ix.search)
	return id, err
}

// PublishBatch implements [broker.Batcher]: every message's rows in one
// transaction, committed once, with Publish's certain outcome (a lost
// COMMIT is checked by reading the batch's last row).
func (d *driver) PublishBatch(ctx context.Context, destination string, ms []*broker.Message) error {
	if err := d.writable("publish"); err != nil {
		return err
	}
	rows := make([]*row, len(ms))
	for i, m := range ms {
		r, err := d.prepare(destination, m)
		if err != nil {
			return err
		}
		rows[i] = r
	}
	if len(rows) == 0 {
		return nil
	}
	var last int64
	err := d.certain(ctx, "publish "+strconv.Itoa(len(ms))+" messages to "+strconv.Quote(destination),
		func(ctx context.Context, tx *sql.Tx) error {
			for _, r := range rows {
				id, err := d.insert(ctx, tx, r)
				if err != nil {
					return err
				}
				last = id
			}
			return nil
		},
		func(ctx context.Context, tx *sql.Tx) (bool, error) {
			var n int
			err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+d.table+` WHERE id = ? AND destination = ? LOCK IN SHARE MODE`,
				last, destination).Scan(&n)
			return n == 1, err
		})
	if err == nil {
		d.wrote(ctx, len(rows))
	}
	return err
}

// backfillBatch is the rows one backfill transaction indexes.
const backfillBatch = 500

// backfill fills in the index columns and search text of the rows written
// before schema version 2 (or since by an older geodlq): indexed is false.
func (d *driver) backfill(ctx context.Context) error {
	var after uint64
	for {
		rows, err := d.db.QueryContext(ctx, `SELECT id, headers, binary_headers, body FROM `+d.table+
			` WHERE indexed = FALSE AND id > ? ORDER BY indexed, id LIMIT ?`, after, backfillBatch)
		if err != nil {
			return fmt.Errorf("mysql: indexing the records written before schema version 2: %w", err)
		}
		type todo struct {
			id uint64
			ix indexCols
		}
		var batch []todo
		for rows.Next() {
			var id uint64
			var hdr, bin, body []byte
			if err := rows.Scan(&id, &hdr, &bin, &body); err != nil {
				rows.Close()
				return fmt.Errorf("mysql: indexing the records written before schema version 2: %w", err)
			}
			h, _ := decodeHeaders(hdr, bin)
			m := &broker.Message{Body: body, Headers: h}
			var env *envelope.Envelope
			if e, err := broker.EnvelopeOf(m); err == nil {
				env = e
			}
			batch = append(batch, todo{id, indexOf(m, env)})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("mysql: indexing the records written before schema version 2: %w", err)
		}
		if len(batch) == 0 {
			return nil
		}
		err = d.tx(ctx, sql.LevelReadCommitted, func(tx *sql.Tx) error {
			for _, t := range batch {
				c := t.ix
				if _, err := tx.ExecContext(ctx, `UPDATE `+d.table+` SET vertex_count = ?, geometry_bytes = ?, attempts = ?,
					dead_lettered_nanos = ?, source = ?, summary = ?, attrs = ?, indexed = TRUE WHERE id = ?`,
					c.vertices, c.geomBytes, c.attempts, c.nanos, c.source, c.summary, c.attrs, t.id); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO `+d.search+` (id, search) VALUES (?, ?) ON DUPLICATE KEY UPDATE search = VALUES(search)`,
					t.id, c.search); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("mysql: indexing the records written before schema version 2: %w", err)
		}
		after = batch[len(batch)-1].id
		d.wrote(ctx, len(batch))
	}
}

// Publish inserts m as one row in a transaction of its own, and returns
// once MySQL committed it. The outcome it reports is certain: a failure
// before COMMIT was sent leaves nothing (the transaction cannot commit
// without it), and a COMMIT whose answer was lost is checked (see
// [driver.certain]).
func (d *driver) Publish(ctx context.Context, destination string, m *broker.Message) error {
	if err := d.writable("publish"); err != nil {
		return err
	}
	r, err := d.prepare(destination, m)
	if err != nil {
		return err
	}
	var id int64
	err = d.certain(ctx, "publish to "+strconv.Quote(destination),
		func(ctx context.Context, tx *sql.Tx) (err error) {
			id, err = d.insert(ctx, tx, r)
			return err
		},
		func(ctx context.Context, tx *sql.Tx) (bool, error) {
			var n int
			err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+d.table+` WHERE id = ? AND destination = ? LOCK IN SHARE MODE`,
				id, destination).Scan(&n)
			return n == 1, err
		})
	if err == nil {
		d.wrote(ctx, 1)
	}
	return err
}

// errNoChange is returned by a certain write's exec when it changed
// nothing: it rolls back and reports that.
var errNoChange = errors.New("no row changed")

// certain runs exec in a transaction and commits it, so that the outcome
// it reports is the one MySQL had:
//
//   - exec fails, or is interrupted (the context's deadline, readTimeout,
//     a broken connection): the transaction never commits — MySQL rolls
//     it back when the connection ends — so the error says nothing was
//     written, and does not wrap a context error, whose
//     [broker.ErrOutcomeUnknown] would be a lie;
//   - COMMIT fails: it may or may not have committed. verify then reads
//     the row on another connection with a locking read (LOCK IN SHARE
//     MODE), which waits for the interrupted transaction to commit or roll
//     back, and reports which; only if that check fails too is the error
//     [broker.ErrOutcomeUnknown].
//
// go-sql-driver interrupts a statement whose context ends by closing its
// connection; the portable store passes Publish and Ack a context without
// the caller's cancellation, bounded by StoreOptions.WriteTimeout, and
// COMMIT itself is not watched by the driver at all, so only a broken
// connection (or a readTimeout shorter than a commit) can interrupt it.
func (d *driver) certain(ctx context.Context, op string, exec func(context.Context, *sql.Tx) error, verify func(context.Context, *sql.Tx) (bool, error)) error {
	var cerr error // the COMMIT's error, once one failed in a way that leaves its outcome open
	err := txretry.Do(ctx, schema.Kind, func(ctx context.Context, _ txretry.Attempt) error {
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return notWritten(op, err)
		}
		if err := exec(ctx, tx); err != nil {
			_ = tx.Rollback()
			if schema.Kind(err) == txretry.Conflict {
				return err // rolled back: Do tries again
			}
			return notWritten(op, err)
		}
		err = tx.Commit()
		if err != nil && schema.Kind(err) != txretry.Conflict {
			cerr = err
			return nil // checked below
		}
		return err // nil, or a COMMIT the server refused (rolled back): again
	}, nil)
	if err != nil {
		if schema.Kind(err) == txretry.Conflict {
			return notWritten(op, err)
		}
		return err
	}
	if cerr == nil {
		return nil
	}
	// The COMMIT was sent, or may have been: find out.
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), verifyTimeout)
	defer cancel()
	vtx, err := d.db.BeginTx(vctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err == nil {
		var done bool
		done, err = verify(vctx, vtx)
		_ = vtx.Rollback()
		if err == nil {
			if done {
				return nil // committed; only the answer was lost
			}
			return notWritten(op, cerr)
		}
	}
	return fmt.Errorf("mysql: %s: %w: commit failed (%w) and checking its outcome failed too (%v)", op, broker.ErrOutcomeUnknown, cerr, err)
}

// verifyTimeout bounds the check of a COMMIT whose answer was lost.
const verifyTimeout = 10 * time.Second

// notWritten reports a write that certainly did not happen. A context
// error is not wrapped (formatted only): the portable store would take it
// for an interrupted write of unknown outcome.
func notWritten(op string, err error) error {
	if errors.Is(err, errNoChange) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("mysql: %s: not committed: interrupted before COMMIT (%v)", op, err)
	}
	return fmt.Errorf("mysql: %s: not committed: %w", op, err)
}

const fetchSQL = `SELECT id, msg_key, headers, binary_headers, body, deliveries FROM {t}
WHERE destination = ? AND acked_at IS NULL AND (lease_until IS NULL OR lease_until <= UTC_TIMESTAMP(6)){filter}
ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED`

// Fetch leases up to max records in one READ COMMITTED transaction: a
// SELECT … FOR UPDATE SKIP LOCKED takes the oldest rows no other fetcher
// holds (locked or under a live lease), in id order, and an UPDATE gives
// them one fresh lease token and lease_until = UTC_TIMESTAMP(6) + LeaseTTL
// on the database's clock. Every filter field is a SQL condition.
func (d *driver) Fetch(ctx context.Context, destination string, f broker.Filter, max int) ([]*broker.Record, error) {
	if err := d.writable("fetch"); err != nil {
		return nil, err
	}
	w := d.where(f)
	if w.none {
		return nil, nil
	}
	token := newToken()
	// The lease starts on the database's clock after this moment.
	expires := time.Now().Add(d.ttl)
	var out []*broker.Record
	err := d.tx(ctx, sql.LevelReadCommitted, func(tx *sql.Tx) error {
		out = out[:0]
		args := append(append([]any{destination}, w.args...), max)
		rows, err := tx.QueryContext(ctx, strings.Replace(d.render(fetchSQL), "{filter}", w.sql, 1), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id       uint64
				key      []byte
				headers  []byte
				binary   []byte
				body     []byte
				delivers int
			)
			if err := rows.Scan(&id, &key, &headers, &binary, &body, &delivers); err != nil {
				return err
			}
			h, err := decodeHeaders(headers, binary)
			if err != nil {
				return fmt.Errorf("record %d: %w", id, err)
			}
			if body == nil {
				body = []byte{}
			}
			out = append(out, &broker.Record{
				ID: strconv.FormatUint(id, 10), Destination: destination,
				Message:    &broker.Message{Key: key, Body: body, Headers: h, DeliveryAttempt: delivers + 1},
				Deliveries: delivers + 1, Lease: hex.EncodeToString(token[:]), LeaseExpires: expires,
			})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		ids := make([]any, 0, len(out)+2)
		ids = append(ids, token[:], d.ttl.Microseconds())
		for _, r := range out {
			id, _ := strconv.ParseUint(r.ID, 10, 64) // formatted above
			ids = append(ids, id)
		}
		_, err = tx.ExecContext(ctx, d.render(`UPDATE {t} SET lease_token = ?, lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
			deliveries = deliveries + 1 WHERE id IN (`+placeholders(len(out))+`)`), ids...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: fetch from %q: %w", destination, err)
	}
	return out, nil
}

// tx runs fn in a transaction at the given isolation level, again
// (with a bounded backoff that honours ctx) when InnoDB rolled it back to
// resolve a conflict: a deadlock victim, a lock-wait timeout.
func (d *driver) tx(ctx context.Context, level sql.IsolationLevel, fn func(*sql.Tx) error) error {
	return txretry.Do(ctx, schema.Kind, func(ctx context.Context, _ txretry.Attempt) error {
		tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}, nil)
}

const ackSQL = `UPDATE {t} SET acked_at = UTC_TIMESTAMP(6), lease_until = NULL
WHERE id = ? AND destination = ? AND lease_token = ? AND acked_at IS NULL`

const releaseSQL = `UPDATE {t} SET lease_token = NULL, lease_until = NULL
WHERE id = ? AND destination = ? AND lease_token = ? AND acked_at IS NULL`

const renewSQL = `UPDATE {t} SET lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE id = ? AND destination = ? AND lease_token = ? AND acked_at IS NULL`

// Renew sets r's lease_until to LeaseTTL from now on the database's
// clock, in one statement whose WHERE holds r's lease token: it succeeds
// while the token is still the row's and the row is not acknowledged —
// after lease_until too, as long as no one fetched the row since — and
// otherwise fails with an error wrapping [broker.ErrLeaseLost]. Conflicts
// and a lost answer are tried again (the statement can run twice).
func (d *driver) Renew(ctx context.Context, r *broker.Record) error {
	if err := d.writable("renew"); err != nil {
		return err
	}
	id, token, err := leaseOf(r)
	if err != nil {
		return err
	}
	expires := time.Now().Add(d.ttl)
	var n int64
	err = txretry.Do(ctx, schema.Kind, func(ctx context.Context, _ txretry.Attempt) error {
		res, err := d.db.ExecContext(ctx, d.renewSQL, max(d.ttl.Microseconds(), 1), id, r.Destination, token)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	}, &txretry.Options{RetryUnknown: true})
	if err != nil {
		return fmt.Errorf("mysql: renew %s/%s: %w", r.Destination, r.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("mysql: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	r.LeaseExpires = expires
	return nil
}

// Ack marks r replayed (acked_at; the row is kept until Purge). It
// succeeds while r's lease token is still the row's — after lease_until
// too, as long as no one fetched the row since — and otherwise fails with
// an error wrapping [broker.ErrLeaseLost]. Its outcome is certain as
// Publish's is: the token stays on the acknowledged row, so a lost COMMIT
// answer is checked.
func (d *driver) Ack(ctx context.Context, r *broker.Record) error {
	if err := d.writable("ack"); err != nil {
		return err
	}
	id, token, err := leaseOf(r)
	if err != nil {
		return err
	}
	err = d.certain(ctx, "ack "+r.Destination+"/"+r.ID,
		func(ctx context.Context, tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, d.ackSQL, id, r.Destination, token)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				return errors.Join(errNoChange, err)
			}
			return nil
		},
		func(ctx context.Context, tx *sql.Tx) (bool, error) {
			var n int
			err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+d.table+` WHERE id = ? AND lease_token = ? AND acked_at IS NOT NULL LOCK IN SHARE MODE`,
				id, token).Scan(&n)
			return n == 1, err
		})
	if errors.Is(err, errNoChange) {
		return fmt.Errorf("mysql: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	if err == nil {
		d.wrote(ctx, 1)
	}
	return err
}

// Release makes r fetchable again at once; it fails with an error
// wrapping [broker.ErrLeaseLost] when r's lease was lost.
func (d *driver) Release(ctx context.Context, r *broker.Record) error {
	if err := d.writable("release"); err != nil {
		return err
	}
	id, token, err := leaseOf(r)
	if err != nil {
		return err
	}
	var n int64
	err = txretry.Do(ctx, schema.Kind, func(ctx context.Context, a txretry.Attempt) error {
		res, err := d.db.ExecContext(ctx, d.releaseSQL, id, r.Destination, token)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err == nil && n == 0 && a.Uncertain {
			n = 1 // the lost attempt released it, or the lease is gone: not held either way
		}
		return err
	}, &txretry.Options{RetryUnknown: true})
	if err != nil {
		return fmt.Errorf("mysql: release %s/%s: %w", r.Destination, r.ID, err)
	}
	if n != 1 {
		return fmt.Errorf("mysql: record %s/%s: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	return nil
}

func leaseOf(r *broker.Record) (uint64, []byte, error) {
	id, err := strconv.ParseUint(r.ID, 10, 64)
	token, terr := hex.DecodeString(r.Lease)
	if err != nil || terr != nil || len(token) != 16 {
		return 0, nil, fmt.Errorf("mysql: record %s/%s was not leased from this store: %w", r.Destination, r.ID, broker.ErrLeaseLost)
	}
	return id, token, nil
}

func newToken() [16]byte {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return b
}

func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// tooLarge reports a row that the server's max_allowed_packet cannot
// carry.
func (d *driver) tooLarge(destination string, size int) error {
	return &classify.TooLargeError{What: "message with its key and headers", Destination: destination, Size: size,
		Limit: d.packet - rowOverhead, Hint: "the server's max_allowed_packet"}
}
