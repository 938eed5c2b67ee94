package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/replay"
)

const (
	poisonDest = "spatial.events.poison.dlt"
	retryDest  = "spatial.events.retry.dlt"
)

func testConfig(t *testing.T, schema string) config {
	return config{
		db: testPostgres(t), schema: schema, topic: "spatial.events", offloadDir: t.TempDir(),
		lease: 30 * time.Second, maxAttempts: 4, retryDelay: 5 * time.Millisecond, maxLine: 1 << 20,
	}
}

// parcel reads an event's row of the parcels table.
func parcel(t *testing.T, pool *pgxpool.Pool, schema, eventID string) (writes int, repair, geomType string, valid bool) {
	t.Helper()
	var r *string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT writes, repair, ST_GeometryType(geom), ST_IsValid(geom)
		FROM `+schema+`.parcels WHERE event_id = $1`, eventID).Scan(&writes, &r, &geomType, &valid))
	if r != nil {
		repair = *r
	}
	return writes, repair, geomType, valid
}

// TestDemo runs the demo on the real PostgreSQL: the sample events
// through the loader, the dead-letter table, a replay that crashes before
// acknowledging and the one after it; then checks the tables themselves.
func TestDemo(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t, 4)
	c := testConfig(t, "geodlq_demo_"+strings.ToLower(rand.Text()[:12]))
	t.Cleanup(func() {
		if *keep {
			t.Logf("kept schema %s (-keep); drop it with: DROP SCHEMA %s CASCADE", c.schema, c.schema)
			return
		}
		require.NoError(t, dropSchema(context.Background(), c))
	})

	var out bytes.Buffer
	res, err := demo(ctx, c, io.MultiWriter(&out, demoOutput(t)), slog.New(slog.DiscardHandler))
	require.NoError(t, err)

	// Loading: the valid parcel and the flaky event (retried in place) are
	// loaded; the rest is dead-lettered where its class says.
	require.True(t, res.outcomes[1].Processed)
	require.Equal(t, 1, res.outcomes[1].Attempts)
	bowtie := res.outcomes[2]
	require.True(t, bowtie.DeadLettered)
	require.Equal(t, poisonDest, bowtie.Destination)
	require.Equal(t, classify.ClassInvalidGeometry, bowtie.Envelope.FailureClass)
	require.Equal(t, classify.StageTopologyValidation, bowtie.Envelope.FailedStage)
	require.Equal(t, "Self-intersection[0.5 0.5]", bowtie.Envelope.GeometryError.Reason)
	require.Equal(t, []float64{0.5, 0.5}, bowtie.Envelope.GeometryError.Location)
	require.Equal(t, "xx-0002@2026-12-03", bowtie.Envelope.IdempotencyKey, "the event's own key")
	require.False(t, bowtie.Envelope.IdempotencyKeyDerived)
	badCRS := res.outcomes[3]
	require.Equal(t, poisonDest, badCRS.Destination)
	require.Equal(t, classify.ClassCRSMismatch, badCRS.Envelope.FailureClass)
	require.Equal(t, 0, *badCRS.Envelope.GeometryError.EPSG)
	require.True(t, badCRS.Envelope.IdempotencyKeyDerived, "an event without a key gets a derived one")
	notJSON := res.outcomes[4]
	require.Equal(t, poisonDest, notJSON.Destination)
	require.Equal(t, classify.ClassSchemaViolation, notJSON.Envelope.FailureClass)
	require.Equal(t, classify.StageParse, notJSON.Envelope.FailedStage)
	require.True(t, res.outcomes[5].Processed, "the flaky event recovered in place")
	require.Equal(t, 3, res.outcomes[5].Attempts)
	outage := res.outcomes[6]
	require.Equal(t, retryDest, outage.Destination)
	require.Equal(t, classify.ClassTransient, outage.Envelope.FailureClass)
	require.Equal(t, 4, outage.Envelope.Attempts)

	// The dead-letter row of the bowtie: stored in a real geometry column,
	// which PostGIS itself finds invalid for the same reason; replayed.
	var status, pgReason string
	var srid int
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, ST_IsValidReason(geom), ST_SRID(geom) FROM `+c.schema+`.dead_letters
		WHERE event_id = 'evt-bowtie' AND destination = $1`, poisonDest).Scan(&status, &pgReason, &srid))
	require.Equal(t, string(broker.StatusReplayed), status)
	require.Equal(t, "Self-intersection[0.5 0.5]", pgReason)
	require.Equal(t, 4326, srid)

	// The replays: the dry run changes nothing; replay #1 re-injects and
	// "crashes" before acknowledging; replay #2 re-injects again and
	// acknowledges.
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeWouldRepair: 1, replay.OutcomeWouldFail: 1, replay.OutcomeSkipped: 1}, res.dry[poisonDest].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeWouldReplay: 1}, res.dry[retryDest].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeAckFailed: 1, replay.OutcomeRepairFailed: 1, replay.OutcomeSkipped: 1}, res.crashed[poisonDest].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeAckFailed: 1}, res.crashed[retryDest].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeRepaired: 1, replay.OutcomeRepairFailed: 1, replay.OutcomeSkipped: 1}, res.replayed[poisonDest].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeReplayed: 1}, res.replayed[retryDest].Counts)
	for _, it := range res.replayed[poisonDest].Items {
		if it.Outcome == replay.OutcomeRepaired {
			require.Equal(t, "evt-bowtie", it.EventID)
			require.Equal(t, bowtie.IdempotencyKey, it.IdempotencyKey)
			require.Equal(t, "make_valid", it.Repair.Method)
		}
	}

	// Re-injected twice, written once: the claim made the second delivery
	// a no-op. The repaired bowtie is a valid MultiPolygon.
	writes, repair, typ, valid := parcel(t, pool, c.schema, "evt-bowtie")
	require.Equal(t, 1, writes)
	require.True(t, strings.HasPrefix(repair, "make_valid:"), repair)
	require.Equal(t, "ST_MultiPolygon", typ)
	require.True(t, valid)
	writes, _, _, _ = parcel(t, pool, c.schema, "evt-outage")
	require.Equal(t, 1, writes)
	var rows, maxWrites int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), max(writes) FROM `+c.schema+`.parcels`).Scan(&rows, &maxWrites))
	require.Equal(t, 4, rows, "parcel, flaky, bowtie, outage")
	require.Equal(t, 1, maxWrites)
	var done bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT done_at IS NOT NULL FROM `+c.schema+`.idempotency_claims WHERE key = $1`,
		[]byte(bowtie.IdempotencyKey)).Scan(&done))
	require.True(t, done)

	// What no repair applies to is still pending, untouched.
	store, err := postgis.New(ctx, pool, &postgis.Options{Schema: c.schema})
	require.NoError(t, err)
	left, err := store.List(ctx, broker.ListOptions{})
	require.NoError(t, err)
	require.Len(t, left.Entries, 2)
	require.Contains(t, out.String(), "Every parcel was written exactly once.")

	// The cleanup drops the schema.
	if *keep {
		return
	}
	require.NoError(t, dropSchema(ctx, c))
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, c.schema).Scan(&n))
	require.Zero(t, n)
}

// TestCommandLine drives the command as an operator would: load a file,
// load it again (nothing happens twice), filter a replay, dry-run it, and
// replay it.
func TestCommandLine(t *testing.T) {
	ctx := context.Background()
	pool := testPool(t, 4)
	c := testConfig(t, testSchema(t))
	events := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(events, []byte(
		`{"event_id":"evt-ok","geometry":{"type":"Point","coordinates":[12.49,41.89]}}`+"\n\n"+
			`{"event_id":"evt-bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`+"\n"), 0o600))
	flags := []string{"-db", c.db, "-schema", c.schema, "-offload-dir", c.offloadDir}
	cmd := func(stdin string, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := cli(ctx, append(append([]string(nil), flags...), args...), strings.NewReader(stdin), &stdout, &stderr)
		require.NoError(t, err, stderr.String())
		return stdout.String()
	}

	s := cmd("", events)
	require.Contains(t, s, events+":3 evt-bowtie: invalid_geometry at topology_validation after 1 attempt(s) -> spatial.events.poison.dlt: Self-intersection[0.5 0.5]")
	require.Contains(t, s, "2 events: 1 loaded, 1 dead-lettered (poison 1, retry 0)")
	// Again, from stdin: the loaded event is skipped by its claim, the
	// dead-lettered one absorbed as a duplicate.
	body, err := os.ReadFile(events)
	require.NoError(t, err)
	require.Contains(t, cmd(string(body)), "2 events: 1 loaded, 1 dead-lettered")
	writes, _, _, _ := parcel(t, pool, c.schema, "evt-ok")
	require.Equal(t, 1, writes)
	store, err := postgis.New(ctx, pool, &postgis.Options{Schema: c.schema})
	require.NoError(t, err)
	pending, err := store.List(ctx, broker.ListOptions{Destination: poisonDest})
	require.NoError(t, err)
	require.Len(t, pending.Entries, 1)
	var dups int
	require.NoError(t, pool.QueryRow(ctx, `SELECT duplicates FROM `+postgis.Table(store)+` WHERE id = $1::text::bigint`, pending.Entries[0].Record.ID).Scan(&dups))
	require.Equal(t, 1, dups, "the second load's write was absorbed as a duplicate")

	require.Contains(t, cmd("", "replay", "-class", "transient"), "replay of spatial.events.poison.dlt: nothing to replay")
	s = cmd("", "replay", "-dry-run")
	require.Contains(t, s, "dry run of spatial.events.poison.dlt: would_repair=1")
	s = cmd("", "replay")
	require.Contains(t, s, "replay of spatial.events.poison.dlt: repaired=1")
	require.Contains(t, s, "make_valid:structure Polygon->MultiPolygon")
	writes, repair, typ, valid := parcel(t, pool, c.schema, "evt-bowtie")
	require.Equal(t, 1, writes)
	require.NotEmpty(t, repair)
	require.Equal(t, "ST_MultiPolygon", typ)
	require.True(t, valid)
	require.Contains(t, cmd("", "replay"), "replay of spatial.events.poison.dlt: nothing to replay")

	var stderr bytes.Buffer
	require.Error(t, cli(ctx, append(flags, "replay", "-class", "nonsense"), nil, &bytes.Buffer{}, &stderr))
	require.Error(t, cli(ctx, append(flags, filepath.Join(t.TempDir(), "missing.jsonl")), nil, &bytes.Buffer{}, &stderr))
}
