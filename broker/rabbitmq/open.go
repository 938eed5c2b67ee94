package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/geodlq/geodlq/broker"
)

func init() {
	broker.RegisterStore("amqp", open)
	broker.RegisterStore("amqps", open)
}

// geodlqParams are the URL parameters the opener reads; the others go to
// amqp091-go (heartbeat, channel_max, auth_mechanism, TLS files, …).
var geodlqParams = map[string]bool{"geodlq_exchange": true, "geodlq_queue_prefix": true, "geodlq_queue_type": true,
	"lease_ttl": true, "max_message_bytes": true}

// open is the [broker.Opener] of
// amqp://user:password@host:5672/vhost?geodlq_exchange=X&geodlq_queue_prefix=P&geodlq_queue_type=quorum&lease_ttl=30m&max_message_bytes=N
// (and amqps://).
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
	// DefaultDial bounds the dial, and its deadline the TLS and AMQP
	// handshakes: a server that accepts the connection and never answers
	// fails within it.
	conn, err := amqp.DialConfig(server, amqp.Config{
		Dial:       amqp.DefaultDial(timeout),
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Properties: amqp.Table{"connection_name": "geodlq"},
	})
	if err != nil {
		var ae *amqp.Error
		switch {
		case errors.As(err, &ae) && ae.Code == amqp.NotAllowed && strings.Contains(ae.Reason, "not found"):
			// A virtual host that does not exist: nothing is there.
			return nil, fmt.Errorf("rabbitmq: %w: %w", err, broker.ErrNoStore)
		case errors.Is(err, amqp.ErrSASL) || errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost):
			return nil, fmt.Errorf("rabbitmq: connecting to %s: %w", u.Host, err)
		}
		if isTimeout(err) {
			return nil, fmt.Errorf("rabbitmq: no answer from %s within the connect timeout %v: %w", u.Host, opts.ConnectTimeout, err)
		}
		return nil, fmt.Errorf("rabbitmq: connecting to %s (connect timeout %v): %w", u.Host, opts.ConnectTimeout, err)
	}
	d, err := newDriver(cctx, conn, o)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	d.ownsConn = true
	return broker.NewStore("rabbitmq", d, &o.StoreOptions), nil
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// parseURL turns an amqp:// URL into the URL amqp091-go dials and the
// store's options.
func parseURL(u *url.URL, opts broker.OpenOptions) (string, *Options, error) {
	if u.Opaque != "" || u.Host == "" {
		return "", nil, fmt.Errorf("rabbitmq: URL %q is not %s://user:password@host:port/vhost: %w", broker.Redact(u.String()), u.Scheme, broker.ErrInvalidArgument)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", nil, fmt.Errorf("rabbitmq: URL %q: port %q is not 1 to 65535: %w", broker.Redact(u.String()), p, broker.ErrInvalidArgument)
		}
	}
	q := u.Query()
	o := &Options{StoreOptions: opts.Store, Create: opts.Create, Exchange: q.Get("geodlq_exchange"), QueuePrefix: q.Get("geodlq_queue_prefix")}
	o.ReadOnly = o.ReadOnly || opts.ReadOnly
	for k := range q {
		if strings.HasPrefix(k, "geodlq_") && !geodlqParams[k] {
			return "", nil, fmt.Errorf("rabbitmq: unknown URL parameter %q: %w", k, broker.ErrInvalidArgument)
		}
	}
	switch t := q.Get("geodlq_queue_type"); t {
	case "", "classic":
	case "quorum":
		o.QueueArgs = amqp.Table{"x-queue-type": "quorum"}
	default:
		return "", nil, fmt.Errorf("rabbitmq: geodlq_queue_type %q is not classic or quorum: %w", t, broker.ErrInvalidArgument)
	}
	if v := q.Get("lease_ttl"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return "", nil, fmt.Errorf("rabbitmq: lease_ttl %q is not a positive duration: %w", v, broker.ErrInvalidArgument)
		}
		o.LeaseTTL = d
	}
	if v := q.Get("max_message_bytes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return "", nil, fmt.Errorf("rabbitmq: max_message_bytes %q is not a positive integer: %w", v, broker.ErrInvalidArgument)
		}
		o.MaxMessageBytes = n
	}
	rest := url.Values{}
	for k, vs := range q {
		if !geodlqParams[k] {
			rest[k] = vs
		}
	}
	server := *u
	server.RawQuery = rest.Encode()
	if _, err := amqp.ParseURI(server.String()); err != nil {
		return "", nil, fmt.Errorf("rabbitmq: URL %q: %w: %w", broker.Redact(u.String()), err, broker.ErrInvalidArgument)
	}
	return server.String(), o, nil
}
