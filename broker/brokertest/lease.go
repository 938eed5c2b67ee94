package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
)

// interval is a lease a holder proved: from the moment its request was
// sent to the LeaseExpires it got.
type interval struct{ from, to time.Time }

// testLeaseRenewal: Fetch sets LeaseExpires to no more than the lease
// the harness configured; Renew keeps a record from every other consumer
// for as long as it is renewed, and is refused (ErrLeaseLost) once the
// record was released, acknowledged or taken over. The exclusivity is
// checked against every lease the holder proved: another consumer must
// never be given the record inside one, nor the holder prove one after
// another consumer was given it.
func testLeaseRenewal(t *testing.T, h Harness) {
	caps := h.Capabilities()
	require.Positive(t, caps.LeaseExpiry, "harness must declare LeaseExpiry")
	lease := caps.LeaseExpiry
	_, loose := caps.Unsupported[CapRenewHeld]
	ctx := context.Background()
	a, b := makeStore(t, h), reopen(t, h)
	d := dest(t, "renew")
	publish(t, a, d, Messages(t, SampleInputs()[:3])...)
	start := time.Now()
	recs := drain(t, a, d, broker.Filter{})
	end := time.Now()
	require.Len(t, recs, 3)
	for _, r := range recs {
		require.False(t, r.LeaseExpires.IsZero(), "Fetch sets the record's LeaseExpires")
		require.True(t, r.LeaseExpires.After(start), "LeaseExpires %v is after the Fetch began", r.LeaseExpires)
		require.False(t, r.LeaseExpires.After(end.Add(lease)),
			"LeaseExpires claims no more than the configured lease (%v): %v past the end of the Fetch", lease, r.LeaseExpires.Sub(end))
	}
	kept, released, acked := recs[0], recs[1], recs[2]

	require.NoError(t, a.Release(ctx, released))
	require.ErrorIs(t, a.Renew(ctx, released), broker.ErrLeaseLost, "a released record's lease cannot be renewed")
	require.NoError(t, a.Ack(ctx, acked))
	require.ErrorIs(t, a.Renew(ctx, acked), broker.ErrLeaseLost, "an acknowledged record's lease cannot be renewed")

	// The holder renews every quarter lease for three leases, while the
	// other consumer fetches all along.
	var (
		mu     sync.Mutex
		proven = []interval{{start, kept.LeaseExpires}}
		lost   error
		given  []interval // when the other consumer's Fetch that returned kept ran
		others []*broker.Record
	)
	stop := time.Now().Add(3 * lease)
	var wg sync.WaitGroup
	wg.Go(func() {
		for time.Now().Before(stop) {
			time.Sleep(lease / 4)
			sent := time.Now()
			err := a.Renew(ctx, kept)
			mu.Lock()
			if err != nil {
				lost = err
				mu.Unlock()
				return
			}
			proven = append(proven, interval{sent, kept.LeaseExpires})
			mu.Unlock()
			if !kept.LeaseExpires.After(sent) || kept.LeaseExpires.After(time.Now().Add(lease)) {
				t.Errorf("Renew set LeaseExpires %v after its request, want within (0, %v]", kept.LeaseExpires.Sub(sent), lease)
			}
		}
	})
	wg.Go(func() {
		for time.Now().Before(stop) {
			fs := time.Now()
			recs, err := b.Fetch(ctx, d, broker.Filter{}, 10)
			fe := time.Now()
			if err != nil {
				t.Errorf("Fetch: %v", err)
				return
			}
			for _, r := range recs {
				if r.ID == kept.ID {
					mu.Lock()
					given = append(given, interval{fs, fe})
					mu.Unlock()
				}
				others = append(others, r)
			}
			time.Sleep(lease / 10)
		}
	})
	wg.Wait()
	if lost != nil {
		require.ErrorIs(t, lost, broker.ErrLeaseLost, "a renewal fails only by losing the lease")
		require.True(t, loose, "the renewal of a live lease was refused: %v", lost)
		_ = a.Release(ctx, kept) // the record need not wait for its lease to end
	}
	for _, g := range given {
		for _, p := range proven {
			require.False(t, !g.from.Before(p.from) && !g.to.After(p.to),
				"another consumer was given the record (a Fetch from %s to %s) inside a lease its holder had proven (%s to %s)",
				g.from.Format(time.StampMicro), g.to.Format(time.StampMicro), p.from.Format(time.StampMicro), p.to.Format(time.StampMicro))
			require.False(t, p.from.After(g.to), "the holder proved a lease (renewal sent %s) after another consumer was given the record (%s)",
				p.from.Format(time.StampMicro), g.to.Format(time.StampMicro))
		}
	}
	if len(given) == 0 {
		require.True(t, loose || lost == nil)
		if lost == nil {
			require.NoError(t, a.Ack(ctx, kept), "the holder that renewed all along acknowledges")
		}
	} else {
		require.ErrorIs(t, a.Renew(ctx, kept), broker.ErrLeaseLost, "the old holder cannot renew a record taken over")
		require.ErrorIs(t, a.Ack(ctx, kept), broker.ErrLeaseLost, "nor acknowledge it")
	}
	require.True(t, loose || len(given) == 0, "a record renewed all along was never given to another consumer")
	// What the other consumer holds is acknowledged (the released record;
	// the kept one if it took it over). Duplicates of a record it fetched
	// twice (its own lease lapsed meanwhile) fail with ErrLeaseLost.
	seen := map[string]bool{}
	for i := len(others) - 1; i >= 0; i-- {
		r := others[i]
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		if err := b.Ack(ctx, r); err != nil {
			require.ErrorIs(t, err, broker.ErrLeaseLost, "Ack %s", r.ID)
		}
	}
	c := reopen(t, h)
	ackAll(t, c, drain(t, c, d, broker.Filter{}))
}

// testConcurrentReplayers: two replayers, each with its own handle (the
// second working on four records of its batch at once), work
// through the same destination at once with a lease shorter than a batch
// takes (every record's check sleeps an eighth of the lease, batches of
// ten): every record is re-injected exactly once between them, and then
// acknowledged. This is the guarantee of [replay.Replayer] (its
// [replay.LeaseKeeper] renews the batch's leases and fences each
// re-injection), held against the adapter's leases.
func testConcurrentReplayers(t *testing.T, h Harness) {
	caps := h.Capabilities()
	require.Positive(t, caps.LeaseExpiry, "harness must declare LeaseExpiry")
	lease := caps.LeaseExpiry
	ctx, cancel := context.WithTimeout(context.Background(), 40*lease+2*time.Minute)
	defer cancel()
	a, b := makeStore(t, h), reopen(t, h)
	d := dest(t, "replayers")
	const n = 40
	in := make([]Input, n)
	for i := range in {
		in[i] = Input{
			Payload:        []byte(fmt.Sprintf(`{"event_id":"evt-replay-%02d","geometry":{"type":"Point","coordinates":[%d,1]}}`, i, i)),
			IdempotencyKey: fmt.Sprintf("idem:test:replayers:%02d", i),
			Err:            classify.Transient(errors.New("tile server 503")),
		}
	}
	publish(t, a, d, Messages(t, in)...)
	target := memory.New(nil)
	newReplayer := func(src *broker.Store, conc int) *replay.Replayer {
		r, err := replay.New(&replay.Options{Source: src, Target: target, BatchSize: 10, Concurrency: conc,
			Route: func(*envelope.Envelope) (string, error) { return "reinjected", nil },
			// A slow check: a batch of ten takes longer than a lease.
			Check: func(ctx context.Context, _ []byte) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(lease / 8):
					return nil
				}
			}})
		require.NoError(t, err)
		return r
	}
	var wg sync.WaitGroup
	reps := make([]replay.Report, 2)
	for i, s := range []*broker.Store{a, b} {
		// The second works on four records of its batch at once.
		r := newReplayer(s, 1+3*i)
		wg.Go(func() {
			var err error
			reps[i], err = r.Run(ctx, replay.Request{Destination: d})
			if err != nil {
				t.Errorf("replayer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	// Records a replayer gave up (its lease lost to the other, or a
	// partition handed over as the group rebalanced) and the other did
	// not reach are replayed by later runs, one at a time.
	for memory.Len(target, "reinjected") < n && ctx.Err() == nil {
		rep, err := newReplayer(a, 1).Run(ctx, replay.Request{Destination: d})
		require.NoError(t, err)
		if rep.Examined == 0 {
			time.Sleep(lease / 4)
		}
	}
	count := map[string]int{}
	for _, m := range memory.Messages(target, "reinjected") {
		count[m.Header(broker.HeaderIdempotencyKey)]++
	}
	require.Len(t, count, n, "every record re-injected (%s | %s)", reps[0].Summary(), reps[1].Summary())
	for k, c := range count {
		require.Equal(t, 1, c, "%s re-injected exactly once (%s | %s)", k, reps[0].Summary(), reps[1].Summary())
	}
	require.Empty(t, drain(t, reopen(t, h), d, broker.Filter{}), "every record acknowledged")
}
