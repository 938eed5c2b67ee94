package redisclaims_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/redisclaims"
	"github.com/geodlq/geodlq/replay/redisclaims/internal/redistest"
)

// A stale holder is fenced out even when the claim that replaced it has
// lapsed too: the key's state remembers the latest token, so "nobody
// claimed since" is decided exactly, not from the lease key's absence.
func TestStaleHolderFencedAfterTakeoverExpired(t *testing.T) {
	ctx := context.Background()
	s, err := redisclaims.New(newClient(t), &redisclaims.Options{Prefix: uniquePrefix(t)})
	require.NoError(t, err)
	const ttl = 40 * time.Millisecond
	stale, st, err := s.Claim(ctx, "k", ttl)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
	time.Sleep(ttl + 20*time.Millisecond)
	second, st, err := s.Claim(ctx, "k", ttl)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
	time.Sleep(ttl + 20*time.Millisecond)
	require.ErrorIs(t, s.Complete(ctx, stale), broker.ErrLeaseLost, "a takeover happened, even though it lapsed as well")
	require.ErrorIs(t, s.Release(ctx, stale), broker.ErrLeaseLost)
	require.NoError(t, s.Complete(ctx, second), "the latest holder completes after its lease lapsed")
	_, st, err = s.Claim(ctx, "k", ttl)
	require.NoError(t, err)
	require.Equal(t, replay.StatusDone, st)
}

// A released lease cannot complete afterwards, and neither can a lease
// that was never granted.
func TestReleasedOrForgedLeaseCannotComplete(t *testing.T) {
	ctx := context.Background()
	s, err := redisclaims.New(newClient(t), &redisclaims.Options{Prefix: uniquePrefix(t)})
	require.NoError(t, err)
	l, _, err := s.Claim(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, l))
	require.ErrorIs(t, s.Complete(ctx, l), broker.ErrLeaseLost)
	require.ErrorIs(t, s.Release(ctx, l), broker.ErrLeaseLost)
	for _, forged := range []replay.Lease{{Key: "k"}, {Key: "k", Token: "nope"}, {Key: "", Token: l.Token}} {
		require.ErrorIs(t, s.Complete(ctx, forged), broker.ErrLeaseLost)
	}
	l2, st, err := s.Claim(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
	require.NoError(t, s.Complete(ctx, l2))
}

// Redis keys: the done marker lives forever by default, expires with
// DoneTTL, and a lapsed claim's state expires StateRetention after its
// lease (then a late Complete is refused rather than guessed).
func TestKeyLifetimes(t *testing.T) {
	ctx := context.Background()
	client := newClient(t)
	prefix := uniquePrefix(t)

	forever, err := redisclaims.New(client, &redisclaims.Options{Prefix: prefix})
	require.NoError(t, err)
	l, _, err := forever.Claim(ctx, "forever", time.Minute)
	require.NoError(t, err)
	state, lease := forever.Keys("forever")
	require.Positive(t, client.PTTL(ctx, lease).Val(), "the lease is a PX key")
	require.NoError(t, forever.Complete(ctx, l))
	require.Equal(t, "done", client.Get(ctx, state).Val())
	require.Equal(t, time.Duration(-1), client.PTTL(ctx, state).Val(), "done is kept forever by default")
	require.Zero(t, client.Exists(ctx, lease).Val(), "the lease key is gone once done")

	short, err := redisclaims.New(client, &redisclaims.Options{Prefix: prefix, DoneTTL: 50 * time.Millisecond, StateRetention: 30 * time.Millisecond})
	require.NoError(t, err)
	l, _, err = short.Claim(ctx, "short", time.Minute)
	require.NoError(t, err)
	require.NoError(t, short.Complete(ctx, l))
	_, st, err := short.Claim(ctx, "short", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusDone, st)
	time.Sleep(120 * time.Millisecond)
	_, st, err = short.Claim(ctx, "short", 20*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st, "after DoneTTL the key is new again")

	late, _, err := short.Claim(ctx, "late", 20*time.Millisecond)
	require.NoError(t, err)
	time.Sleep(120 * time.Millisecond) // lease 20ms + retention 30ms have passed
	require.ErrorIs(t, short.Complete(ctx, late), broker.ErrLeaseLost, "past StateRetention a late Complete is refused")
}

// Both keys of an idempotency key hash to one cluster slot, whatever
// bytes the key holds, so the Lua scripts are valid on Redis Cluster.
func TestKeysShareASlot(t *testing.T) {
	s, err := redisclaims.New(newClient(t), nil)
	require.NoError(t, err)
	for _, k := range []string{"idem:v1:abc", "{", "}", "}x", "{}", "a}b{c", "ünï{cø}dé", "\x00\xff", strings.Repeat("z", 300)} {
		state, lease := s.Keys(k)
		require.True(t, strings.HasPrefix(state, redisclaims.DefaultPrefix))
		require.Equal(t, slot(state), slot(lease), "key %q: %q and %q", k, state, lease)
	}
}

func TestOptionsAndArguments(t *testing.T) {
	ctx := context.Background()
	client := newClient(t)
	_, err := redisclaims.New(nil, nil)
	require.Error(t, err)
	for _, o := range []*redisclaims.Options{{Prefix: "a{b"}, {Prefix: "a}"}, {DoneTTL: -1}, {StateRetention: -1}} {
		_, err := redisclaims.New(client, o)
		require.Error(t, err, "%+v", o)
	}
	s, err := redisclaims.New(client, &redisclaims.Options{Prefix: uniquePrefix(t)})
	require.NoError(t, err)
	require.Same(t, client, s.Client())
	_, _, err = s.Claim(ctx, "", time.Minute)
	require.Error(t, err, "empty key")
	_, _, err = s.Claim(ctx, "k", 0)
	require.Error(t, err, "zero ttl")
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = s.Claim(canceled, "k", time.Minute)
	require.ErrorIs(t, err, context.Canceled)

	// A sub-millisecond ttl rounds up to 1ms instead of PX 0 (an error).
	_, st, err := s.Claim(ctx, "tiny", 10*time.Microsecond)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
}

// Two prefixes are two independent stores on one Redis.
func TestPrefixesAreIsolated(t *testing.T) {
	ctx := context.Background()
	client := newClient(t)
	a, err := redisclaims.New(client, &redisclaims.Options{Prefix: uniquePrefix(t)})
	require.NoError(t, err)
	b, err := redisclaims.New(client, &redisclaims.Options{Prefix: uniquePrefix(t)})
	require.NoError(t, err)
	l, _, err := a.Claim(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, a.Complete(ctx, l))
	_, st, err := b.Claim(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
}

// slot is Redis Cluster's key slot: CRC16-XMODEM of the hash tag (or the
// whole key) modulo 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// The CRC16 above is Redis's: the slot of "123456789" is known.
func TestSlotFunction(t *testing.T) {
	require.Equal(t, uint16(0x31C3%16384), slot("123456789"))
	require.Equal(t, slot("{user1000}.following"), slot("{user1000}.followers"))
	require.Equal(t, slot("foo{}{bar}"), slot("foo{}{bar}"))
	require.NotEqual(t, slot("foo{}{bar}"), slot("bar"), "an empty tag hashes the whole key")
}

// A call whose reply is lost after Redis ran it — go-redis then retries
// it on a new connection — reports what the first attempt did: Claim
// "acquired" (not "in progress" against itself), Complete and Release
// success (not "lease lost"); a second call of a settled lease still
// fails.
func TestRetriedCallsReportTheirOutcome(t *testing.T) {
	ctx := context.Background()
	prefix := uniquePrefix(t)
	p := redistest.NewFaultProxy(t)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisclaims.New(c, &redisclaims.Options{Prefix: prefix})
	require.NoError(t, err)
	// Warm up: the scripts in Redis's cache.
	warm, _, err := s.Claim(ctx, "warm", time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, warm))
	other, _, err := s.Claim(ctx, "warm-2", time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, other))

	tests := []struct {
		name   string
		settle func(context.Context, replay.Lease) error
		after  replay.Status
	}{
		{"complete", s.Complete, replay.StatusDone},
		{"release", s.Release, replay.StatusAcquired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "retried-" + tc.name
			hits := p.Hits()
			p.DropReply(key)
			l, st, err := s.Claim(ctx, key, time.Minute)
			require.NoError(t, err)
			require.Equal(t, hits+1, p.Hits(), "the fault was injected")
			require.Equal(t, replay.StatusAcquired, st, "the retry finds its own token")
			p.DropReply(key)
			require.NoError(t, tc.settle(ctx, l), "the retry finds its own mark")
			require.ErrorIs(t, tc.settle(ctx, l), broker.ErrLeaseLost, "a second call")
			_, st, err = s.Claim(ctx, key, time.Minute)
			require.NoError(t, err)
			require.Equal(t, tc.after, st)
		})
	}
	require.Equal(t, 4, p.Hits())
}
