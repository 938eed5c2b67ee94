package sqlite_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/sqlite"
)

// hog holds the file's write lock for random spells, now and then a long
// one, through a connection of its own, as another process would, until
// stop is closed.
func hog(t *testing.T, path string, stop <-chan struct{}) *sync.WaitGroup {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer db.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := db.Conn(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := c.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err == nil {
				spell := time.Duration(rand.N(3000)) * time.Microsecond
				if rand.N(250) == 0 {
					spell = 110 * time.Millisecond // longer than a busy quantum: a waiter checks its context
				}
				time.Sleep(spell)
				_, _ = c.ExecContext(context.Background(), "COMMIT")
			}
			_ = c.Close()
			time.Sleep(time.Duration(rand.N(1500)) * time.Microsecond)
		}
	})
	return &wg
}

// TestInterruptedWrites cancels the driver's own Publish, Fetch and Ack —
// the portable store would keep a caller's cancellation from them — at
// random points, while another connection keeps taking the write lock, and
// checks that every outcome reported is the outcome on disk: nil when the
// write happened, once; an error wrapping context.Canceled when nothing
// changed.
func TestInterruptedWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cancel.db")
	s, err := sqlite.Open(ctx, path, &sqlite.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Hour}})
	require.NoError(t, err)
	defer s.Close()
	drv := s.Driver()
	var db *sql.DB
	require.True(t, s.As(&db))
	stop := make(chan struct{})
	wg := hog(t, path, stop)
	defer func() { close(stop); wg.Wait() }()

	const n = 200
	const dest = "interrupted"
	tmpl := brokertest.Message(t, brokertest.SampleInputs()[0])
	// window follows the typical time of a write on this machine now (the
	// hog's spells included), measured rather than assumed: on a quiet
	// machine a write takes far less than on a loaded one, and a fixed
	// window let every write finish before its cancellation.
	var took []time.Duration
	for i := range 21 {
		start := time.Now()
		require.NoError(t, drv.Publish(ctx, "calibrate", &broker.Message{Body: brokertest.VariantBody(t, tmpl.Body, n+i)}))
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	window := took[len(took)/2] / 4
	t.Logf("median write %v: cancelling within %v", took[len(took)/2], window)
	// cancelled returns a context cancelled at a random point within
	// a quarter of the median write (a write that has begun its commit
	// finishes; the interruptions happen before it).
	cancelled := func() (context.Context, func()) {
		c, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(rand.N(window+1), cancel)
		return c, func() { timer.Stop(); cancel() }
	}
	outcome := func(err error) bool {
		t.Helper()
		if err != nil {
			require.ErrorIs(t, err, context.Canceled, "an interrupted write reports the cancellation, and nothing else")
		}
		return err == nil
	}

	// Publish: stored exactly when it returned nil.
	stored := map[[32]byte]bool{}
	var interrupted int
	for i := range n {
		body := brokertest.VariantBody(t, tmpl.Body, i)
		c, done := cancelled()
		ok := outcome(drv.Publish(c, dest, &broker.Message{Body: body}))
		done()
		stored[sha256.Sum256(body)] = ok
		if !ok {
			interrupted++
		}
	}
	entries := all(t, s, dest)
	got := map[[32]byte]int{}
	for _, e := range entries {
		got[sha256.Sum256(e.Record.Message.Body)]++
	}
	for sum, ok := range stored {
		if ok {
			require.Equal(t, 1, got[sum], "a Publish that returned nil stored its message once")
		} else {
			require.Zero(t, got[sum], "a Publish that returned an error stored nothing")
		}
	}
	require.Positive(t, interrupted, "some publishes were interrupted (the test exercised cancellation)")
	require.Less(t, interrupted, n, "and some were not")
	t.Logf("publish: %d of %d interrupted", interrupted, n)

	// Fetch: a record is leased exactly when a Fetch returned it.
	var held []*broker.Record
	interrupted = 0
	for len(held) < len(entries) {
		c, done := cancelled()
		recs, err := drv.Fetch(c, dest, broker.Filter{}, 1+rand.N(3))
		done()
		if outcome(err) {
			held = append(held, recs...)
		} else {
			interrupted++
		}
		var leased int
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM dlq_records WHERE lease_token IS NOT NULL`).Scan(&leased))
		require.Equal(t, len(held), leased, "the leased records are the ones fetched")
	}
	t.Logf("fetch: %d interrupted", interrupted)

	// Ack: replayed exactly when Ack returned nil; an interrupted Ack
	// leaves the lease, so it can be retried.
	acked := map[string]bool{}
	interrupted = 0
	for _, r := range held {
		for {
			c, done := cancelled()
			ok := outcome(drv.Ack(c, r))
			done()
			var replayed, leased bool
			require.NoError(t, db.QueryRow(`SELECT acked_at IS NOT NULL, COALESCE(lease_token = ?, 0) FROM dlq_records WHERE id = ?`, r.Lease, r.ID).
				Scan(&replayed, &leased))
			if ok {
				acked[r.ID] = true
				require.True(t, replayed)
				break
			}
			interrupted++
			require.True(t, leased && !replayed, "an interrupted Ack changed nothing")
		}
	}
	require.Len(t, acked, len(held))
	require.Len(t, all(t, s, dest), len(held), "nothing was written twice")
	t.Logf("ack: %d interrupted", interrupted)
}

// all lists every record of destination, replayed ones included.
func all(t *testing.T, s *broker.Store, destination string) []broker.Entry {
	t.Helper()
	var out []broker.Entry
	require.NoError(t, s.ScanAll(context.Background(), broker.ListOptions{Destination: destination, IncludeReplayed: true, Limit: broker.MaxListLimit},
		func(e broker.Entry) error {
			out = append(out, e)
			return nil
		}))
	return out
}
