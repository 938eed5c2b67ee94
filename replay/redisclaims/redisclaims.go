// Package redisclaims is a [replay.Claims] store on Redis (go-redis v9): the
// idempotency claims a consumer takes with [replay.Once] before any side
// effect, shared by every worker that talks to the same Redis.
//
// # Keys and semantics
//
// Each idempotency key k uses Redis keys that share a hash tag, so they
// live in one cluster slot and every operation is one atomic Lua script:
//
//   - "<Prefix>{:k}:lease" is the lease itself: SET token NX PX ttl. Redis
//     expires it, so a crashed holder's claim lapses after ttl and the key
//     can be claimed again.
//   - "<Prefix>{:k}" is the key's state: "t:<token>" for the most recent
//     claim, kept [Options.StateRetention] beyond the lease, or "done" once
//     completed.
//
// and, for two minutes after a Complete or Release, "<Prefix>{:k}:settled"
// marks the call that settled the key.
//
// Claim sets both or neither. Complete succeeds when the state still names
// the caller's token, whether or not the lease expired meanwhile, exactly
// as [replay.Claims] requires ("no one else claimed the key since"); it
// fails with [broker.ErrLeaseLost] once another claim replaced the token,
// after a Release, after a Complete, or when the lapsed claim's state
// outlived StateRetention. Release deletes both keys, so the key can be
// claimed again at once.
//
// The done marker is kept forever by default. [Options.DoneTTL] expires it;
// after that the key is new again and a duplicate arriving later would run
// its side effect a second time, so a DoneTTL must exceed the longest time
// a duplicate can arrive (source retention plus dead-letter retention).
//
// Every operation is one script that a retry of the same call finds done:
// go-redis retries a command whose connection dropped or whose reply came
// after its ReadTimeout, and without that a Claim whose first attempt
// succeeded would report "in progress", and a Complete "lease lost". A
// Claim recognises its own token in the lease; Complete and Release leave
// a per-call nonce in the settled mark. A second call with the same lease
// still fails as [replay.Claims] requires.
//
// Keys are used verbatim: any bytes, braces included. The hash tag is the
// text between the first "{" and the next "}"; the Redis keys of k all start
// with the same "<Prefix>{:k}", and the ":" keeps the tag non-empty even
// when k starts with "}", so they share a slot whatever k contains. The
// empty key is refused.
//
// # Durability
//
// A claim or a completion is as durable as the Redis server's persistence
// (appendonly and appendfsync): with the default everysec, a crash of the
// server can lose the last second, and a lost "done" marker lets a
// duplicate through. Run Redis with appendonly yes for claims you rely on.
//
// Lease.ExpiresAt is computed from the client's clock; the expiry that
// counts is Redis's own PX.
//
// # Client access
//
// The store uses the client it is given and never closes it;
// [Claims.Client] returns it.
package redisclaims

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/replay"
)

// DefaultPrefix starts every key when [Options.Prefix] is empty.
const DefaultPrefix = "geodlq:claim"

// Options configures a [Claims]. Nil means defaults.
type Options struct {
	// Prefix starts every key: "<Prefix>{:<key>}" and
	// "<Prefix>{:<key>}:lease". Default [DefaultPrefix]. It must not
	// contain "{" or "}".
	Prefix string
	// DoneTTL expires the done marker (Redis PX on the state key). Default
	// 0: completed keys are kept forever.
	DoneTTL time.Duration
	// StateRetention is how long the state of a claim that was neither
	// completed nor released outlives its lease, so that a holder whose
	// lease lapsed can still complete when nobody took over. Past it, such
	// a Complete fails with [broker.ErrLeaseLost]. Default 24h.
	StateRetention time.Duration
}

// Claims is a [replay.Claims] store on Redis. It is safe for concurrent use
// and across processes.
type Claims struct {
	client    redis.UniversalClient
	prefix    string
	doneTTL   time.Duration
	retention time.Duration
}

var _ replay.Claims = (*Claims)(nil)

// New returns a store over client. It does no I/O.
func New(client redis.UniversalClient, opts *Options) (*Claims, error) {
	if client == nil {
		return nil, errors.New("redisclaims: nil client")
	}
	s := &Claims{client: client, prefix: DefaultPrefix, retention: 24 * time.Hour}
	if opts != nil {
		if opts.Prefix != "" {
			s.prefix = opts.Prefix
		}
		if opts.DoneTTL < 0 || opts.StateRetention < 0 {
			return nil, errors.New("redisclaims: negative DoneTTL or StateRetention")
		}
		s.doneTTL = opts.DoneTTL
		if opts.StateRetention > 0 {
			s.retention = opts.StateRetention
		}
	}
	for _, r := range s.prefix {
		if r == '{' || r == '}' {
			return nil, fmt.Errorf("redisclaims: prefix %q must not contain braces", s.prefix)
		}
	}
	return s, nil
}

// Client returns the client the store uses.
func (s *Claims) Client() redis.UniversalClient { return s.client }

// Keys returns the Redis keys holding key's state and lease.
func (s *Claims) Keys(key string) (state, lease string) {
	state = s.prefix + "{:" + key + "}"
	return state, state + ":lease"
}

// Every script is idempotent for the call that runs it, so that a retry
// of a call whose reply was lost (go-redis retries a command whose
// connection dropped, or whose reply came after ReadTimeout) reports what
// the first attempt did instead of a false "in progress" or "lease lost".

// claimScript: KEYS = state, lease; ARGV = token (new for every Claim
// call), lease ms, state ms. Returns 0 acquired, 1 in progress, 2 done. A
// lease already holding this call's token was acquired by this call.
var claimScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == 'done' then return 2 end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[2]) == ARGV[1] then return 0 end
  return 1
end
redis.call('SET', KEYS[1], 't:' .. ARGV[1], 'PX', ARGV[3])
return 0
`)

// completeScript: KEYS = state, lease, mark; ARGV = token, nonce (new for
// every Complete call), mark ms, done ms (0: forever). Returns 1 on
// success, 0 when the lease was lost. On success the mark holds the nonce
// for mark ms: a retry of the same call finds it.
var completeScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= 't:' .. ARGV[1] then
  if redis.call('GET', KEYS[3]) == ARGV[2] then return 1 end
  return 0
end
redis.call('DEL', KEYS[2])
if ARGV[4] == '0' then
  redis.call('SET', KEYS[1], 'done')
else
  redis.call('SET', KEYS[1], 'done', 'PX', ARGV[4])
end
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
return 1
`)

// releaseScript: KEYS = state, lease, mark; ARGV = token, nonce, mark ms.
// Returns 1 on success, 0 when the lease was lost; marks like
// completeScript.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= 't:' .. ARGV[1] then
  if redis.call('GET', KEYS[3]) == ARGV[2] then return 1 end
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
return 1
`)

// markTTL is how long a settled call's mark lives: far longer than
// go-redis's retries of one command take.
const markTTL = 2 * time.Minute

func ms(d time.Duration) int64 {
	m := d.Milliseconds()
	if d > 0 && time.Duration(m)*time.Millisecond < d {
		m++ // round up: a lease is never shorter than asked
	}
	return m
}

// Claim implements [replay.Claims].
func (s *Claims) Claim(ctx context.Context, key string, ttl time.Duration) (replay.Lease, replay.Status, error) {
	if err := ctx.Err(); err != nil {
		return replay.Lease{}, 0, err
	}
	if key == "" {
		return replay.Lease{}, 0, errors.New("redisclaims: empty key")
	}
	if ttl <= 0 {
		return replay.Lease{}, 0, fmt.Errorf("redisclaims: claim ttl must be positive, got %v", ttl)
	}
	token := newToken()
	state, lease := s.Keys(key)
	start := time.Now()
	n, err := claimScript.Run(ctx, s.client, []string{state, lease}, token, ms(ttl), ms(ttl+s.retention)).Int()
	if err != nil {
		return replay.Lease{}, 0, fmt.Errorf("redisclaims: claiming %q: %w", key, err)
	}
	switch n {
	case 0:
		return replay.Lease{Key: key, Token: token, ExpiresAt: start.Add(ttl)}, replay.StatusAcquired, nil
	case 1:
		return replay.Lease{}, replay.StatusInProgress, nil
	case 2:
		return replay.Lease{}, replay.StatusDone, nil
	}
	return replay.Lease{}, 0, fmt.Errorf("redisclaims: claiming %q: unexpected script result %d", key, n)
}

// Complete implements [replay.Claims].
func (s *Claims) Complete(ctx context.Context, l replay.Lease) error {
	return s.settle(ctx, l, "completing", completeScript, ms(s.doneTTL))
}

// Release implements [replay.Claims].
func (s *Claims) Release(ctx context.Context, l replay.Lease) error {
	return s.settle(ctx, l, "releasing", releaseScript)
}

func (s *Claims) settle(ctx context.Context, l replay.Lease, verb string, script *redis.Script, args ...any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.Key == "" || l.Token == "" {
		return fmt.Errorf("redisclaims: %s %q: %w", verb, l.Key, broker.ErrLeaseLost)
	}
	state, lease := s.Keys(l.Key)
	args = append([]any{l.Token, newToken(), markTTL.Milliseconds()}, args...)
	n, err := script.Run(ctx, s.client, []string{state, lease, state + ":settled"}, args...).Int()
	if err != nil {
		return fmt.Errorf("redisclaims: %s %q: %w", verb, l.Key, err)
	}
	if n != 1 {
		return fmt.Errorf("redisclaims: %s %q: %w", verb, l.Key, broker.ErrLeaseLost)
	}
	return nil
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
