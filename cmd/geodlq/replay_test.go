package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/sqlite"
)

func replayJSON(t *testing.T, c cli, code int, args ...string) replayReport {
	t.Helper()
	r := c.must(code, nil, append([]string{"replay", "-o", "json"}, args...)...)
	var rep replayReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	return rep
}

// reinjected returns, per dlq-replay-of header, the messages a replay
// wrote to topic in the SQLite store at path, and checks that each
// carries an idempotency key.
func reinjected(t *testing.T, path, topic string) map[string][]*broker.Message {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, nil)
	require.NoError(t, err)
	defer s.Close()
	var es []broker.Entry
	err = s.ScanAll(context.Background(), broker.ListOptions{Destination: topic, IncludeReplayed: true, Limit: broker.MaxListLimit},
		func(e broker.Entry) error { es = append(es, e); return nil })
	require.NoError(t, err)
	out := map[string][]*broker.Message{}
	for _, e := range es {
		m := e.Record.Message
		require.NotEmpty(t, m.Header(broker.HeaderIdempotencyKey))
		out[m.Header(broker.HeaderReplayOf)] = append(out[m.Header(broker.HeaderReplayOf)], m)
	}
	return out
}

// TestReplay proves dry run, repair by name, re-injection into another
// store with the original idempotency key, client-side filters, --limit,
// and that acknowledged records never come back.
func TestReplay(t *testing.T) {
	t.Parallel()
	c := seeded(t)
	before := listIDs(t, c)

	dry := replayJSON(t, c, exitOK, "--dry-run", "--repair", "make-valid,reproject")
	require.True(t, dry.DryRun)
	require.Equal(t, len(before), dry.Examined)
	require.Positive(t, dry.Counts["would_repair"])
	require.Equal(t, 8, dry.Counts["skipped"], "schema violations and resource_exhausted are never replayed")
	require.Equal(t, before, listIDs(t, c), "a dry run acknowledges nothing")

	// Only make-valid: crs_mismatch is skipped, not reprojected.
	target := filepath.Join(t.TempDir(), "target.db")
	rep := replayJSON(t, c, exitOK, "--repair", "make-valid", "--class", "invalid_geometry,crs_mismatch",
		"--source-prefix", "s3://provider-a/", "--target", "sqlite://"+target)
	require.Equal(t, map[string]int{"repaired": 1}, rep.Counts, "the client-side filter selects one event")
	item := rep.Destinations[0].Items[0]
	require.Equal(t, "evt-provider-a", item.EventID)
	require.Equal(t, "parcels", item.Target)
	require.Contains(t, item.Repair, "make_valid")

	got := reinjected(t, target, "parcels")
	require.Len(t, got, 1)
	msgs := got["parcels.poison.dlt/"+item.RecordID]
	require.Len(t, msgs, 1)
	require.Equal(t, item.IdempotencyKey, msgs[0].Header(broker.HeaderIdempotencyKey))
	require.Equal(t, "true", msgs[0].Header(broker.HeaderRepaired))
	require.Contains(t, string(msgs[0].Body), `"MultiPolygon"`, "MakeValid splits the bowtie")
	require.Contains(t, string(msgs[0].Body), `"source_uri":"s3://provider-a/tiles/7.geojson"`, "every other byte kept")

	rep = replayJSON(t, c, exitOK, "--repair", "make-valid", "--class", "invalid_geometry", "--limit", "2", "--target", "sqlite://"+target)
	require.Equal(t, 2, rep.Examined)
	rest := replayJSON(t, c, exitOK, "--repair", "make-valid", "--class", "invalid_geometry", "--target", "sqlite://"+target)
	for _, d := range rest.Destinations {
		for _, it := range d.Items {
			require.NotEqual(t, "evt-provider-a", it.EventID, "acknowledged records never come back")
			require.False(t, containsItem(rep, it.RecordID) && it.Outcome == "repaired", "record %s was acknowledged by the --limit run", it.RecordID)
		}
	}
	again := replayJSON(t, c, exitOK, "--repair", "make-valid", "--class", "invalid_geometry", "--target", "sqlite://"+target)
	require.Zero(t, again.Counts["repaired"], "a second run finds nothing left to repair")
	require.Equal(t, rest.Counts["repair_failed"], again.Counts["repair_failed"])
	for ref, ms := range reinjected(t, target, "parcels") {
		require.Len(t, ms, 1, "re-injected once: %s", ref)
	}

	// A human report.
	r := c.must(exitOK, nil, "replay", "--dry-run", "--class", "schema_violation")
	require.Contains(t, r.stdout, "replay (dry run): 6 examined")
	require.Regexp(t, `skipped +6 +left in place: its class is never replayed`, r.stdout, "a count by outcome with its legend")
	require.NotContains(t, r.stdout, "evt-", "no per-record rows unless -o wide")
	r = c.must(exitOK, nil, "replay", "--dry-run", "--class", "schema_violation", "-o", "wide")
	require.Contains(t, r.stdout, "REPAIR / WHY LEFT")
	require.Contains(t, r.stdout, "evt-wrong-nesting")
	c.must(exitUsage, nil, "replay", "--repair", "magic")
}

func containsItem(rep replayReport, recordID string) bool {
	for _, d := range rep.Destinations {
		for _, it := range d.Items {
			if it.RecordID == recordID {
				return true
			}
		}
	}
	return false
}
