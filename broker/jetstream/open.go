package jetstream

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/geodlq/geodlq/broker"
)

func init() {
	broker.RegisterStore("nats", open)
}

// open is the [broker.Opener] of
// nats://[user:password@]host:port?geodlq_stream=S&geodlq_prefix=P&geodlq_replayer=R&lease_ttl=30s&max_message_bytes=N.
func open(ctx context.Context, u *url.URL, _ string, opts broker.OpenOptions) (*broker.Store, error) {
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	server, o, err := parseURL(u, opts)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	timeout := opts.ConnectTimeout
	if dl, ok := cctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	// nats.Timeout bounds the dial and the INFO/CONNECT handshake: a
	// server that accepts the connection and never answers fails within
	// it. No reconnects: a store the opener made fails when its server is
	// gone, as the other openers' stores do.
	nc, err := nats.Connect(server, nats.Timeout(timeout), nats.Name("geodlq"), nats.NoReconnect())
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("jetstream: no answer from %s within the connect timeout %v: %w", u.Host, opts.ConnectTimeout, err)
		}
		return nil, fmt.Errorf("jetstream: connecting to %s (connect timeout %v): %w", u.Host, opts.ConnectTimeout, err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	d, err := newDriver(cctx, js, o)
	if err != nil {
		nc.Close()
		if cctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("jetstream: no answer from %s within the connect timeout %v: %w", u.Host, opts.ConnectTimeout, err)
		}
		return nil, err
	}
	d.ownsConn = true
	return broker.NewStore("jetstream", d, &o.StoreOptions), nil
}

// parseURL turns a nats:// URL into the server URL to connect to and the
// store's options.
func parseURL(u *url.URL, opts broker.OpenOptions) (string, *Options, error) {
	if u.Opaque != "" || u.Host == "" {
		return "", nil, fmt.Errorf("jetstream: URL %q is not nats://host:port?…: %w", broker.Redact(u.String()), broker.ErrInvalidArgument)
	}
	if u.Path != "" && u.Path != "/" {
		return "", nil, fmt.Errorf("jetstream: URL %q has a path; name the stream with geodlq_stream: %w", broker.Redact(u.String()), broker.ErrInvalidArgument)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", nil, fmt.Errorf("jetstream: URL %q: port %q is not 1 to 65535: %w", broker.Redact(u.String()), p, broker.ErrInvalidArgument)
		}
	}
	q := u.Query()
	o := &Options{StoreOptions: opts.Store, Create: opts.Create,
		Stream: q.Get("geodlq_stream"), SubjectPrefix: q.Get("geodlq_prefix"), Replayer: q.Get("geodlq_replayer")}
	for k := range q {
		switch k {
		case "geodlq_stream", "geodlq_prefix", "geodlq_replayer", "lease_ttl", "max_message_bytes":
		default:
			return "", nil, fmt.Errorf("jetstream: unknown URL parameter %q (known: geodlq_stream, geodlq_prefix, geodlq_replayer, lease_ttl, max_message_bytes): %w", k, broker.ErrInvalidArgument)
		}
	}
	o.ReadOnly = o.ReadOnly || opts.ReadOnly
	if v := q.Get("lease_ttl"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return "", nil, fmt.Errorf("jetstream: lease_ttl %q is not a positive duration: %w", v, broker.ErrInvalidArgument)
		}
		o.LeaseTTL = d
	}
	if v := q.Get("max_message_bytes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return "", nil, fmt.Errorf("jetstream: max_message_bytes %q is not a positive integer: %w", v, broker.ErrInvalidArgument)
		}
		o.MaxMessageBytes = n
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "4222")
	}
	server := url.URL{Scheme: "nats", User: u.User, Host: host}
	return server.String(), o, nil
}
