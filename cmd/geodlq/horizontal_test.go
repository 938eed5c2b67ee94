package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/internal/dlqgen"
	"github.com/geodlq/geodlq/internal/testenv"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/pgclaims"
)

// horizontalDest is the dead-letter destination the horizontal replay
// tests fill; its events' source topic is spatial.events.
const (
	horizontalDest   = "spatial.events.poison.dlt"
	horizontalSource = "spatial.events"
)

// horizontalStore makes a fresh PostGIS store in its own schema (dropped
// at the end), fills horizontalDest with n realistic dead letters
// (internal/dlqgen: every class, GEOS's reasons) and returns the store
// URL (with leaseTTL) and the DSN and schema.
func horizontalStore(tb testing.TB, n int, leaseTTL time.Duration) (storeURL, dsn, schema string) {
	tb.Helper()
	dsn = testenv.Postgres(tb)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	schema = "geodlq_horiz_" + hex.EncodeToString(rnd[:])
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	storeURL = dsn + sep + "geodlq_schema=" + schema + "&lease_ttl=" + leaseTTL.String()
	tb.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			_ = conn.Close(context.Background())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := broker.OpenStore(ctx, storeURL, &broker.OpenOptions{Create: true})
	require.NoError(tb, err)
	defer s.Close()
	g, err := dlqgen.New(&dlqgen.Options{Seed: 23})
	require.NoError(tb, err)
	require.NoError(tb, dlqgen.Fill(ctx, s, horizontalDest, g, n, &dlqgen.FillOptions{Batch: 250, Workers: 2}))
	return storeURL, dsn, schema
}

// replayProcess starts `geodlq replay` over horizontalDest as a process,
// re-injecting into the same PostGIS store (as a second host would, with
// the same URL).
func replayProcess(ctx context.Context, bin, storeURL string, extra ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	args := append([]string{"--store", storeURL, "replay", "-o", "json", "--dest", horizontalDest,
		"--repair", "make-valid,reproject+make-valid", "--target", storeURL}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return cmd, &out, &errb
}

// TestReplayAcrossProcesses is issue 23's horizontal replay: one
// dead-letter destination on PostgreSQL replayed by several `geodlq
// replay` processes at once (as on several hosts: nothing is shared but
// the store; two of them working on four records at once), one more
// SIGKILLed mid-run, and then consumed by
// several workers that take PostgreSQL claims (replay/pgclaims) before
// their side effect. Nothing is lost and nothing is done twice: every
// replayable record is acknowledged once; the source topic holds one
// re-injection per acknowledged record, plus at most the batch the
// killed process had published but not acknowledged; and every event's
// side effect happens exactly once.
func TestReplayAcrossProcesses(t *testing.T) {
	t.Parallel()
	const n, procs = 600, 4
	storeURL, dsn, schema := horizontalStore(t, n, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	s, err := broker.OpenStore(ctx, storeURL, nil)
	require.NoError(t, err)
	defer s.Close()
	reinjected := func() int { return pendingIn(ctx, t, s, horizontalSource) }

	// The victim: SIGKILLed once it has re-injected a few records, with
	// leases held and perhaps a re-injection published but not
	// acknowledged. Its leases lapse after lease_ttl (5 s).
	victim, _, verr := replayProcess(ctx, raceBinary, storeURL)
	require.NoError(t, victim.Start())
	for reinjected() < 10 {
		if victim.ProcessState != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, victim.Process.Signal(syscall.SIGKILL))
	require.Error(t, victim.Wait(), "the victim was killed mid-run: %s", verr)
	killedAt := reinjected()
	require.GreaterOrEqual(t, killedAt, 10)

	// Four replayers at once, then a last one after the victim's leases
	// have lapsed.
	reports := make([]replayReport, procs)
	var wg sync.WaitGroup
	errs := make([]error, procs)
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Two of them work on four records at once.
			cmd, out, errb := replayProcess(ctx, raceBinary, storeURL, "--concurrency", fmt.Sprint(1+3*(i%2)))
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("replayer %d: %w\n%s", i, err, errb)
				return
			}
			errs[i] = json.Unmarshal(out.Bytes(), &reports[i])
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	time.Sleep(6 * time.Second) // the victim's leases (5 s) have lapsed
	cmd, out, errb := replayProcess(ctx, raceBinary, storeURL)
	require.NoError(t, cmd.Run(), "%s", errb)
	var last replayReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &last))

	acked := 0
	for i, r := range reports {
		require.Zero(t, r.Counts["publish_failed"]+r.Counts["ack_failed"]+r.Counts["restore_failed"], "replayer %d: %+v", i, r.Counts)
		acked += r.Counts["replayed"] + r.Counts["repaired"]
		t.Logf("replayer %d: examined %d, %v", i, r.Examined, r.Counts)
	}
	acked += last.Counts["replayed"] + last.Counts["repaired"]
	t.Logf("victim killed after %d re-injections; last run: examined %d, %v", killedAt, last.Examined, last.Counts)
	require.Positive(t, acked)

	// What is left pending is what no replay acknowledges (skipped,
	// repair_failed, still_fails): a further run acknowledges nothing.
	again, aout, aerr := replayProcess(ctx, raceBinary, storeURL)
	require.NoError(t, again.Run(), "%s", aerr)
	var rest replayReport
	require.NoError(t, json.Unmarshal(aout.Bytes(), &rest))
	require.Zero(t, rest.Counts["replayed"]+rest.Counts["repaired"], "%+v", rest.Counts)

	// The source topic: one re-injection per dead letter acknowledged,
	// by any process, the victim included; at most one more (the
	// victim's publish that it did not live to acknowledge).
	byRecord := map[string]int{}
	keys := map[string]string{} // record id → idempotency key
	err = s.ScanAll(ctx, broker.ListOptions{Destination: horizontalSource, IncludeReplayed: true, Limit: broker.MaxListLimit},
		func(e broker.Entry) error {
			m := e.Record.Message
			of, key := m.Header(broker.HeaderReplayOf), m.Header(broker.HeaderIdempotencyKey)
			if of == "" || key == "" {
				return fmt.Errorf("re-injected message %s without %s or %s", e.Record.ID, broker.HeaderReplayOf, broker.HeaderIdempotencyKey)
			}
			byRecord[of]++
			if k, ok := keys[of]; ok && k != key {
				return fmt.Errorf("record %s re-injected under two keys %q and %q", of, k, key)
			}
			keys[of] = key
			return nil
		})
	require.NoError(t, err)
	dup := 0
	for id, c := range byRecord {
		if c > 1 {
			dup += c - 1
			t.Logf("record %s re-injected %d times", id, c)
		}
	}
	// The store re-injects a batch together (one PublishBatch, then one
	// acknowledgement): the victim may have died between the two, so
	// its last batch — at most the replayer's batch size, 100 — may be
	// re-injected again by another process. The consumers' claims
	// absorb those duplicates (below).
	require.LessOrEqual(t, dup, 100, "only the killed replayer's last batch may be repeated")
	ackedInStore := n - pendingIn(ctx, t, s, horizontalDest)
	require.Equal(t, ackedInStore, len(byRecord), "every acknowledged record re-injected, and only those")
	require.GreaterOrEqual(t, ackedInStore, acked, "the victim's acknowledgements come on top of the reports'")

	// Consumers on three "hosts": each its own pool and claims, the
	// side effect under replay.Once. Every event's effect happens once,
	// duplicates or not.
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	effects := pgx.Identifier{schema, "side_effects"}.Sanitize()
	_, err = pool.Exec(ctx, "CREATE TABLE "+effects+" (key text NOT NULL, record text NOT NULL)")
	require.NoError(t, err)
	consumeAll(ctx, t, storeURL, dsn, schema, effects, 3)

	var rows, distinct int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT key) FROM "+effects).Scan(&rows, &distinct))
	wantKeys := map[string]bool{}
	for _, k := range keys {
		wantKeys[k] = true
	}
	require.Equal(t, len(wantKeys), distinct, "every re-injected event's effect happened")
	require.Equal(t, distinct, rows, "no event's effect happened twice")
}

// pendingIn counts the records of dest not yet acknowledged (for the
// source topic: the re-injected events no consumer has taken yet).
func pendingIn(ctx context.Context, t *testing.T, s *broker.Store, dest string) int {
	t.Helper()
	cs, err := s.Stats(ctx, broker.StatsOptions{Destination: dest})
	require.NoError(t, err)
	total := 0
	for _, c := range cs {
		total += c.Pending + c.Leased
	}
	return total
}

// consumeAll runs workers consumers of horizontalSource, each with its
// own store handle, pool and pgclaims.Claims, until the topic is drained:
// each message's side effect (a row in effects) runs under replay.Once
// with the message's idempotency key, and the message is acknowledged
// after.
func consumeAll(ctx context.Context, t *testing.T, storeURL, dsn, schema, effects string, workers int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = consume(ctx, storeURL, dsn, schema, effects)
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}

func consume(ctx context.Context, storeURL, dsn, schema, effects string) error {
	s, err := broker.OpenStore(ctx, storeURL, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	claims, err := pgclaims.New(ctx, pool, &pgclaims.Options{Schema: schema, Create: true})
	if err != nil {
		return err
	}
	for empty := 0; empty < 3; {
		recs, err := s.Fetch(ctx, horizontalSource, broker.Filter{}, 50)
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			empty++
			time.Sleep(100 * time.Millisecond)
			continue
		}
		empty = 0
		for _, r := range recs {
			key := r.Message.Header(broker.HeaderIdempotencyKey)
			_, err := replay.Once(ctx, claims, key, time.Minute, func(ctx context.Context) error {
				_, err := pool.Exec(ctx, "INSERT INTO "+effects+" (key, record) VALUES ($1, $2)", key, r.ID)
				return err
			})
			switch {
			case errors.Is(err, replay.ErrInProgress):
				// Another consumer holds the key's claim: leave the
				// message for redelivery, as a broker consumer would.
				if err := s.Release(ctx, r); err != nil {
					return err
				}
				continue
			case err != nil:
				return err
			}
			if err := s.Ack(ctx, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// BenchmarkReplayAcrossProcesses measures horizontal replay (issue 23:
// ≥ 5,000 records/s with PostgreSQL and 4 processes): GEODLQ_BENCH_N
// (default 20,000) realistic dead letters on PostGIS, replayed by 1 and
// by 4 `geodlq replay` processes at once into the same store, each
// working on 1 or 4 records at once (--concurrency). It reports
// records examined per second (every record is leased, restored,
// repaired or checked, and re-injected and acknowledged or left) and
// records acknowledged per second.
//
//	cd cmd/geodlq && go test -run '^$' -bench ReplayAcrossProcesses -benchtime 1x -count 3 .
func BenchmarkReplayAcrossProcesses(b *testing.B) {
	n := 20_000
	if v := os.Getenv("GEODLQ_BENCH_N"); v != "" {
		_, err := fmt.Sscan(v, &n)
		require.NoError(b, err)
	}
	for _, c := range []struct{ procs, conc int }{{1, 1}, {1, 4}, {4, 1}, {4, 4}} {
		procs := c.procs
		b.Run(fmt.Sprintf("procs=%d/concurrency=%d", c.procs, c.conc), func(b *testing.B) {
			var examined, acked int
			var elapsed time.Duration
			for range b.N {
				b.StopTimer()
				storeURL, _, _ := horizontalStore(b, n, 30*time.Second)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
				reports := make([]replayReport, procs)
				errs := make([]error, procs)
				var wg sync.WaitGroup
				b.StartTimer()
				start := time.Now()
				for i := range procs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cmd, out, errb := replayProcess(ctx, raceBinary, storeURL, "--concurrency", fmt.Sprint(c.conc))
						if err := cmd.Run(); err != nil {
							errs[i] = fmt.Errorf("replayer %d: %w\n%s", i, err, errb)
							return
						}
						errs[i] = json.Unmarshal(out.Bytes(), &reports[i])
					}()
				}
				wg.Wait()
				elapsed += time.Since(start)
				b.StopTimer()
				cancel()
				require.NoError(b, errors.Join(errs...))
				for _, r := range reports {
					examined += r.Examined
					acked += r.Counts["replayed"] + r.Counts["repaired"]
				}
			}
			b.ReportMetric(float64(examined)/elapsed.Seconds(), "records/s")
			b.ReportMetric(float64(acked)/elapsed.Seconds(), "acked/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
