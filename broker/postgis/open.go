package postgis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geodlq/geodlq/broker"
)

func init() {
	broker.RegisterStore("postgres", open)
	broker.RegisterStore("postgresql", open)
}

// The URL query parameters the opener reads; the others go to pgx.
const (
	paramSchema   = "geodlq_schema"
	paramTable    = "geodlq_table"
	paramLeaseTTL = "lease_ttl"
	paramMaxBytes = "max_message_bytes"
)

// defaultConnectTimeout is OpenOptions.ConnectTimeout's default, for an
// opener called without broker.OpenStore.
const defaultConnectTimeout = 10 * time.Second

// open is the [broker.Opener] of postgres:// and postgresql:// URLs (see
// the package doc).
func open(ctx context.Context, u *url.URL, _ string, oo broker.OpenOptions) (*broker.Store, error) {
	q := u.Query()
	o := Options{StoreOptions: oo.Store, Schema: q.Get(paramSchema), Table: q.Get(paramTable)}
	if v := q.Get(paramLeaseTTL); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("postgis: %s=%q: want a positive duration such as 30s: %w", paramLeaseTTL, v, broker.ErrInvalidArgument)
		}
		o.LeaseTTL = d
	}
	if v := q.Get(paramMaxBytes); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("postgis: %s=%q: want a positive number of bytes: %w", paramMaxBytes, v, broker.ErrInvalidArgument)
		}
		o.MaxMessageBytes = n
	}
	for _, k := range []string{paramSchema, paramTable, paramLeaseTTL, paramMaxBytes} {
		q.Del(k)
	}
	dsn := *u
	dsn.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(dsn.String())
	if err != nil {
		return nil, fmt.Errorf("postgis: %w", err)
	}
	timeout := oo.ConnectTimeout
	if timeout <= 0 {
		timeout = defaultConnectTimeout
	}
	// Every connection the pool makes, now or later, gives up after the
	// timeout, however far it got (pgx applies it to the whole connection
	// process: dial, TLS, startup, authentication). Without it pgxpool
	// waits two minutes on a server that accepts and never answers.
	if cc := cfg.ConnConfig; cc.ConnectTimeout <= 0 || cc.ConnectTimeout > timeout {
		cc.ConnectTimeout = timeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "geodlq"
	}
	if oo.ReadOnly {
		// The server itself refuses every write on these sessions.
		cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgis: %w", err)
	}
	d, err := newDriver(pool, &o, true)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := d.prepareStore(ctx, timeout, oo.Create && !oo.ReadOnly); err != nil {
		pool.Close()
		return nil, err
	}
	return broker.NewStore("postgis", d, &o.StoreOptions), nil
}

// prepareStore connects within timeout, then migrates (create) or checks,
// without writing, that the store is there.
func (d *driver) prepareStore(ctx context.Context, timeout time.Duration, create bool) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := d.pool.Ping(cctx); err != nil {
		return connectError(err, timeout)
	}
	if create {
		// A migration may wait for another one's lock and build indexes:
		// it is bounded by ctx, not by the connect timeout.
		return d.migrate(ctx)
	}
	if err := d.check(cctx); err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return connectError(err, timeout)
		}
		return err
	}
	return nil
}

// connectError explains a failure to reach the server: a database that
// does not exist is no store (ErrNoStore); a timeout says which.
func connectError(err error, timeout time.Duration) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "3D000" { // invalid_catalog_name
		return fmt.Errorf("postgis: %w: %w", broker.ErrNoStore, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return fmt.Errorf("postgis: no answer from the server within the connect timeout (%v): %w", timeout, err)
	}
	return fmt.Errorf("postgis: connecting: %w", err)
}
