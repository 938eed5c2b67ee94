// Package schema applies the versioned schema migrations of geodlq's
// MySQL/MariaDB tables (broker/mysql, broker/mysql/mysqlclaims): the
// MySQL counterpart of package pgmigrate (github.com/geodlq/geodlq/pgmigrate).
//
// A table's steps are numbered from 1 without gaps. [Migrate] applies the
// ones a database lacks, each once and in order, under the server-wide
// named lock [LockName] (GET_LOCK: MySQL has no transactional DDL, so the
// lock, not a transaction, keeps concurrent migrations apart), and records
// each applied step in the bookkeeping table {table}_migrations of the
// same database. Each step is a list of statements that MySQL runs
// atomically one by one (a CREATE TABLE with its indexes is one
// statement), on one connection that is closed afterwards, not returned
// to the pool (a step may LOCK TABLES and UNLOCK them — a failed step's
// tables are unlocked — or set its session's isolation level). A step cut short (a crash, a lost
// connection) is run again from its first statement, so a step of more
// than one statement must be safe to re-run. It is idempotent and safe to run concurrently from several
// processes. [Version] reads how far a table has got without writing.
package schema

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/txretry"
)

// LockName is the GET_LOCK name that serialises every geodlq MySQL
// migration on a server.
const LockName = "geodlq-migrate"

// lockWait bounds the wait for [LockName] when ctx has no deadline.
const lockWait = 5 * time.Minute

// Step is one migration.
type Step struct {
	// Version numbers the step, from 1, without gaps.
	Version int
	// Name says what the step does; it is recorded with the version.
	Name string
	// Statements run in order, each after [Target.Render].
	Statements []string
}

// Target names the table whose schema is migrated.
type Target struct {
	// Prefix starts every error message, e.g. "mysql".
	Prefix string
	// Table is the bare table name; the bookkeeping table is Table +
	// "_migrations".
	Table string
	// Render substitutes the adapter's placeholders in a statement. Nil
	// runs it as is.
	Render func(sql string) string
}

// Migrations is the bookkeeping table's name.
func (t Target) Migrations() string { return t.Table + "_migrations" }

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// CheckIdent validates a table name (what says which): lower-case letters,
// digits and underscores, not starting with a digit, at most max bytes.
// Errors start with prefix and wrap [broker.ErrInvalidArgument].
func CheckIdent(prefix, what, s string, max int) error {
	if !identRE.MatchString(s) || len(s) > max {
		return fmt.Errorf("%s: %s %q must match [a-z_][a-z0-9_]* and be at most %d bytes: %w", prefix, what, s, max, broker.ErrInvalidArgument)
	}
	return nil
}

// Quote returns a checked identifier in backticks.
func Quote(ident string) string { return "`" + strings.ReplaceAll(ident, "`", "``") + "`" }

// state reads which of the table and its bookkeeping table exist.
func state(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, t Target) (table, migrations bool, err error) {
	rows, err := q.QueryContext(ctx, `SELECT TABLE_NAME FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?, ?)`, t.Table, t.Migrations())
	if err != nil {
		return false, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return false, false, err
		}
		switch name {
		case t.Table:
			table = true
		case t.Migrations():
			migrations = true
		}
	}
	return table, migrations, rows.Err()
}

func maxVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, t Target) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+Quote(t.Migrations())).Scan(&v)
	return v, err
}

// Version returns the version t's table is at, reading only. A database
// without the table, or whose table has no bookkeeping table (it is not a
// geodlq table), is an error wrapping [broker.ErrNoStore]; so is a
// connection without a database selected.
func Version(ctx context.Context, db *sql.DB, t Target) (int, error) {
	var dbName sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&dbName); err != nil {
		return 0, fmt.Errorf("%s: version: %w", t.Prefix, err)
	}
	if !dbName.Valid {
		return 0, fmt.Errorf("%s: the connection has no database selected: %w", t.Prefix, broker.ErrNoStore)
	}
	table, mig, err := state(ctx, db, t)
	if err != nil {
		return 0, fmt.Errorf("%s: version: %w", t.Prefix, err)
	}
	switch {
	case !table:
		return 0, fmt.Errorf("%s: database %q has no table %q: %w", t.Prefix, dbName.String, t.Table, broker.ErrNoStore)
	case !mig:
		return 0, fmt.Errorf("%s: table %q of database %q is not a geodlq table (it has no %s): %w", t.Prefix, t.Table, dbName.String, t.Migrations(), broker.ErrNoStore)
	}
	v, err := maxVersion(ctx, db, t)
	if err != nil {
		return 0, fmt.Errorf("%s: version: %w", t.Prefix, err)
	}
	if v == 0 {
		return 0, fmt.Errorf("%s: table %q has no recorded migration: %w", t.Prefix, t.Table, broker.ErrNoStore)
	}
	return v, nil
}

// Migrate brings t's table up to len(steps): it takes [LockName], creates
// the bookkeeping table when needed, runs each missing step and records
// it. A missing table is created only when create is set; otherwise, and
// for a table that exists without a bookkeeping table (not geodlq's), the
// error wraps [broker.ErrNoStore] and nothing is written. A table already
// at a version beyond len(steps) is an error.
func Migrate(ctx context.Context, db *sql.DB, t Target, steps []Step, create bool) error {
	for i, s := range steps {
		if s.Version != i+1 {
			return fmt.Errorf("%s: migrate: step %d has version %d", t.Prefix, i, s.Version)
		}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("%s: migrate: %w", t.Prefix, err)
	}
	defer conn.Close()
	// The connection is discarded, not returned to the pool: a step may
	// change its session (an isolation level, table locks), which no
	// other use of the pool should inherit.
	defer func() { _ = conn.Raw(func(any) error { return driver.ErrBadConn }) }()
	// Read first, without the lock: an up-to-date store (the common case)
	// or a target that is not a store is settled without writing.
	table, mig, err := state(ctx, conn, t)
	if err != nil {
		return fmt.Errorf("%s: migrate: %w", t.Prefix, err)
	}
	if err := refuse(t, table, mig, create); err != nil {
		return err
	}
	if table && mig {
		if v, err := maxVersion(ctx, conn, t); err == nil && v == len(steps) {
			return nil
		}
	}
	wait := lockWait
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, LockName, int64(max(wait.Seconds(), 1))).Scan(&got); err != nil {
		return fmt.Errorf("%s: migrate: lock: %w", t.Prefix, err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("%s: migrate: lock %q not granted within %v", t.Prefix, LockName, wait.Round(time.Second))
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(rctx, `DO RELEASE_LOCK(?)`, LockName)
	}()
	// Again under the lock: another process may have migrated meanwhile.
	if table, mig, err = state(ctx, conn, t); err != nil {
		return fmt.Errorf("%s: migrate: %w", t.Prefix, err)
	}
	if err := refuse(t, table, mig, create); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+Quote(t.Migrations())+` (
		version    INT         NOT NULL PRIMARY KEY,
		name       VARCHAR(255) NOT NULL,
		applied_at DATETIME(6) NOT NULL
	) ENGINE=InnoDB`); err != nil {
		return fmt.Errorf("%s: migrate: %w", t.Prefix, err)
	}
	current, err := maxVersion(ctx, conn, t)
	if err != nil {
		return fmt.Errorf("%s: migrate: %w", t.Prefix, err)
	}
	switch {
	case current > len(steps):
		return fmt.Errorf("%s: migrate: table %q is at version %d, newer than this package's %d", t.Prefix, t.Table, current, len(steps))
	case !table && current > 0:
		return fmt.Errorf("%s: migrate: %s records version %d but table %q is missing; drop %s to start over",
			t.Prefix, t.Migrations(), current, t.Table, t.Migrations())
	}
	for _, s := range steps[current:] {
		for _, stmt := range s.Statements {
			if t.Render != nil {
				stmt = t.Render(stmt)
			}
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				// A step may hold LOCK TABLES: the connection goes back to
				// the pool without it.
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				_, _ = conn.ExecContext(uctx, `UNLOCK TABLES`)
				cancel()
				return fmt.Errorf("%s: migration %d (%s): %w", t.Prefix, s.Version, s.Name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO `+Quote(t.Migrations())+` (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`,
			s.Version, s.Name); err != nil {
			return fmt.Errorf("%s: migration %d: %w", t.Prefix, s.Version, err)
		}
	}
	return nil
}

func refuse(t Target, table, mig, create bool) error {
	switch {
	case table && !mig:
		return fmt.Errorf("%s: table %q exists but is not a geodlq table (it has no %s): %w", t.Prefix, t.Table, t.Migrations(), broker.ErrNoStore)
	case !table && !create:
		return fmt.Errorf("%s: no table %q (open with Create to create it): %w", t.Prefix, t.Table, broker.ErrNoStore)
	}
	return nil
}

// Server error numbers of a transaction InnoDB rolled back (the whole
// transaction, or the statement) to resolve a conflict.
const (
	// ErrDeadlock is ER_LOCK_DEADLOCK: chosen as a deadlock victim.
	ErrDeadlock = 1213
	// ErrLockWaitTimeout is ER_LOCK_WAIT_TIMEOUT: innodb_lock_wait_timeout
	// passed waiting for a row lock.
	ErrLockWaitTimeout = 1205
	// ErrCheckRead is ER_CHECKREAD, "Record has changed since last read":
	// MariaDB's serialization failure under innodb_snapshot_isolation.
	ErrCheckRead = 1020
)

// Kind classifies an error of the MySQL driver for [txretry.Do]: a server
// error is [txretry.Conflict] for a deadlock, a lock-wait timeout or a
// MariaDB snapshot-isolation failure, else [txretry.Final]; the driver's
// ErrInvalidConn (the connection broke mid-call) is [txretry.Unknown];
// anything else is classified by [txretry.Transport].
func Kind(err error) txretry.Kind {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case ErrDeadlock, ErrLockWaitTimeout, ErrCheckRead:
			return txretry.Conflict
		}
		return txretry.Final
	}
	if errors.Is(err, mysql.ErrInvalidConn) {
		return txretry.Unknown
	}
	return txretry.Transport(err)
}

// IsCode reports whether err is a server error with one of the given
// error numbers (1213 deadlock, 1205 lock wait timeout, ...).
func IsCode(err error, codes ...uint16) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	for _, c := range codes {
		if me.Number == c {
			return true
		}
	}
	return false
}
