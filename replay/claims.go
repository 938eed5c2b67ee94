package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/idemkey"
)

// KeyPrefix starts every key [NewKey] derives.
const KeyPrefix = "idem:v1:"

// NewKey derives an idempotency key at ingestion, once, from a namespace
// (your pipeline's name) and the parts that identify the event (for
// example a provider id and the exact body bytes):
//
//	idem:v1:<hex SHA-256>
//
// The hash input is, for the namespace and then each part in order, its
// length as an 8-byte big-endian integer followed by its bytes, so any
// language can reproduce a key. Carry the key with the event (the
// idempotency-key header) and never derive it again: replay reuses it
// verbatim, because a re-serialised payload can hash differently.
func NewKey(namespace string, parts ...[]byte) string {
	return idemkey.Derive(namespace, parts...)
}

// ValidKey reports whether key has the form NewKey produces.
func ValidKey(key string) bool { return idemkey.Valid(key) }

// Status is the state of an idempotency key in a [Claims] store.
type Status uint8

// The claim statuses.
const (
	// StatusAcquired: the caller now holds the claim and must run the side
	// effect, then Complete (or Release on failure).
	StatusAcquired Status = iota + 1
	// StatusInProgress: another worker holds a live claim.
	StatusInProgress
	// StatusDone: the side effect already happened; skip it.
	StatusDone
)

// String returns "acquired", "in_progress" or "done".
func (s Status) String() string {
	switch s {
	case StatusAcquired:
		return "acquired"
	case StatusInProgress:
		return "in_progress"
	case StatusDone:
		return "done"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Lease is a held claim.
type Lease struct {
	// Key is the idempotency key.
	Key string
	// Token identifies this holder; a later claim of an expired lease gets
	// a new token, which fences the old holder out.
	Token string
	// ExpiresAt is when the claim lapses unless completed.
	ExpiresAt time.Time
}

// Claims is an atomic idempotency-claim store: the consumer's side of
// exactly-once. Implementations must be safe for concurrent use across
// processes sharing the store.
//
// Claim atomically claims key for ttl. It returns StatusAcquired and a
// lease when the key is new, or when the previous claim expired without
// completing (its holder crashed); StatusInProgress when another live claim
// exists; StatusDone once the key was completed.
//
// Complete marks the leased key done for good. It succeeds as long as no
// one else claimed the key since this lease was granted, even if the lease
// expired meanwhile; otherwise it returns an error wrapping [broker.ErrLeaseLost].
//
// Release gives up a lease without completing, so the key can be claimed
// again at once (the side effect failed and will be retried). Releasing a
// lost lease returns an error wrapping [broker.ErrLeaseLost] and changes nothing.
type Claims interface {
	Claim(ctx context.Context, key string, ttl time.Duration) (Lease, Status, error)
	Complete(ctx context.Context, l Lease) error
	Release(ctx context.Context, l Lease) error
}

// Errors returned by claims stores and [Once].
var (
	// ErrInProgress: another worker holds a live claim on the key. [Once]
	// returns it marked transient, so a processor retries later.
	ErrInProgress = errors.New("replay: idempotency key in progress elsewhere")
)

// DefaultClaimTTL is the lease [Once] takes when given ttl <= 0.
const DefaultClaimTTL = 5 * time.Minute

// Result reports what [Once] did.
type Result struct {
	// Ran is true when fn ran and completed.
	Ran bool
	// Status is the claim status Once saw.
	Status Status
}

// Once runs fn exactly once per key across every worker sharing claims:
// it claims key before any side effect, skips fn when the key is already
// done, runs fn when it acquired the claim, and then completes the claim
// (or releases it if fn failed, so a retry can run it).
//
// If another worker holds a live claim, Once returns an error matching
// [ErrInProgress] and marked [classify.ClassTransient]. If fn succeeded
// but Complete failed, the error wraps both; the side effect has happened
// and fn must itself tolerate being run again by the retry (or the lease
// must outlive any retry).
func Once(ctx context.Context, claims Claims, key string, ttl time.Duration, fn func(context.Context) error) (Result, error) {
	if claims == nil {
		return Result{}, errors.New("replay: Once: nil Claims")
	}
	if key == "" {
		return Result{}, classify.SchemaViolation(errors.New("replay: Once: empty idempotency key"))
	}
	if ttl <= 0 {
		ttl = DefaultClaimTTL
	}
	lease, st, err := claims.Claim(ctx, key, ttl)
	if err != nil {
		return Result{}, classify.Transient(fmt.Errorf("replay: claiming %q: %w", key, err))
	}
	switch st {
	case StatusDone:
		return Result{Status: st}, nil
	case StatusInProgress:
		return Result{Status: st}, classify.Transient(fmt.Errorf("replay: %q: %w", key, ErrInProgress))
	case StatusAcquired:
	default:
		return Result{}, fmt.Errorf("replay: claims store returned status %v for %q", st, key)
	}
	if ferr := fn(ctx); ferr != nil {
		// Release with a context of its own: ctx may be what ended fn.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := claims.Release(rctx, lease); rerr != nil {
			return Result{Status: st}, errors.Join(ferr, fmt.Errorf("replay: releasing %q: %w", key, rerr))
		}
		return Result{Status: st}, ferr
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := claims.Complete(cctx, lease); err != nil {
		return Result{Status: st}, fmt.Errorf("replay: side effect for %q done but not recorded: %w", key, err)
	}
	return Result{Ran: true, Status: st}, nil
}

// MemClaims is an in-memory [Claims] store for tests and single-process
// use. It also records, per key, how many times a claim completed, so
// tests (and the quickstart) can prove exactly-once.
type MemClaims struct {
	mu   sync.Mutex
	keys map[string]*memClaim
	now  func() time.Time
}

type memClaim struct {
	token     string
	expires   time.Time
	done      bool
	completed int
	claims    int
}

// NewMemClaims returns an empty store. now may be nil (time.Now).
func NewMemClaims(now func() time.Time) *MemClaims {
	if now == nil {
		now = time.Now
	}
	return &MemClaims{keys: map[string]*memClaim{}, now: now}
}

var _ Claims = (*MemClaims)(nil)

// Claim implements [Claims].
func (m *MemClaims) Claim(ctx context.Context, key string, ttl time.Duration) (Lease, Status, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, 0, err
	}
	if ttl <= 0 {
		return Lease{}, 0, fmt.Errorf("replay: claim ttl must be positive, got %v", ttl)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	c := m.keys[key]
	if c == nil {
		c = &memClaim{}
		m.keys[key] = c
	}
	switch {
	case c.done:
		return Lease{}, StatusDone, nil
	case c.token != "" && now.Before(c.expires):
		return Lease{}, StatusInProgress, nil
	}
	c.token = newToken()
	c.expires = now.Add(ttl)
	c.claims++
	return Lease{Key: key, Token: c.token, ExpiresAt: c.expires}, StatusAcquired, nil
}

// Complete implements [Claims].
func (m *MemClaims) Complete(ctx context.Context, l Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.keys[l.Key]
	if c == nil || c.done || c.token != l.Token || l.Token == "" {
		return fmt.Errorf("replay: completing %q: %w", l.Key, broker.ErrLeaseLost)
	}
	c.done, c.token = true, ""
	c.completed++
	return nil
}

// Release implements [Claims].
func (m *MemClaims) Release(ctx context.Context, l Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.keys[l.Key]
	if c == nil || c.done || c.token != l.Token || l.Token == "" {
		return fmt.Errorf("replay: releasing %q: %w", l.Key, broker.ErrLeaseLost)
	}
	c.token, c.expires = "", time.Time{}
	return nil
}

// Completions returns how many times key was completed: 0 or 1 for a
// correct store.
func (m *MemClaims) Completions(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.keys[key]; c != nil {
		return c.completed
	}
	return 0
}

// ClaimAttempts returns how many leases were granted for key.
func (m *MemClaims) ClaimAttempts(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.keys[key]; c != nil {
		return c.claims
	}
	return 0
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
