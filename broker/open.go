package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
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
	// registered (import the adapter's package to register it).
	ErrUnknownScheme = errors.New("unknown URL scheme")
	// ErrNoStore is wrapped when the URL names something that is not a
	// geodlq store (a file that is not a store database, a database
	// without the store's table), or, without OpenOptions.Create, nothing.
	ErrNoStore = errors.New("no geodlq store here")
)

// The scheme registry is geodlq's one piece of global state: adapters
// fill it from their init functions (the database/sql and gocloud.dev
// pattern), and it is read-only afterwards.
var (
	openersMu sync.RWMutex
	openers   = map[string]Opener{}
)

// RegisterStore makes a store scheme available to [OpenStore]. Adapters
// call it from an init function, so importing an adapter's package (for
// its side effect, `import _ "github.com/geodlq/geodlq/broker/postgis"`)
// registers its schemes; a user's own store registers the same way and
// then works with the geodlq command built with it. It panics if scheme
// is empty, not a valid URL scheme, or already registered.
func RegisterStore(scheme string, o Opener) {
	if !validScheme(scheme) || o == nil {
		panic(fmt.Sprintf("broker: RegisterStore(%q): invalid scheme or nil opener", scheme))
	}
	openersMu.Lock()
	defer openersMu.Unlock()
	if _, dup := openers[scheme]; dup {
		panic(fmt.Sprintf("broker: RegisterStore(%q) called twice", scheme))
	}
	openers[scheme] = o
}

// StoreSchemes returns the registered schemes, sorted.
func StoreSchemes() []string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	ks := make([]string, 0, len(openers))
	for k := range openers {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func validScheme(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z') {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

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
	openersMu.RLock()
	op, ok := openers[u.Scheme]
	openersMu.RUnlock()
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

// ParseStoreURL parses a store or blob URL. Paths net/url refuses
// (sqlite://./a b.db) are kept verbatim in URL.Opaque.
func ParseStoreURL(raw string) (*url.URL, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || scheme == "" {
		return nil, fmt.Errorf("%q is not a URL (want scheme://…): %w", Redact(raw), ErrUnknownScheme)
	}
	u, err := url.Parse(raw)
	if err != nil {
		u = &url.URL{Scheme: strings.ToLower(scheme), Opaque: rest}
	}
	return u, nil
}

// UnknownSchemeError returns an error wrapping [ErrUnknownScheme] that
// lists the known schemes and suggests the closest one.
func UnknownSchemeError(scheme string, known []string) error {
	msg := fmt.Sprintf("scheme %q", scheme)
	if best, d := closest(scheme, known); best != "" && d <= max(2, len(scheme)/3) {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	if len(known) > 0 {
		msg += "; known: " + strings.Join(known, ", ")
	}
	return fmt.Errorf("%s: %w", msg, ErrUnknownScheme)
}

// closest returns the candidate with the smallest edit distance to s.
func closest(s string, candidates []string) (string, int) {
	best, bestD := "", -1
	for _, c := range candidates {
		if d := editDistance(s, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD
}

// editDistance is the Levenshtein distance between a and b (short
// strings: URL schemes).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Redact returns raw with any password replaced by "xxxxx", for messages.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}
