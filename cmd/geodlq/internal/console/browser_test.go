package console

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/testenv"
	"github.com/geodlq/geodlq/replay"
)

// chromiumPath is Debian's chromium, which scripts/deps.sh installs.
const chromiumPath = "/usr/bin/chromium"

// uiDir is the page's sources, relative to this package.
const uiDir = "ui"

// need returns what the browser tests run on: node, with the UI's npm
// packages installed, and chromium. Missing, they skip the test — or fail
// it under GEODLQ_REQUIRE_SERVICES, as make test and CI run.
func need(t *testing.T, chromium bool) string {
	t.Helper()
	missing := func(what string) {
		if testenv.Required() {
			t.Fatalf("%s is missing; run scripts/deps.sh", what)
		}
		t.Skipf("SKIPPING: %s is missing; run scripts/deps.sh (or set GEODLQ_REQUIRE_SERVICES=1 to fail instead)", what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node")
	}
	if _, err := os.Stat(filepath.Join(uiDir, "node_modules", "playwright-core", "package.json")); err != nil {
		missing("the console's npm packages (npm ci in " + uiDir + ")")
	}
	if chromium {
		if _, err := os.Stat(chromiumPath); err != nil {
			missing(chromiumPath)
		}
	}
	return node
}

// artifacts returns where a test's screenshots go: $GEODLQ_ARTIFACTS/name
// when set (kept), else a temporary directory.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GEODLQ_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, filepath.FromSlash(t.Name()))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// TestBrowser drives the console in headless Chromium against each real
// store filled through the Processor (ui/e2e/console.e2e.mjs): the map
// shows every placeable record; hostile strings render as text and run
// nothing; clicking a bowtie shows its reason and marks both crossing
// segments; the box filter narrows the list; a replay with make-valid
// (dry run, then confirm) re-injects the record once — checked here
// through a claims store — and the record leaves the list; a discard
// removes one record; a request without the token is refused.
// Screenshots of each step are written to $GEODLQ_ARTIFACTS (or a
// temporary directory).
func TestBrowser(t *testing.T) {
	node := need(t, true)
	for _, k := range kinds() {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t, k, envOptions{})
			dir := artifacts(t)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, filepath.Join("e2e", "console.e2e.mjs"))
			cmd.Dir = uiDir
			cmd.Env = append(os.Environ(),
				"CONSOLE_URL="+e.http.URL+"/", "CONSOLE_TOKEN="+e.token, "ARTIFACTS="+dir,
				"EXPECT_MARKERS="+itoa(placedCount()), "EXPECT_BOX=4", "HOSTILE_ID="+hostileID)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			t.Logf("browser run (screenshots in %s):\n%s", dir, out.String())
			require.NoError(t, err, "the browser test failed: see its last step above")

			// The store, as the page left it.
			require.NotContains(t, e.eventIDs("", 500), "evt-bowtie")
			require.NotContains(t, e.eventIDs("", 500), "evt-eu-1")
			require.Len(t, e.eventIDs("", 500), len(fixtureEvents())-2)
			claims := replay.NewMemClaims(nil)
			require.Equal(t, map[string]int{"evt-bowtie": 1}, consume(t, e.target, claims), "re-injected exactly once")
			var rec recordAnswer
			e.get(recPath(e.recordOfAll("evt-bowtie")), http.StatusOK, &rec)
			require.Equal(t, 1, claims.Completions(rec.IdempotencyKey))
			for _, png := range []string{"01-map", "02-hostile-as-text", "03-bowtie-both-segments", "04-box-filter", "05-replay-make-valid", "06-after-discard", "07-no-token"} {
				fi, err := os.Stat(filepath.Join(dir, png+".png"))
				require.NoError(t, err)
				require.Positive(t, fi.Size())
			}
		})
	}
}

// TestBrowserOperator walks the console as an on-call operator on the
// rich corpus (ui/e2e/operator.e2e.mjs): the detail and every repair
// preview of one record of every class × reason kind, failing on any
// page error or error text; every sort; zoom to fault and wheel zoom over
// it; the failing geometries on the main map; stale answers dropped; a
// bulk replay whose dry run lists would_fail rows first; the text search
// finding words only the events' properties hold (and the empty list's
// text for a word none holds); a second console over the same store,
// started with a source pointer (serve --source-pointer), showing each
// event's value there in the Source column, filtering by it and naming
// it in the detail panel. Here: the expectations are read from the raw
// payloads, not through the console; the replay re-injected what the dry
// run said, and its would_fail records stayed.
func TestBrowserOperator(t *testing.T) {
	node := need(t, true)
	events := richEvents(t)
	e := newEnv(t, sqliteKind(), envOptions{events: events})
	searches, err := json.Marshal(propertySearches(t, events, "Khartoum", "NATURALEARTHDATA"))
	require.NoError(t, err)
	const pointer = "/properties/provider"
	sources, err := json.Marshal(sourcesAt(events, "provider"))
	require.NoError(t, err)
	// The second console: read-only, over the same store, as geodlq
	// serve --source-pointer /properties/provider starts it.
	srv2, err := New(Options{Store: e.store, Label: broker.Redact(e.url), Poll: 200 * time.Millisecond, SourcePointer: pointer})
	require.NoError(t, err)
	http2 := httptest.NewServer(srv2)
	t.Cleanup(func() {
		http2.Close()
		_ = srv2.Close()
	})
	require.Eventually(t, srv2.Ready, 60*time.Second, 20*time.Millisecond, "the second console's index is built")
	var ans listAnswer
	e.get("/api/records?limit=500", http.StatusOK, &ans)
	kinds := map[string]bool{}
	crs := 0
	for _, r := range ans.Records {
		c := r.Class
		if c == "" {
			c = "not an envelope"
		}
		kinds[c+"/"+r.ReasonKind] = true
		if r.Class == "crs_mismatch" {
			crs++
		}
	}
	require.GreaterOrEqual(t, len(kinds), 16, "the corpus has every kind: %v", kinds)
	where, err := json.Marshal(faultWords(t, e.store))
	require.NoError(t, err)
	dir := artifacts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("e2e", "operator.e2e.mjs"))
	cmd.Dir = uiDir
	cmd.Env = append(os.Environ(),
		"CONSOLE_URL="+e.http.URL+"/", "CONSOLE_TOKEN="+e.token, "ARTIFACTS="+dir,
		"EXPECT_KINDS="+strings.Join(slices.Sorted(maps.Keys(kinds)), ","), "EXPECT_TOTAL="+itoa(len(ans.Records)),
		"SEARCHES="+string(searches), "POINTER_URL="+http2.URL+"/", "POINTER="+pointer, "POINTER_SOURCES="+string(sources), "WHERE="+string(where))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("browser run (screenshots in %s):\n%s", dir, out.String())
	require.NoError(t, err, "the browser test failed: see its last step above")
	require.Contains(t, out.String(), `"step":"done"`)

	// The bulk replay: re-injected into the target what it repaired; the
	// records that would fail are still in the store.
	left := 0
	e.get("/api/records?limit=500&class=crs_mismatch", http.StatusOK, &ans)
	left = len(ans.Records)
	require.Positive(t, left, "the would_fail records stay")
	require.Less(t, left, crs, "the others were replayed")
	p, err := e.target.List(context.Background(), broker.ListOptions{Limit: 500})
	require.NoError(t, err)
	require.Len(t, p.Entries, crs-left, "one event re-injected per replayed record")
	for _, png := range []string{"op-01-overview", "op-02-record-sudan", "op-02-record-where", "op-03-sorted-by-vertices", "op-04-zoom-to-fault",
		"op-05-repair-preview", "op-06-shapes-zoomed-in", "op-07-bulk-dry-run", "op-08-property-search", "op-09-source-pointer", "op-10-source-pointer-detail"} {
		fi, err := os.Stat(filepath.Join(dir, png+".png"))
		require.NoError(t, err)
		require.Positive(t, fi.Size())
	}
}

// faultWords returns where each record's fault is, in the words geodlq
// show prints (geojson.Where), by "destination/id", read from the stored
// envelopes, for the records that have a fault location.
func faultWords(t *testing.T, s *broker.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, s.ScanAll(context.Background(), broker.ListOptions{Limit: broker.MaxListLimit}, func(e broker.Entry) error {
		env, err := envelope.Decode(e.Record.Message.Body)
		if err != nil || env.GeometryError == nil {
			return nil // not an envelope, or no fault: nothing to locate
		}
		if w := geojson.Where(env.GeometryError.Location, env.GeometryError.Fault); w != "" {
			out[e.Record.Destination+"/"+e.Record.ID] = w
		}
		return nil
	}))
	require.NotEmpty(t, out, "the corpus has located faults")
	return out
}

// propertySearch is a text search the browser runs and the events it
// must list.
type propertySearch struct {
	Q      string   `json:"q"`
	Events []string `json:"events"`
}

// eventIDRE reads an event id from a payload that may not be JSON.
var eventIDRE = regexp.MustCompile(`"event_id":"([^"]*)"`)

// propertySearches returns, for each word, the events whose payload holds
// it (case-insensitive), read from the raw payloads; each word must be
// found, and in no event id, so that only a search of the properties
// finds it.
func propertySearches(t *testing.T, payloads []string, words ...string) []propertySearch {
	t.Helper()
	var out []propertySearch
	for _, w := range words {
		s := propertySearch{Q: w, Events: []string{}}
		for _, p := range payloads {
			if !strings.Contains(strings.ToLower(p), strings.ToLower(w)) {
				continue
			}
			m := eventIDRE.FindStringSubmatch(p)
			require.NotNil(t, m, "an event holding %q has an id", w)
			require.NotContains(t, strings.ToLower(m[1]), strings.ToLower(w), "%q is in the properties only", w)
			s.Events = append(s.Events, m[1])
		}
		require.NotEmpty(t, s.Events, "an event holds %q", w)
		slices.Sort(s.Events)
		out = append(out, s)
	}
	return out
}

// sourcesAt returns each event's string property name ("" without one),
// by event id, read from the raw payloads; an event id that more than one
// payload carries, or a payload that is not JSON, is left out.
func sourcesAt(payloads []string, name string) map[string]string {
	seen := map[string]int{}
	for _, p := range payloads {
		if m := eventIDRE.FindStringSubmatch(p); m != nil {
			seen[m[1]]++
		}
	}
	out := map[string]string{}
	for _, p := range payloads {
		var ev struct {
			EventID    string         `json:"event_id"`
			Properties map[string]any `json:"properties"`
		}
		if json.Unmarshal([]byte(p), &ev) != nil || ev.EventID == "" || seen[ev.EventID] != 1 {
			continue
		}
		v, _ := ev.Properties[name].(string)
		out[ev.EventID] = v
	}
	return out
}
