package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/geodlq/geodlq/broker"
)

// Driver timeouts the opener sets unless the URL does (readTimeout,
// writeTimeout): they bound a read or write of a connection whose server
// went silent, for calls without a deadline. They are longer than the
// portable store's WriteTimeout (30s), so they never cut a write short
// (a cut one would be checked: see Publish).
const (
	defaultReadTimeout  = 2 * time.Minute
	defaultWriteTimeout = 2 * time.Minute
)

func init() {
	broker.RegisterStore("mysql", open)
}

// geodlqParams are the URL parameters the opener reads; every other one
// goes to the driver's DSN.
var geodlqParams = []string{"geodlq_table", "lease_ttl", "max_message_bytes"}

// open is the [broker.Opener] of mysql://user:pass@host:port/db?….
func open(ctx context.Context, u *url.URL, _ string, opts broker.OpenOptions) (*broker.Store, error) {
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	cfg, o, err := parseURL(u, opts)
	if err != nil {
		return nil, err
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	cctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	d, err := newDriver(cctx, db, o)
	if err != nil {
		_ = db.Close()
		if cctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("mysql: no answer from %s within the connect timeout %v: %w", cfg.Addr, opts.ConnectTimeout, err)
		}
		var me *gomysql.MySQLError
		if errors.As(err, &me) && me.Number == 1049 { // ER_BAD_DB_ERROR
			return nil, fmt.Errorf("mysql: %w: %w", err, broker.ErrNoStore)
		}
		return nil, err
	}
	d.ownsDB = true
	return broker.NewStore("mysql", d, &d.storeOptions(o).StoreOptions), nil
}

// parseURL turns a mysql:// URL into the driver's configuration and the
// store's options.
func parseURL(u *url.URL, opts broker.OpenOptions) (*gomysql.Config, *Options, error) {
	if u.Opaque != "" {
		return nil, nil, fmt.Errorf("mysql: URL %q is not mysql://user:pass@host:port/database: %w", broker.Redact(u.String()), broker.ErrInvalidArgument)
	}
	q := u.Query()
	o := &Options{StoreOptions: opts.Store, Table: q.Get("geodlq_table"), Create: opts.Create}
	o.ReadOnly = o.ReadOnly || opts.ReadOnly
	if v := q.Get("lease_ttl"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, nil, fmt.Errorf("mysql: lease_ttl %q is not a positive duration: %w", v, broker.ErrInvalidArgument)
		}
		o.LeaseTTL = d
	}
	if v := q.Get("max_message_bytes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, nil, fmt.Errorf("mysql: max_message_bytes %q is not a positive integer: %w", v, broker.ErrInvalidArgument)
		}
		o.MaxMessageBytes = n
	}
	for k := range q {
		if strings.HasPrefix(k, "geodlq_") && k != "geodlq_table" {
			return nil, nil, fmt.Errorf("mysql: unknown URL parameter %q: %w", k, broker.ErrInvalidArgument)
		}
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, nil, fmt.Errorf("mysql: URL %q names no database (mysql://user:pass@host:port/database): %w", broker.Redact(u.String()), broker.ErrInvalidArgument)
	}
	host := u.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(strings.Trim(host, "[]"), "3306")
	}
	// The driver's own parameters (tls, charset, readTimeout, …) pass
	// through; its DSN parser checks them.
	params := url.Values{}
	for k, vs := range q {
		if !isGeodlqParam(k) {
			params[k] = vs
		}
	}
	setDefault := func(k, v string) {
		if params.Get(k) == "" {
			params.Set(k, v)
		}
	}
	setDefault("parseTime", "true")
	setDefault("readTimeout", defaultReadTimeout.String())
	setDefault("writeTimeout", defaultWriteTimeout.String())
	params.Set("timeout", opts.ConnectTimeout.String())
	dsn := "tcp(" + host + ")/" + db + "?" + params.Encode()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("mysql: URL parameters: %w: %w", err, broker.ErrInvalidArgument)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return cfg, o, nil
}

func isGeodlqParam(k string) bool {
	for _, p := range geodlqParams {
		if k == p {
			return true
		}
	}
	return false
}
