// Package pgclaims is a [replay.Claims] store in a PostgreSQL table, over
// the caller's *pgxpool.Pool (pgx v5): the consumer's side of geodlq's
// exactly-once, shared by every worker that can reach the database. It
// passes replay/claimstest with the in-memory and Redis stores.
//
// One row per idempotency key:
//
//	key         bytea PRIMARY KEY  the key, byte for byte (any string)
//	token       text               the live claim's fencing token, or NULL
//	done_token  text               the token that completed the key, or NULL (since migration 2)
//	lease_until timestamptz        when the live claim lapses
//	done_at     timestamptz        when the key was completed, or NULL
//	claims      integer            how many claims were granted
//	updated_at  timestamptz        last change
//
// # Semantics
//
// Claim is one INSERT … ON CONFLICT DO UPDATE … WHERE: it inserts the key,
// or takes over a row that is neither done nor under a live lease, with a
// fresh random token and lease_until = now() + ttl on the database's clock
// — workers need no synchronised clocks, and the row lock makes exactly one
// of any number of concurrent claimants win. When it takes nothing, a
// second read says whether the key is done or in progress.
//
// A statement the server rolled back to resolve a conflict (a
// serialization failure, a deadlock, a lock timeout: SQLSTATE 40001,
// 40P01, 55P03) is retried with a bounded backoff that honours ctx
// (package broker/txretry), and so is one whose answer was lost. Complete
// is retried until its outcome is known: a completion whose answer was
// lost is found by a later attempt, because the done row keeps the token
// that completed it (done_token) — so a side effect that ran is never
// left unrecorded while the database can be reached before ctx ends.
//
// The token fences: Complete and Release change the row only while its
// token is still the caller's, so a holder whose lease expired and was
// taken over gets an error wrapping [broker.ErrLeaseLost]. Complete succeeds after expiry as
// long as nobody took over, as the Claims contract asks. Completion sets
// done_at, which is final: the key then claims as [replay.StatusDone]
// forever (or until [Claims.PurgeDone] deletes it — after which the key
// can run again, so keep done keys longer than any event can be
// replayed).
//
// Durability is the server's synchronous_commit ("on" by default): a
// completed key survives a crash once Complete returns.
//
// # Migrations
//
// [Claims.Migrate] (or Options.Create) creates the schema and table and
// records applied [Migrations] in {table}_migrations; it is idempotent and
// safe to run concurrently.
//
// # Connections
//
// The store opens no connection of its own: it works on the caller's
// pool. Give that pool a connect timeout (connect_timeout in the DSN, or
// ConnConfig.ConnectTimeout): without one, pgxpool waits two minutes for
// a server that accepts connections and never answers.
//
// # As
//
// [Claims.As] sets a **pgxpool.Pool to the store's pool, and
// [Claims.Table] names the table for your own SQL.
package pgclaims

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/txretry"
	"github.com/geodlq/geodlq/pgmigrate"
	"github.com/geodlq/geodlq/replay"
)

// Defaults of [Options].
const (
	defaultSchema = "geodlq"
	defaultTable  = "idempotency_claims"
)

// Options configures a [Claims]. Nil means defaults.
type Options struct {
	// Schema is the PostgreSQL schema holding the table (created by
	// Create). Lower-case letters, digits and underscores, at most 63
	// bytes. Default "geodlq".
	Schema string
	// Table is the claims table's name; the {Table}_migrations table is
	// named after it. Lower-case letters, digits and underscores, at most
	// 40 bytes. Default "idempotency_claims".
	Table string
	// Create runs [Claims.Migrate] in New: it creates the schema and table
	// when the database lacks them and applies the steps an older table
	// lacks (the name mysqlclaims and the stores give this). Default
	// false: run migrations as a deployment step.
	Create bool
}

// Claims is a [replay.Claims] store in PostgreSQL. It is safe for
// concurrent use by any number of goroutines and processes.
type Claims struct {
	pool   *pgxpool.Pool
	schema string
	name   string
	table  string

	claimSQL, stateSQL, completeSQL, doneSQL, releaseSQL string
}

var _ replay.Claims = (*Claims)(nil)

// New returns a claims store on pool, which the caller keeps owning. It
// performs no I/O unless opts.Create is set; ctx bounds the migration.
// Invalid options are refused with an error wrapping
// [broker.ErrInvalidArgument].
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Claims, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgclaims: nil pool: %w", broker.ErrInvalidArgument)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = defaultSchema
	}
	if o.Table == "" {
		o.Table = defaultTable
	}
	if err := pgmigrate.CheckIdent("pgclaims", "schema", o.Schema, 63); err != nil {
		return nil, fmt.Errorf("%w: %w", err, broker.ErrInvalidArgument)
	}
	if err := pgmigrate.CheckIdent("pgclaims", "table", o.Table, 40); err != nil {
		return nil, fmt.Errorf("%w: %w", err, broker.ErrInvalidArgument)
	}
	c := &Claims{pool: pool, schema: o.Schema, name: o.Table, table: pgx.Identifier{o.Schema, o.Table}.Sanitize()}
	r := strings.NewReplacer("{t}", c.table)
	c.claimSQL = r.Replace(claimSQL)
	c.stateSQL = r.Replace(stateSQL)
	c.completeSQL = r.Replace(completeSQL)
	c.doneSQL = r.Replace(doneSQL)
	c.releaseSQL = r.Replace(releaseSQL)
	if o.Create {
		if err := c.Migrate(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Table returns the quoted, schema-qualified table name:
// "geodlq"."idempotency_claims" by default.
func (c *Claims) Table() string { return c.table }

// As sets *i to the store's pool when i is a **pgxpool.Pool, and reports
// whether it did.
func (c *Claims) As(i any) bool {
	if p, ok := i.(**pgxpool.Pool); ok {
		*p = c.pool
		return true
	}
	return false
}

const claimSQL = `
INSERT INTO {t} AS c (key, token, lease_until, claims, updated_at)
VALUES ($1, $2, now() + $3::bigint * interval '1 microsecond', 1, now())
ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, lease_until = EXCLUDED.lease_until,
	claims = c.claims + 1, updated_at = now()
WHERE c.done_at IS NULL AND (c.token IS NULL OR c.lease_until <= now())
RETURNING lease_until`

// stateSQL reads a key that Claim could not take: done, or under a live
// lease, or (raced) free again.
const stateSQL = `
SELECT done_at IS NOT NULL, token IS NOT NULL AND lease_until > now(), token IS NOT DISTINCT FROM $2,
	COALESCE(lease_until, now()) FROM {t} WHERE key = $1`

// completeSQL keeps the token in done_token, so that a Complete whose
// answer was lost can tell, by doneSQL, that it was its own.
const completeSQL = `
UPDATE {t} SET done_at = now(), done_token = token, token = NULL, lease_until = NULL, updated_at = now()
WHERE key = $1 AND token = $2 AND done_at IS NULL`

const doneSQL = `SELECT done_at IS NOT NULL AND done_token IS NOT DISTINCT FROM $2 FROM {t} WHERE key = $1`

const releaseSQL = `
UPDATE {t} SET token = NULL, lease_until = NULL, updated_at = now()
WHERE key = $1 AND token = $2 AND done_at IS NULL`

// Claim implements [replay.Claims]. The lease is timed by the database's
// clock; Lease.ExpiresAt is that clock's reading.
func (c *Claims) Claim(ctx context.Context, key string, ttl time.Duration) (replay.Lease, replay.Status, error) {
	if err := ctx.Err(); err != nil {
		return replay.Lease{}, 0, err
	}
	if ttl <= 0 {
		return replay.Lease{}, 0, fmt.Errorf("pgclaims: claim ttl must be positive, got %v: %w", ttl, broker.ErrInvalidArgument)
	}
	us := max(ttl.Microseconds(), 1)
	// One token for every attempt, so that an attempt after a lost
	// answer reads its own claim back as mine.
	token := newToken()
	var (
		lease  replay.Lease
		status replay.Status
	)
	err := txretry.Do(ctx, txretry.KindOf, func(ctx context.Context, _ txretry.Attempt) error {
		// A key freed between the INSERT and the read is tried again; a
		// few rounds settle any race, and then it is reported in
		// progress.
		for range 3 {
			var until time.Time
			err := c.pool.QueryRow(ctx, c.claimSQL, []byte(key), token, us).Scan(&until)
			if err == nil {
				lease, status = replay.Lease{Key: key, Token: token, ExpiresAt: until}, replay.StatusAcquired
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			var done, live, mine bool
			err = c.pool.QueryRow(ctx, c.stateSQL, []byte(key), token).Scan(&done, &live, &mine, &until)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				continue // purged meanwhile
			case err != nil:
				return err
			case done:
				status = replay.StatusDone
				return nil
			case live && mine:
				// An earlier attempt claimed it; only its answer was lost.
				lease, status = replay.Lease{Key: key, Token: token, ExpiresAt: until}, replay.StatusAcquired
				return nil
			case live:
				status = replay.StatusInProgress
				return nil
			}
		}
		status = replay.StatusInProgress
		return nil
	}, &txretry.Options{RetryUnknown: true})
	if err != nil {
		return replay.Lease{}, 0, fmt.Errorf("pgclaims: claiming %q: %w", key, err)
	}
	return lease, status, nil
}

// Complete implements [replay.Claims]. It is retried — deadlocks,
// lock timeouts, serialization failures, a lost answer — until its
// outcome is known or ctx ends: after an attempt whose answer was lost, a
// later attempt that finds the key done under this lease's token knows
// that the lost one completed it.
func (c *Claims) Complete(ctx context.Context, l replay.Lease) error {
	return c.settle(ctx, l, c.completeSQL, "completing", true)
}

// Release implements [replay.Claims]. Conflicts and a lost answer are
// retried; after a lost answer, a lease no longer held counts as
// released.
func (c *Claims) Release(ctx context.Context, l replay.Lease) error {
	return c.settle(ctx, l, c.releaseSQL, "releasing", false)
}

// errNoChange: the settling statement matched no row.
var errNoChange = errors.New("no row under this lease")

func (c *Claims) settle(ctx context.Context, l replay.Lease, q, op string, complete bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.Token == "" {
		return fmt.Errorf("pgclaims: %s %q: %w", op, l.Key, broker.ErrLeaseLost)
	}
	opts := &txretry.Options{RetryUnknown: true}
	if complete {
		opts.Attempts = -1 // until the outcome is known, or ctx ends
	}
	err := txretry.Do(ctx, txretry.KindOf, func(ctx context.Context, a txretry.Attempt) error {
		tag, err := c.pool.Exec(ctx, q, []byte(l.Key), l.Token)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
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
		err = c.pool.QueryRow(ctx, c.doneSQL, []byte(l.Key), l.Token).Scan(&mine)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return errNoChange
		case err != nil:
			return err
		case mine:
			return nil // the lost attempt completed the key
		}
		return errNoChange
	}, opts)
	if errors.Is(err, errNoChange) {
		return fmt.Errorf("pgclaims: %s %q: %w", op, l.Key, broker.ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("pgclaims: %s %q: %w", op, l.Key, err)
	}
	return nil
}

// PurgeDone deletes keys completed before t and returns how many. A purged
// key can be claimed and run again, so keep done keys longer than any
// event can be redelivered or replayed.
func (c *Claims) PurgeDone(ctx context.Context, before time.Time) (int64, error) {
	tag, err := c.pool.Exec(ctx, `DELETE FROM `+c.table+` WHERE done_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("pgclaims: purge: %w", err)
	}
	return tag.RowsAffected(), nil
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
