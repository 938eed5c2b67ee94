package redisstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
)

// URL query parameters the opener reads; the rest are go-redis's
// (redis.ParseURL).
const (
	paramPrefix   = "geodlq_prefix"
	paramGroup    = "geodlq_group"
	paramLeaseTTL = "lease_ttl"
	paramMaxBytes = "max_message_bytes"
)

func init() {
	broker.RegisterStore("redis", open)
	broker.RegisterStore("rediss", open)
}

// open is the [broker.Opener] of redis:// and rediss:// (see the package
// doc for the URL form).
func open(ctx context.Context, u *url.URL, _ string, oo broker.OpenOptions) (*broker.Store, error) {
	if u.Opaque != "" || u.Host == "" {
		return nil, fmt.Errorf("redisstream: want %s://[user:password@]host:port[/db][?…]: %w", u.Scheme, broker.ErrInvalidArgument)
	}
	q := u.Query()
	o := Options{StoreOptions: oo.Store, Prefix: q.Get(paramPrefix), Group: q.Get(paramGroup)}
	if v := q.Get(paramLeaseTTL); v != "" {
		ttl, err := time.ParseDuration(v)
		if err != nil || ttl <= 0 {
			return nil, fmt.Errorf("redisstream: %s=%q: want a positive duration such as 30s: %w", paramLeaseTTL, v, broker.ErrInvalidArgument)
		}
		o.LeaseTTL = ttl
	}
	if v := q.Get(paramMaxBytes); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("redisstream: %s=%q: want a positive number of bytes: %w", paramMaxBytes, v, broker.ErrInvalidArgument)
		}
		o.MaxMessageBytes = n
	}
	for _, p := range []string{paramPrefix, paramGroup, paramLeaseTTL, paramMaxBytes} {
		q.Del(p)
	}
	clean := *u
	clean.RawQuery = q.Encode()
	ro, err := redis.ParseURL(clean.String())
	if err != nil {
		return nil, fmt.Errorf("redisstream: %w: %w", err, broker.ErrInvalidArgument)
	}
	timeout := oo.ConnectTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if ro.DialTimeout <= 0 || ro.DialTimeout > timeout {
		ro.DialTimeout = timeout
	}
	// Deadlines of the store's contexts bound the socket reads too (the
	// portable store bounds every write by WriteTimeout).
	ro.ContextTimeoutEnabled = true
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// Dial once ourselves first. go-redis reports a failed dial through
	// its process-wide logger (redis.SetLogger; there is no per-client
	// one), which writes "redis: connection pool: failed to dial …" lines
	// to stderr for every attempt: an unreachable server is reported here,
	// once, in the returned error, before go-redis dials at all.
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", ro.Addr)
	if err != nil {
		return nil, fmt.Errorf("redisstream: connecting to %s: %w", ro.Addr, err)
	}
	_ = conn.Close()

	client := redis.NewClient(ro)
	d, err := newDriver(client, &o)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	d.ownsClient = true
	if err := d.checkStore(ctx, oo, ro.Addr); err != nil {
		_ = client.Close()
		return nil, err
	}
	return broker.NewStore("redisstream", d, &o.StoreOptions), nil
}

// checkStore makes sure the server answers and holds a store under the
// prefix: its catalog, or (written before the catalog existed) streams of
// the store's layout, which a writable open then enters in a catalog.
// Without one it creates the catalog when oo.Create allows and the store
// is writable, and fails with [broker.ErrNoStore] otherwise.
func (d *driver) checkStore(ctx context.Context, oo broker.OpenOptions, addr string) error {
	noStore := func(why string) error {
		return fmt.Errorf("redisstream: %s at %s: %w", why, addr, broker.ErrNoStore)
	}
	if err := d.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisstream: %s does not answer: %w", addr, err)
	}
	layout, err := d.client.HGet(ctx, d.prefix, catalogLayout).Result()
	switch {
	case err == nil && layout == layoutVersion:
		return nil
	case err == nil:
		return noStore(fmt.Sprintf("the catalog %q has layout %q; this version reads layout %s", d.prefix, layout, layoutVersion))
	case !errors.Is(err, redis.Nil):
		var re redis.Error
		if errors.As(err, &re) {
			return noStore(fmt.Sprintf("the key %q is not a geodlq catalog (%v)", d.prefix, err))
		}
		return fmt.Errorf("redisstream: reading the catalog %q at %s: %w", d.prefix, addr, err)
	}
	// No catalog: streams of the layout under the prefix?
	legacy, err := d.scanStreams(ctx, 0)
	if err != nil {
		return err
	}
	var found []string
	for _, dest := range legacy {
		head, err := d.readRange(ctx, d.streamKey(dest), dest, "-", "+", 1, false)
		if err != nil {
			return err
		}
		if len(head) == 0 || isLayout(head[0].fields) {
			found = append(found, dest)
		}
	}
	if oo.ReadOnly {
		if len(found) == 0 {
			return noStore(fmt.Sprintf("no geodlq streams under %q", d.prefix+":"))
		}
		return nil
	}
	if len(found) == 0 && !oo.Create {
		return noStore(fmt.Sprintf("no geodlq streams under %q (open with Create to start one)", d.prefix+":"))
	}
	args := []any{catalogLayout, layoutVersion}
	for _, dest := range found {
		args = append(args, catalogDest+dest, "1")
	}
	if err := d.client.HSet(ctx, d.prefix, args...).Err(); err != nil {
		return fmt.Errorf("redisstream: writing the catalog %q at %s: %w", d.prefix, addr, err)
	}
	return nil
}

// isLayout reports whether an entry's fields are of the store's layout.
func isLayout(fields []any) bool {
	for i := 0; i+1 < len(fields); i += 2 {
		if name, _ := fields[i].(string); name == fieldVersion {
			v, _ := fields[i+1].(string)
			return v == layoutVersion
		}
	}
	return false
}
