// Package claimstest is the conformance suite for [replay.Claims] stores:
// in-memory, Redis and PostgreSQL implementations all pass it, and so can
// one you write. Call [RunConformanceTests] with a function that returns a
// fresh, empty store.
package claimstest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/replay"
)

// Harness gives the suite a claims store.
type Harness struct {
	// New returns a store whose keys are all unclaimed. Stores returned by
	// successive calls within one test may share data (the suite uses
	// unique keys), as separate processes sharing a database would.
	New func(ctx context.Context, t *testing.T) (replay.Claims, error)
	// MinTTL is the shortest lease the store supports with precision
	// (Redis PX: 1ms; a database clock: tens of ms). The suite's expiry
	// tests use leases of a few MinTTL. Default 50ms.
	MinTTL time.Duration
}

// RunConformanceTests runs the suite.
func RunConformanceTests(t *testing.T, h Harness) {
	t.Helper()
	if h.MinTTL <= 0 {
		h.MinTTL = 50 * time.Millisecond
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, c replay.Claims, h Harness)
	}{
		{"ClaimThenComplete", testClaimComplete},
		{"LiveClaimIsExclusive", testExclusive},
		{"ReleaseAllowsReclaim", testRelease},
		{"ExpiredClaimCanBeRetaken", testExpiry},
		{"StaleHolderIsFenced", testFencing},
		{"CompleteAfterExpiryWithoutTakeover", testLateComplete},
		{"DoneIsFinal", testDoneFinal},
		{"ConcurrentClaimsOneWinner", testConcurrent},
		{"OnceRunsExactlyOnce", testOnce},
		{"OnceReleasesOnFailure", testOnceFailure},
		{"Contention", testContention},
		{"KeysVerbatim", testVerbatimKeys},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := h.New(context.Background(), t)
			require.NoError(t, err)
			tc.fn(t, c, h)
		})
	}
}

func key(t *testing.T, s string) string {
	return fmt.Sprintf("claimstest:%s:%d:%s", t.Name(), time.Now().UnixNano(), s)
}

func testClaimComplete(t *testing.T, c replay.Claims, _ Harness) {
	ctx := context.Background()
	k := key(t, "a")
	l, st, err := c.Claim(ctx, k, time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
	require.Equal(t, k, l.Key)
	require.NotEmpty(t, l.Token)
	require.True(t, l.ExpiresAt.After(time.Now()), "lease expires in the future")
	require.NoError(t, c.Complete(ctx, l))
	_, st, err = c.Claim(ctx, k, time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusDone, st, "a completed key short-circuits")
}

func testExclusive(t *testing.T, c replay.Claims, _ Harness) {
	ctx := context.Background()
	k := key(t, "x")
	l, st, err := c.Claim(ctx, k, time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
	_, st, err = c.Claim(ctx, k, time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusInProgress, st, "a live claim blocks others")
	require.NoError(t, c.Complete(ctx, l))
}

func testRelease(t *testing.T, c replay.Claims, _ Harness) {
	ctx := context.Background()
	k := key(t, "r")
	l, _, err := c.Claim(ctx, k, time.Minute)
	require.NoError(t, err)
	require.NoError(t, c.Release(ctx, l))
	l2, st, err := c.Claim(ctx, k, time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st, "a released key can be claimed at once")
	require.NotEqual(t, l.Token, l2.Token, "a new claim gets a new token")
	require.ErrorIs(t, c.Release(ctx, l), broker.ErrLeaseLost, "the old lease cannot release the new claim")
	require.NoError(t, c.Complete(ctx, l2))
}

func testExpiry(t *testing.T, c replay.Claims, h Harness) {
	ctx := context.Background()
	k := key(t, "e")
	ttl := 4 * h.MinTTL
	_, st, err := c.Claim(ctx, k, ttl)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
	// The holder crashes. After the TTL the key can be retaken.
	time.Sleep(ttl + 2*h.MinTTL)
	l2, st, err := c.Claim(ctx, k, time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st, "an expired claim can be retaken")
	require.NoError(t, c.Complete(ctx, l2))
}

func testFencing(t *testing.T, c replay.Claims, h Harness) {
	ctx := context.Background()
	k := key(t, "f")
	ttl := 4 * h.MinTTL
	stale, _, err := c.Claim(ctx, k, ttl)
	require.NoError(t, err)
	time.Sleep(ttl + 2*h.MinTTL)
	fresh, st, err := c.Claim(ctx, k, time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusAcquired, st)
	require.ErrorIs(t, c.Complete(ctx, stale), broker.ErrLeaseLost, "the stale holder cannot complete")
	require.ErrorIs(t, c.Release(ctx, stale), broker.ErrLeaseLost, "nor release")
	_, st, err = c.Claim(ctx, k, time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusInProgress, st, "the fresh claim is intact")
	require.NoError(t, c.Complete(ctx, fresh))
}

func testLateComplete(t *testing.T, c replay.Claims, h Harness) {
	ctx := context.Background()
	k := key(t, "late")
	ttl := 4 * h.MinTTL
	l, _, err := c.Claim(ctx, k, ttl)
	require.NoError(t, err)
	time.Sleep(ttl + 2*h.MinTTL)
	require.NoError(t, c.Complete(ctx, l), "completing after expiry succeeds when nobody took over")
	_, st, err := c.Claim(ctx, k, time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusDone, st)
}

func testDoneFinal(t *testing.T, c replay.Claims, h Harness) {
	ctx := context.Background()
	k := key(t, "d")
	l, _, err := c.Claim(ctx, k, 4*h.MinTTL)
	require.NoError(t, err)
	require.NoError(t, c.Complete(ctx, l))
	require.ErrorIs(t, c.Complete(ctx, l), broker.ErrLeaseLost, "completing twice fails")
	require.ErrorIs(t, c.Release(ctx, l), broker.ErrLeaseLost, "releasing a done key fails")
	time.Sleep(6 * h.MinTTL)
	_, st, err := c.Claim(ctx, k, time.Minute)
	require.NoError(t, err)
	require.Equal(t, replay.StatusDone, st, "done outlives the lease")
}

func testConcurrent(t *testing.T, c replay.Claims, h Harness) {
	ctx := context.Background()
	const keys, workers = 50, 8
	base := key(t, "c")
	var acquired [keys]atomic.Int32
	var wg sync.WaitGroup
	stores := make([]replay.Claims, workers)
	for w := range workers {
		s, err := h.New(ctx, t)
		require.NoError(t, err)
		stores[w] = s
	}
	for w := range workers {
		wg.Go(func() {
			for i := range keys {
				_, st, err := stores[w].Claim(ctx, base+strconv.Itoa(i), time.Minute)
				if err != nil {
					t.Errorf("Claim: %v", err)
					return
				}
				if st == replay.StatusAcquired {
					acquired[i].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for i := range keys {
		require.EqualValues(t, 1, acquired[i].Load(), "key %d acquired by exactly one of %d workers", i, workers)
	}
}

func testOnce(t *testing.T, c replay.Claims, h Harness) {
	ctx := context.Background()
	k := key(t, "once")
	var runs atomic.Int32
	fn := func(context.Context) error { runs.Add(1); return nil }
	var wg sync.WaitGroup
	for range 8 {
		s, err := h.New(ctx, t)
		require.NoError(t, err)
		wg.Go(func() {
			for range 5 {
				res, err := replay.Once(ctx, s, k, time.Minute, fn)
				if err != nil && !errors.Is(err, replay.ErrInProgress) {
					t.Errorf("Once: %v", err)
				}
				_ = res
			}
		})
	}
	wg.Wait()
	res, err := replay.Once(ctx, c, k, time.Minute, fn)
	require.NoError(t, err)
	require.False(t, res.Ran)
	require.Equal(t, replay.StatusDone, res.Status)
	require.EqualValues(t, 1, runs.Load(), "40 concurrent calls ran the side effect once")
}

// testContention runs many workers, each with its own handle, over the
// same small set of keys in different orders — claims, completions and
// releases of the same rows at once, the load under which a SQL store's
// transactions deadlock — and checks that every key's side effect ran
// exactly once and that no call failed for any reason but the key being
// in progress elsewhere: a store must absorb its database's conflicts
// (deadlock victims, lock-wait timeouts, serialization failures) itself.
func testContention(t *testing.T, c replay.Claims, h Harness) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const keys, workers = 24, 12
	base := key(t, "k")
	var runs, failures [keys]atomic.Int32
	stores := make([]replay.Claims, workers)
	for w := range workers {
		s, err := h.New(ctx, t)
		require.NoError(t, err)
		stores[w] = s
	}
	boom := errors.New("side effect failed")
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			order := rng.Perm(keys)
			for _, i := range order {
				for ctx.Err() == nil {
					res, err := replay.Once(ctx, stores[w], base+strconv.Itoa(i), 20*time.Second, func(context.Context) error {
						// Fail a side effect now and then, so that
						// releases contend too; then run it.
						if rng.IntN(5) == 0 {
							failures[i].Add(1)
							return boom
						}
						runs[i].Add(1)
						return nil
					})
					switch {
					case errors.Is(err, replay.ErrInProgress), errors.Is(err, boom):
						time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
						continue
					case err != nil:
						t.Errorf("worker %d, key %d: Once: %v", w, i, err)
						return
					}
					if res.Ran || res.Status == replay.StatusDone {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "every worker saw every key done in time")
	for i := range keys {
		require.EqualValues(t, 1, runs[i].Load(), "key %d's side effect ran exactly once (%d failed attempts released it)", i, failures[i].Load())
		_, st, err := c.Claim(ctx, base+strconv.Itoa(i), time.Minute)
		require.NoError(t, err)
		require.Equal(t, replay.StatusDone, st, "key %d", i)
	}
}

func testOnceFailure(t *testing.T, c replay.Claims, _ Harness) {
	ctx := context.Background()
	k := key(t, "fail")
	boom := errors.New("boom")
	_, err := replay.Once(ctx, c, k, time.Minute, func(context.Context) error { return boom })
	require.ErrorIs(t, err, boom)
	res, err := replay.Once(ctx, c, k, time.Minute, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.True(t, res.Ran, "a failed side effect released its claim so the retry ran")
}

func testVerbatimKeys(t *testing.T, c replay.Claims, _ Harness) {
	ctx := context.Background()
	for _, k := range []string{
		"idem:v1:abc",
		key(t, "spaces and: colons/slashes?*[]"),
		key(t, "ünïcødé-🗺"),
		key(t, "{braces}"),
	} {
		l, st, err := c.Claim(ctx, k, time.Minute)
		require.NoError(t, err, k)
		if st == replay.StatusDone {
			continue // "idem:v1:abc" may be shared with an earlier run on a persistent store
		}
		require.Equal(t, replay.StatusAcquired, st, k)
		require.Equal(t, k, l.Key)
		require.NoError(t, c.Complete(ctx, l))
		_, st, err = c.Claim(ctx, k, time.Minute)
		require.NoError(t, err)
		require.Equal(t, replay.StatusDone, st, k)
	}
	// Keys that differ only in case or a trailing space are different keys.
	a := key(t, "Case")
	la, _, err := c.Claim(ctx, a, time.Minute)
	require.NoError(t, err)
	for _, other := range []string{a + " ", strings.Replace(a, ":Case", ":case", 1)} {
		_, st, err := c.Claim(ctx, other, time.Minute)
		require.NoError(t, err)
		require.Equal(t, replay.StatusAcquired, st, "%q is not %q", other, a)
	}
	require.NoError(t, c.Complete(ctx, la))
}
