package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/geodlq/geodlq/internal/urlreg"
)

// OpenOptions shape how [OpenStore] opens a store.
type OpenOptions struct {
	// ReadOnly opens the store for reading only: nothing is created, no
	// schema is migrated, and a target that exists but is not a geodlq
	// store is refused with [ErrNoStore]. Read-only commands (list, show,
	// stats, export, verify, serve without actions) set it.
	ReadOnly bool
	// Create allows the opener to create the store (a new SQLite file, a
	// table, a stream) when it does not exist. Without it a missing store
	// is an error wrapping [ErrNoStore], so that a mistyped path is not an
	// empty store.
	Create bool
	// ConnectTimeout bounds connecting to the store's server and checking
	// that a store is there. Default 10s.
	ConnectTimeout time.Duration
	// Store configures the portable store (tracing, logging, write
	// timeouts); its LeaseTTL and MaxMessageBytes are overridden by the
	// URL's lease_ttl and max_message_bytes parameters where an opener
	// reads them.
	Store StoreOptions
}

// Opener opens the store u names. raw is the URL as given (some drivers
// take their DSN verbatim). Openers must honour opts (read-only, create,
// the connect timeout) and ctx, and return an error wrapping [ErrNoStore]
// when the target exists but holds no geodlq store.
type Opener func(ctx context.Context, u *url.URL, raw string, opts OpenOptions) (*Store, error)

// Errors of [OpenStore].
var (
	// ErrUnknownScheme is wrapped for a URL whose scheme no adapter
	// registered (import the adapter's package to register it). It is
	// not offload.ErrUnknownScheme, which stands for a blob store URL, so
	// that a program opening both tells which URL is wrong (docs/api.md).
	ErrUnknownScheme = errors.New("unknown URL scheme")
	// ErrNoStore is wrapped when the URL names something that is not a
	// geodlq store (a file that is not a store database, a database
	// without the store's table), or, without OpenOptions.Create, nothing.
	ErrNoStore = errors.New("no geodlq store here")
)

// The scheme registry is geodlq's one piece of global state: adapters
// fill it from their init functions (the database/sql and gocloud.dev
// pattern), and it is read-only afterwards.
var openers urlreg.Registry[Opener]

// RegisterStore makes a store scheme available to [OpenStore]. Adapters
// call it from an init function, so importing an adapter's package (for
// its side effect, `import _ "github.com/geodlq/geodlq/broker/postgis"`)
// registers its schemes; a user's own store registers the same way and
// then works with the geodlq command built with it. It panics if scheme
// is empty, not a valid lower-case URL scheme, already registered, or o
// is nil.
func RegisterStore(scheme string, o Opener) {
	if o == nil {
		panic(fmt.Sprintf("broker: RegisterStore(%q): nil opener", scheme))
	}
	openers.Register("broker: RegisterStore", scheme, o)
}

// StoreSchemes returns the registered schemes, sorted.
func StoreSchemes() []string { return openers.Schemes() }

// OpenStore opens the dead-letter store a URL names, such as
// sqlite://./dlq.db, postgres://host/db?geodlq_table=…, redis://host:6379,
// kafka://broker:9092 or mysql://user@host/db — whatever the imported
// adapters registered (see each adapter's package doc for its URL form).
// nil opts means read-write without Create.
func OpenStore(ctx context.Context, rawURL string, opts *OpenOptions) (*Store, error) {
	var o OpenOptions
	if opts != nil {
		o = *opts
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.Store.Logger == nil {
		o.Store.Logger = slog.New(slog.DiscardHandler)
	}
	u, err := ParseStoreURL(rawURL)
	if err != nil {
		return nil, err
	}
	op, ok := openers.Lookup(u.Scheme)
	if !ok {
		return nil, fmt.Errorf("store %s: %w", Redact(rawURL), UnknownSchemeError(u.Scheme, StoreSchemes()))
	}
	o.Store.ReadOnly = o.Store.ReadOnly || o.ReadOnly
	s, err := op(ctx, u, rawURL, o)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", Redact(rawURL), err)
	}
	if o.ReadOnly {
		s.ro = true // whatever the opener did with o.Store
	}
	return s, nil
}

// ParseStoreURL parses a store URL. Paths net/url refuses
// (sqlite://./a b.db) are kept verbatim in URL.Opaque.
func ParseStoreURL(raw string) (*url.URL, error) {
	u, ok := urlreg.Parse(raw)
	if !ok {
		return nil, fmt.Errorf("%q is not a URL (want scheme://…): %w", Redact(raw), ErrUnknownScheme)
	}
	return u, nil
}

// UnknownSchemeError returns an error wrapping [ErrUnknownScheme] that
// lists the known schemes and suggests the closest one.
func UnknownSchemeError(scheme string, known []string) error {
	return urlreg.UnknownScheme(scheme, known, ErrUnknownScheme)
}

// Redact returns raw for messages: a password replaced by "xxxxx" and a
// query (which may carry credentials) by "…".
func Redact(raw string) string { return urlreg.Redact(raw) }
