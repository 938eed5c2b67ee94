// Package mysqlclaims is a [replay.Claims] store in a MySQL or MariaDB
// table, over the caller's *sql.DB (github.com/go-sql-driver/mysql): the
// consumer's side of geodlq's exactly-once, shared by every worker that
// can reach the database. It passes replay/claimstest with the in-memory,
// Redis and PostgreSQL stores, and lives beside broker/mysql so that a
// service keeping its dead letters in MySQL needs no second server for
// its claims.
//
// One InnoDB row per idempotency key:
//
//	key_hash    BINARY(32) PRIMARY KEY  SHA-256 of the key: keys of any length, compared byte for byte
//	claim_key   MEDIUMBLOB              the key, verbatim (for your own queries)
//	token       BINARY(16)              the live claim's fencing token (on a done key, the completing one), or NULL
//	lease_until DATETIME(6)             when the live claim lapses (UTC, the database's clock)
//	done_at     DATETIME(6)             when the key was completed, or NULL
//	claims      INT UNSIGNED            how many claims were granted
//	updated_at  DATETIME(6)             last change
//
// # Semantics
//
// Claim is one short transaction: an INSERT … ON DUPLICATE KEY UPDATE
// makes sure the key has a row and takes its lock, an UPDATE whose WHERE
// says the row is neither done nor under a live lease takes it over with
// a fresh random token and lease_until = UTC_TIMESTAMP(6) + ttl on the
// database's clock, and a read says what happened. Workers need no
// synchronised clocks, and InnoDB's row lock makes exactly one of any
// number of concurrent claimants win.
//
// InnoDB resolves lock conflicts by rolling a transaction back (a deadlock
// victim, 1213; a lock-wait timeout, 1205): every operation is retried
// then, with a bounded backoff that honours ctx (package
// broker/txretry). Complete is retried until its outcome is known: a
// completion whose answer was lost (the connection broke after the
// UPDATE was sent) is found by a later attempt, because the done row
// keeps the token that completed it — so a side effect that ran is never
// left unrecorded while the store can be reached before ctx ends.
//
// The token fences: Complete and Release change the row only while its
// token is still the caller's, so a holder whose lease expired and was
// taken over gets [broker.ErrLeaseLost]. Complete succeeds after expiry
// as long as nobody took over, as the Claims contract asks. Completion
// sets done_at, which is final: the key then claims as
// [replay.StatusDone] until [Claims.PurgeDone] deletes it (after which
// the key can run again, so keep done keys longer than any event can be
// replayed).
//
// Durability is InnoDB's: with innodb_flush_log_at_trx_commit=1 (the
// default) a completed key survives a crash once Complete returns.
//
// # Schema
//
// [New] creates the table when the database lacks it and opts.Create is
// set, under the same named lock and migrations bookkeeping
// ({table}_migrations) as broker/mysql.
//
// # As
//
// [Claims.As] sets a **sql.DB to the store's pool.
package mysqlclaims

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/mysql/internal/schema"
	"github.com/geodlq/geodlq/broker/txretry"
	"github.com/geodlq/geodlq/replay"
)

// DefaultTable is the claims table's name.
const DefaultTable = "geodlq_idempotency_claims"

// Options configures [New]. Nil means defaults.
type Options struct {
	// Table is the claims table's name, in the connection's database; its
	// bookkeeping table is Table + "_migrations". Lower-case letters,
	// digits and underscores, at most 48 bytes. Default
	// "geodlq_idempotency_claims".
	Table string
	// Create creates the table when the database lacks it. Without it,
	// New fails with an error wrapping [broker.ErrNoStore] on a database
	// without the table.
	Create bool
}

// Claims is a [replay.Claims] store in MySQL. It is safe for concurrent
// use by any number of goroutines and processes.
type Claims struct {
	db    *sql.DB
	table string // quoted

	insertSQL, claimSQL, readSQL, completeSQL, doneSQL, releaseSQL string
}

var _ replay.Claims = (*Claims)(nil)

var migrations = []schema.Step{{
	Version: 1,
	Name:    "claims table",
	Statements: []string{`
CREATE TABLE {t} (
	key_hash    BINARY(32)   NOT NULL,
	claim_key   MEDIUMBLOB   NOT NULL,
	token       BINARY(16)   NULL,
	lease_until DATETIME(6)  NULL,
	done_at     DATETIME(6)  NULL,
	claims      INT UNSIGNED NOT NULL DEFAULT 0,
	updated_at  DATETIME(6)  NOT NULL,
	PRIMARY KEY (key_hash),
	KEY done (done_at)
) ENGINE=InnoDB COMMENT='geodlq idempotency claims (broker/mysql/mysqlclaims): one row per idempotency key'`},
}}

// New returns a claims store in a table of db's database; db stays the
// caller's. It brings the table up to date under a named lock, creating
// it only with opts.Create.
func New(ctx context.Context, db *sql.DB, opts *Options) (*Claims, error) {
	if db == nil {
		return nil, fmt.Errorf("mysqlclaims: nil *sql.DB: %w", broker.ErrInvalidArgument)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := schema.CheckIdent("mysqlclaims", "table", o.Table, 48); err != nil {
		return nil, err
	}
	c := &Claims{db: db, table: schema.Quote(o.Table)}
	r := strings.NewReplacer("{t}", c.table)
	if err := schema.Migrate(ctx, db, schema.Target{Prefix: "mysqlclaims", Table: o.Table, Render: r.Replace}, migrations, o.Create); err != nil {
		return nil, err
	}
	c.insertSQL = r.Replace(insertSQL)
	c.claimSQL = r.Replace(claimSQL)
	c.readSQL = r.Replace(readSQL)
	c.completeSQL = r.Replace(completeSQL)
	c.doneSQL = r.Replace(doneSQL)
	c.releaseSQL = r.Replace(releaseSQL)
	return c, nil
}

// As sets *target to the store's pool when target is a **sql.DB, and
// reports whether it did.
func (c *Claims) As(target any) bool {
	if p, ok := target.(**sql.DB); ok {
		*p = c.db
		return true
	}
	return false
}

// insertSQL makes sure the key has a row, unclaimed when new, and holds
// its row lock (ON DUPLICATE KEY takes an exclusive one, so concurrent
// claimants queue instead of deadlocking over shared locks).
const insertSQL = `
INSERT INTO {t} (key_hash, claim_key, updated_at) VALUES (?, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE key_hash = key_hash`

// claimSQL grants the claim when the key is neither done nor under a live
// lease; its WHERE decides, on the locked row.
const claimSQL = `
UPDATE {t} SET token = ?, lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
	claims = claims + 1, updated_at = UTC_TIMESTAMP(6)
WHERE key_hash = ? AND done_at IS NULL AND (token IS NULL OR lease_until <= UTC_TIMESTAMP(6))`

// readSQL reads the row the claim left, in the claim's transaction.
const readSQL = `
SELECT token <=> ?, done_at IS NOT NULL, COALESCE(lease_until > UTC_TIMESTAMP(6), FALSE),
	COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', lease_until), 0)
FROM {t} WHERE key_hash = ?`

// completeSQL keeps the token on the done row, so that a Complete whose
// answer was lost can tell, by doneSQL, that it was its own.
const completeSQL = `
UPDATE {t} SET done_at = UTC_TIMESTAMP(6), lease_until = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE key_hash = ? AND token = ? AND done_at IS NULL`

const doneSQL = `SELECT done_at IS NOT NULL AND token <=> ? FROM {t} WHERE key_hash = ?`

const releaseSQL = `
UPDATE {t} SET token = NULL, lease_until = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE key_hash = ? AND token = ? AND done_at IS NULL`

// Claim implements [replay.Claims]. The lease is timed by the database's
// clock; Lease.ExpiresAt is that clock's reading.
func (c *Claims) Claim(ctx context.Context, key string, ttl time.Duration) (replay.Lease, replay.Status, error) {
	if err := ctx.Err(); err != nil {
		return replay.Lease{}, 0, err
	}
	if ttl <= 0 {
		return replay.Lease{}, 0, fmt.Errorf("mysqlclaims: claim ttl must be positive, got %v: %w", ttl, broker.ErrInvalidArgument)
	}
	h := sha256.Sum256([]byte(key))
	var token [16]byte
	_, _ = rand.Read(token[:])
	var (
		mine, done, live bool
		untilUS          int64
	)
	// The token is the same on every attempt, so a retry after a lost
	// COMMIT answer reads its own claim back as mine.
	err := txretry.Do(ctx, schema.Kind, func(ctx context.Context, _ txretry.Attempt) error {
		return c.inTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, c.insertSQL, h[:], []byte(key)); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, c.claimSQL, token[:], max(ttl.Microseconds(), 1), h[:]); err != nil {
				return err
			}
			return tx.QueryRowContext(ctx, c.readSQL, token[:], h[:]).Scan(&mine, &done, &live, &untilUS)
		})
	}, &txretry.Options{RetryUnknown: true})
	switch {
	case err != nil:
		return replay.Lease{}, 0, fmt.Errorf("mysqlclaims: claiming %q: %w", key, err)
	case mine && !done:
		return replay.Lease{Key: key, Token: hex.EncodeToString(token[:]), ExpiresAt: time.UnixMicro(untilUS).UTC()}, replay.StatusAcquired, nil
	case done:
		return replay.Lease{}, replay.StatusDone, nil
	default:
		return replay.Lease{}, replay.StatusInProgress, nil
	}
}

func (c *Claims) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := c.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Complete implements [replay.Claims]. It is retried — deadlocks,
// lock-wait timeouts, a lost answer — until its outcome is known or ctx
// ends: after an attempt whose answer was lost, a later attempt that
// finds the key done under this lease's token knows that the lost one
// completed it.
func (c *Claims) Complete(ctx context.Context, l replay.Lease) error {
	return c.settle(ctx, l, c.completeSQL, "completing", true)
}

// Release implements [replay.Claims]. Deadlocks, lock-wait timeouts and a
// lost answer are retried; after a lost answer, a lease no longer held
// counts as released.
func (c *Claims) Release(ctx context.Context, l replay.Lease) error {
	return c.settle(ctx, l, c.releaseSQL, "releasing", false)
}

// errNoChange: the settling statement matched no row.
var errNoChange = errors.New("no row under this lease")

func (c *Claims) settle(ctx context.Context, l replay.Lease, q, op string, complete bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	token, err := hex.DecodeString(l.Token)
	if err != nil || len(token) != 16 {
		return fmt.Errorf("mysqlclaims: %s %q: %w", op, l.Key, broker.ErrLeaseLost)
	}
	h := sha256.Sum256([]byte(l.Key))
	opts := &txretry.Options{RetryUnknown: true}
	if complete {
		opts.Attempts = -1 // until the outcome is known, or ctx ends
	}
	err = txretry.Do(ctx, schema.Kind, func(ctx context.Context, a txretry.Attempt) error {
		res, err := c.db.ExecContext(ctx, q, h[:], token)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 1 {
			return nil
		}
		if !a.Uncertain {
			return errNoChange
		}
		// An earlier attempt's answer was lost: find out what it did.
		if !complete {
			return nil // released, or taken over since: either way no longer held
		}
		var mine bool
		err = c.db.QueryRowContext(ctx, c.doneSQL, token, h[:]).Scan(&mine)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return errNoChange
		case err != nil:
			return err
		case mine:
			return nil // the lost attempt completed the key
		}
		return errNoChange
	}, opts)
	if errors.Is(err, errNoChange) {
		return fmt.Errorf("mysqlclaims: %s %q: %w", op, l.Key, broker.ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("mysqlclaims: %s %q: %w", op, l.Key, err)
	}
	return nil
}

// PurgeDone deletes keys completed before t and returns how many. A purged
// key can be claimed and run again, so keep done keys longer than any
// event can be redelivered or replayed.
func (c *Claims) PurgeDone(ctx context.Context, before time.Time) (int64, error) {
	res, err := c.db.ExecContext(ctx, `DELETE FROM `+c.table+` WHERE done_at < ?`, before.UTC().Format("2006-01-02 15:04:05.999999"))
	if err != nil {
		return 0, fmt.Errorf("mysqlclaims: purge: %w", err)
	}
	return res.RowsAffected()
}
