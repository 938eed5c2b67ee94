// Package urlreg is the URL-scheme registry behind broker.OpenStore and
// offload.OpenStore: registering openers from init functions, parsing a
// store URL, the did-you-mean for an unknown scheme, and redacting
// credentials from URLs in messages. It is geodlq's one piece of global
// state, filled by init functions and read-only afterwards.
package urlreg

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Registry maps URL schemes to openers of type O. The zero value is ready
// to use; it is safe for concurrent use.
type Registry[O any] struct {
	mu sync.RWMutex
	m  map[string]O
}

// Register adds scheme. It panics (a programming error, met at init) if
// scheme is not a valid lower-case URL scheme or is already registered;
// what names the caller in the message ("broker: RegisterStore").
func (r *Registry[O]) Register(what, scheme string, o O) {
	if !ValidScheme(scheme) {
		panic(fmt.Sprintf("%s(%q): invalid scheme", what, scheme))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[scheme]; dup {
		panic(fmt.Sprintf("%s(%q) called twice", what, scheme))
	}
	if r.m == nil {
		r.m = map[string]O{}
	}
	r.m[scheme] = o
}

// Lookup returns the opener of scheme.
func (r *Registry[O]) Lookup(scheme string) (O, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	o, ok := r.m[scheme]
	return o, ok
}

// Schemes returns the registered schemes, sorted.
func (r *Registry[O]) Schemes() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ks := make([]string, 0, len(r.m))
	for k := range r.m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// ValidScheme reports whether s is a lower-case URL scheme.
func ValidScheme(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// Parse parses a store URL. ok is false when raw has no "scheme://".
// Paths net/url refuses (sqlite://./a b.db) are kept verbatim in
// URL.Opaque, with the scheme lower-cased.
func Parse(raw string) (u *url.URL, ok bool) {
	scheme, rest, found := strings.Cut(raw, "://")
	if !found || scheme == "" {
		return nil, false
	}
	u, err := url.Parse(raw)
	if err != nil {
		u = &url.URL{Scheme: strings.ToLower(scheme), Opaque: rest}
	}
	return u, true
}

// UnknownScheme returns an error wrapping sentinel that names the known
// schemes and suggests the closest one.
func UnknownScheme(scheme string, known []string, sentinel error) error {
	msg := fmt.Sprintf("scheme %q", scheme)
	best, bestD := "", -1
	for _, k := range known {
		if d := editDistance(scheme, k); bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" && bestD <= max(2, len(scheme)/3) {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	if len(known) > 0 {
		msg += "; known: " + strings.Join(known, ", ")
	}
	return fmt.Errorf("%s: %w", msg, sentinel)
}

// editDistance is the Levenshtein distance of two short strings (URL
// schemes); long ones get their longer length.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
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

// Redact returns raw for messages: a password replaced by "xxxxx" and a
// query (which may carry credentials: access keys, tokens) by "…".
func Redact(raw string) string {
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i] + "?…"
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	return raw
}
