package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/replaying"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/replay"
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

	// The seed was dead-lettered by geodlq check: with no --target, a
	// replay would write into the dead-letter store, which no consumer
	// reads; it is refused before anything happens, naming --target.
	r := c.must(exitUsage, nil, "replay", "--dry-run", "--repair", "make-valid")
	require.Contains(t, r.stderr, "came from geodlq-check")
	require.Contains(t, r.stderr, "--target URL")
	require.Empty(t, r.stdout)

	dry := replayJSON(t, c, exitOK, "--dry-run", "--repair", "make-valid,reproject", "--target", c.store)
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

	// A human report: a row for each record left in place, with why,
	// then the count by outcome with its legend. (schema_violation is
	// never re-injected, so no --target is needed to look at it.)
	r = c.must(exitOK, nil, "replay", "--dry-run", "--class", "schema_violation")
	require.Contains(t, r.stdout, "replay (dry run): 6 examined")
	require.Regexp(t, `skipped +6 +left in place: its class is never replayed`, r.stdout, "a count by outcome with its legend")
	require.Regexp(t, `evt-wrong-nesting +schema_violation +skipped .*schema_violation is never replayed`, r.stdout)
	r = c.must(exitOK, nil, "replay", "--dry-run", "--class", "schema_violation", "-o", "wide")
	require.Contains(t, r.stdout, "REPAIR  WHY")
	require.Contains(t, r.stdout, "evt-wrong-nesting")
	c.must(exitUsage, nil, "replay", "--repair", "magic")
	c.must(exitUsage, nil, "replay", "--repair", "reproject,reproject+make-valid")
	c.must(exitUsage, nil, "replay", "--repair", "make-valid", "--unchanged", "invalid_geometry")
	c.must(exitUsage, nil, "replay", "--unchanged", "schema_violation")
}

// TestReplayReasons: every record a replay leaves in place (or would
// fail, or skips) says why in every output format, naming the flag that
// would change it; the chained repair makes valid what reprojection
// breaks; --unchanged re-injects an invalid geometry as it is.
func TestReplayReasons(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := cli{t: t, store: "sqlite://" + filepath.Join(dir, "dlq.db")}
	target := "sqlite://" + filepath.Join(dir, "target.db")
	nan, _ := corpus.Lookup("nan_coordinates")
	in := strings.Join([]string{chukotka3857, `{"event_id":"evt-bowtie","geometry":` + bowtieGeom + `}`,
		`{"event_id":"evt-schema","geometry":{"type":"Polygon","coordinates":[0,0]}}`, strings.TrimSpace(string(nan.Payload))}, "\n") + "\n"
	c.must(exitProblems, []byte(in), "check", "--dead-letter", "parcels", "-")

	why := func(rep replayReport) map[string][2]string {
		out := map[string][2]string{}
		for _, d := range rep.Destinations {
			for _, it := range d.Items {
				out[it.EventID] = [2]string{it.Outcome, it.Why}
			}
		}
		return out
	}
	rep := replayJSON(t, c, exitOK, "--dry-run", "--repair", "reproject", "--target", target)
	got := why(rep)
	require.Equal(t, "would_fail", got["evt-chukotka"][0])
	require.Regexp(t, `^after reproject:EPSG:3857->EPSG:4326 it still fails the consumer's check: invalid geometry: Self-intersection\[.*\]; `+
		`--repair reproject\+make-valid also makes it valid$`, got["evt-chukotka"][1])
	require.Equal(t, [2]string{"skipped", "no repair was given for invalid_geometry: --repair make-valid repairs it " +
		"(--unchanged invalid_geometry re-injects it as it is)"}, got["evt-bowtie"])
	require.Equal(t, "skipped", got["evt-schema"][0])
	require.Contains(t, got["evt-schema"][1], "schema_violation is never replayed")

	// The same reasons in the table (fitted, reason cut) and -o wide.
	for _, o := range []string{"table", "wide"} {
		r := c.must(exitOK, nil, "replay", "--dry-run", "--repair", "reproject", "--target", target, "-o", o)
		require.Regexp(t, `evt-chukotka +crs_mismatch +would_fail +- +reproject:EPSG:3857->EPSG:4326 +after reproject`, r.stdout, o)
		require.Regexp(t, `evt-bowtie +invalid_geometry +skipped +- +- +no repair was given for invalid_geometry`, r.stdout, o)
		require.Regexp(t, `evt-schema +schema_violation +skipped .*schema_violation is never`, r.stdout, o)
		if o == "wide" {
			require.Contains(t, r.stdout, "--repair reproject+make-valid also makes it valid")
		}
	}

	// Reproject, then MakeValid; the NaN vertex cannot be made valid.
	rep = replayJSON(t, c, exitOK, "--dry-run", "--repair", "reproject+make-valid,make-valid", "--target", target)
	got = why(rep)
	require.Equal(t, [2]string{"would_repair", ""}, got["evt-chukotka"])
	require.Equal(t, [2]string{"would_repair", ""}, got["evt-bowtie"])
	require.Equal(t, "would_fail", got["evt-nan"][0])
	require.Contains(t, got["evt-nan"][1], "the repair cannot fix it: spatial: MakeValid: ")

	// Unchanged: with the check, it would fail, and says how not to check.
	rep = replayJSON(t, c, exitOK, "--dry-run", "--unchanged", "invalid_geometry", "--event", "evt-bowtie", "--target", target)
	require.Equal(t, [2]string{"would_fail", "fails the consumer's check as it is: invalid geometry: Self-intersection[0.5 0.5]; " +
		"--no-check re-injects it anyway"}, why(rep)["evt-bowtie"])
	rep = replayJSON(t, c, exitOK, "--unchanged", "invalid_geometry", "--no-check", "--event", "evt-bowtie", "--target", target)
	require.Equal(t, map[string]int{"replayed": 1}, rep.Counts)
	msgs := reinjected(t, strings.TrimPrefix(target, "sqlite://"), "parcels")
	require.Len(t, msgs, 1)
	for _, ms := range msgs {
		require.Contains(t, string(ms[0].Body), bowtieGeom, "re-injected unchanged")
		require.Empty(t, ms[0].Header(broker.HeaderRepaired))
	}
}

// chukotka3857 is a polygon around Chukotka in Web Mercator metres,
// wrapped at the antimeridian as producers write it: reprojected, it
// crosses ±180° and self-intersects.
var chukotka3857 = `{"event_id":"evt-chukotka","crs":"EPSG:3857","geometry":{"type":"Polygon","coordinates":[[` +
	`[19146952.42,9477884.90],[19814869.36,9400734.67],[-19814869.36,9503789.85],[-19202612.16,9452074.56],[-18924313.43,9822321.38],` +
	`[-19146952.42,10156058.72],[-19592230.38,10387819.72],[-19981848.60,11003930.41],[19592230.38,11036245.79],[19146952.42,10907895.74],` +
	`[18924313.43,10446997.31],[19146952.42,9477884.90]]]}}`

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

// TestTriageLegendSpeaksTriage: triage has no --repair, --no-check or
// --route; its legend and reasons never name them as its own.
func TestTriageLegendSpeaksTriage(t *testing.T) {
	for k, v := range triageLegend {
		for _, flag := range []string{"--repair", "--unchanged", "--no-check", "--route"} {
			require.NotContains(t, v, flag, "triage's legend of %s", k)
		}
	}
	require.Contains(t, outcomeLegend["skipped"], "--repair")
	rp := replay.Repair{Method: "reproject", Detail: "EPSG:3857->EPSG:4326"}
	why := replaying.Why(replay.Item{Class: classify.ClassCRSMismatch, Outcome: replay.OutcomeWouldFail, Repair: &rp,
		Err: &classify.Error{Class: classify.ClassInvalidGeometry, Err: errors.New("invalid geometry: Self-intersection[1 2]")}}, triageHints)
	require.Contains(t, why, "geodlq replay --repair reproject+make-valid")
}
