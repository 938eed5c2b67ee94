// Command quickstart runs a small geospatial pipeline on geodlq's embedded
// store — one SQLite file and a blob directory, no server — and shows the
// whole dead-letter cycle: classify, retry in place, dead-letter with the
// exact GEOS reason and offending vertex, offload a multi-megabyte
// geometry, triage, repair, replay twice, and prove from the claims store
// that every side effect happened exactly once.
//
// Run it with `make demo` or `go run ./examples/quickstart [-dir DIR]`.
// Copy it: everything it uses is public API.
package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
	"github.com/geodlq/geodlq/spatial/proj"
)

// events.jsonl holds one event per line, as producers sent them: valid
// parcels, a bowtie, an unclosed ring, a bare NaN from a Python producer,
// an EPSG:3857 payload, an unparseable CRS, a body that is not JSON, and two
// events whose downstream tile server fails.
//
//go:embed events.jsonl
var sampleEvents []byte

const (
	topic  = "spatial.events"
	poison = topic + ".poison.dlt"
	retry  = topic + ".retry.dlt"
)

func main() {
	dir := flag.String("dir", filepath.Join(os.TempDir(), "geodlq-quickstart"), "working directory for the SQLite store and offloaded blobs (reset at start)")
	verbose := flag.Bool("v", false, "log every dead-letter and replay decision")
	flag.Parse()
	level := slog.LevelError
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := run(context.Background(), *dir, log); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// downstream simulates a tile server the pipeline enriches events from:
// "flaky" events fail twice then succeed; "down" events fail until the
// outage is over.
type downstream struct {
	mu       sync.Mutex
	calls    map[string]int
	outage   bool
	statuses map[string]int
}

type httpError int

func (e httpError) Error() string   { return "tile server: HTTP " + strconv.Itoa(int(e)) }
func (e httpError) StatusCode() int { return int(e) }

func (d *downstream) enrich(tiles string, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls[id]++
	switch {
	case tiles == "flaky" && d.calls[id] <= 2:
		return httpError(503) // classified transient by the default rules
	case tiles == "down" && d.outage:
		return httpError(502)
	}
	return nil
}

func run(ctx context.Context, dir string, log *slog.Logger) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}

	// --- The embedded default: one SQLite file, blobs in a directory. -----
	dbPath := filepath.Join(dir, "dlq.db")
	store, err := sqlite.Open(ctx, dbPath, &sqlite.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 200 * time.Millisecond}})
	if err != nil {
		return err
	}
	defer store.Close()
	blobs, err := offload.NewDirStore(filepath.Join(dir, "blobs"))
	if err != nil {
		return err
	}
	defer blobs.Close()
	off, err := offload.New(blobs, nil) // 256 KiB threshold
	if err != nil {
		return err
	}

	// --- The checker: pure Go; GEOS and PROJ (cgo) for the repairs. -------
	// spatial/geos and spatial/proj link them in a cgo build; built with
	// CGO_ENABLED=0 the check works and step 4's repairs fail with an error
	// wrapping spatial.ErrNeedsCGO.
	copts := &spatial.Options{ExpectedEPSG: 4326, MaxVertices: 100_000}
	if g, err := geos.New(); err == nil {
		defer g.Close()
		copts.GEOS = g
	} else if !errors.Is(err, spatial.ErrNeedsCGO) {
		return err
	}
	if pj, err := proj.New(nil); err == nil {
		defer pj.Close()
		copts.ResolveCRS, copts.Reprojector = pj.ResolveCRS, pj
	} else if !errors.Is(err, spatial.ErrNeedsCGO) {
		return err
	}
	checker, err := spatial.NewChecker(copts)
	if err != nil {
		return err
	}
	defer checker.Close()

	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off, ResolveEPSG: checker.ResolveEPSG})
	if err != nil {
		return err
	}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{
		Publisher: store,
		Builder:   builder,
		Policy:    classify.Policy{MaxAttempts: 4, BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
		Logger:    log,
	})
	if err != nil {
		return err
	}

	// The consumer's side effect ("persist the parcel") runs under an atomic
	// idempotency claim, so a duplicate delivery does nothing.
	claims := replay.NewMemClaims(nil)
	tiles := &downstream{calls: map[string]int{}, outage: true}
	var mu sync.Mutex
	deliveries := map[string]int{} // idempotency key -> deliveries to the handler
	persisted := map[string]int{}  // idempotency key -> side effects performed

	handler := func(ctx context.Context, m *broker.Message) error {
		key := m.Header(broker.HeaderIdempotencyKey)
		mu.Lock()
		deliveries[key]++
		mu.Unlock()
		if _, err := checker.CheckEvent(m.Body); err != nil {
			return err // classified, with stage, reason, location, EPSG
		}
		var ev struct {
			EventID    string `json:"event_id"`
			Properties struct {
				Tiles string `json:"tiles"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(m.Body, &ev); err != nil {
			return classify.WithStage(err, classify.StageParse)
		}
		if err := tiles.enrich(ev.Properties.Tiles, ev.EventID); err != nil {
			return classify.WithStage(err, classify.StageSpatialJoin)
		}
		_, err := replay.Once(ctx, claims, key, time.Minute, func(context.Context) error {
			mu.Lock()
			persisted[key]++
			mu.Unlock()
			return nil
		})
		return classify.WithStage(err, classify.StagePersist)
	}

	// consume drains the source topic: a message is acknowledged only when
	// the processor says so (handled, or durably dead-lettered).
	consume := func() (handled, deadLettered int, err error) {
		for {
			recs, err := store.Fetch(ctx, topic, broker.Filter{}, 32)
			if err != nil || len(recs) == 0 {
				return handled, deadLettered, err
			}
			for _, r := range recs {
				m := r.Message
				m.Source = &envelope.Source{System: "sqlite", Topic: topic, MessageID: r.ID, DeliveryCount: r.Deliveries}
				out, err := proc.Process(ctx, m, handler)
				if err != nil {
					// Not acked: the record comes back after its lease.
					return handled, deadLettered, err
				}
				if err := store.Ack(ctx, r); err != nil {
					return handled, deadLettered, err
				}
				if out.DeadLettered {
					deadLettered++
				} else {
					handled++
				}
			}
		}
	}

	// --- 1. Ingest. The idempotency key is assigned once, here: the event's
	// own idempotency_key member, else one derived from the body (and the
	// message says so, so that an envelope records it as derived). ----------
	var bodies [][]byte
	sc := bufio.NewScanner(bytes.NewReader(sampleEvents))
	for sc.Scan() {
		bodies = append(bodies, append([]byte(nil), sc.Bytes()...))
	}
	bodies = append(bodies, largeMultiPolygon(3<<20))
	names := map[string]string{}
	for _, body := range bodies {
		m := &broker.Message{Body: body, Source: &envelope.Source{System: "quickstart", Topic: topic}}
		key, derived := broker.IdempotencyKeyOf(m, nil)
		m.Headers = map[string]string{broker.HeaderIdempotencyKey: key}
		if derived {
			m.Headers[broker.HeaderIdempotencyKeyDerived] = "true"
		}
		names[key] = eventName(body)
		if err := store.Publish(ctx, topic, m); err != nil {
			return err
		}
	}
	fmt.Printf("geodlq quickstart — embedded store %s, blobs %s\n\n", dbPath, blobs.Dir())
	fmt.Printf("1. Ingested %d events on %q (multi-megabyte multipolygon included).\n", len(bodies), topic)

	handled, dl, err := consume()
	if err != nil {
		return err
	}
	fmt.Printf("2. Consumed: %d processed, %d dead-lettered (transient failures retried in place first).\n\n", handled, dl)

	// --- 3. Triage: what is in the dead-letter store, and why. --------------
	if err := triage(ctx, store, names); err != nil {
		return err
	}

	// --- 4. Repair and replay, twice. ---------------------------------------
	tiles.mu.Lock()
	tiles.outage = false
	tiles.mu.Unlock()
	fmt.Println("\n4. The tile server is back. Replaying with repairs (GEOS MakeValid, PROJ reprojection).")
	repairers, err := checker.Repairers(nil)
	if err != nil {
		return err
	}
	opts := replay.Options{Source: store, Target: store, Fetcher: off, Repairers: repairers, Check: checker.ReplayCheck(), Logger: log}
	dry, err := mustReplayer(opts).Run(ctx, replay.Request{Destination: poison, DryRun: true})
	if err != nil {
		return err
	}
	fmt.Printf("   dry run over %s: %s\n", poison, counts(dry))

	// First replay: the replayer "crashes" after re-injecting, before it can
	// acknowledge, so every record stays in the dead-letter store.
	crashing := opts
	crashing.Source = crashAfterReinject{store}
	for _, dest := range []string{poison, retry} {
		rep, err := mustReplayer(crashing).Run(ctx, replay.Request{Destination: dest})
		if err != nil {
			return err
		}
		fmt.Printf("   replay #1 of %-26s %s  (crashed before acking)\n", dest+":", counts(rep))
	}
	time.Sleep(250 * time.Millisecond) // the crashed replayer's leases lapse
	var repaired []replay.Item
	for _, dest := range []string{poison, retry} {
		rep, err := mustReplayer(opts).Run(ctx, replay.Request{Destination: dest})
		if err != nil {
			return err
		}
		fmt.Printf("   replay #2 of %-26s %s\n", dest+":", counts(rep))
		for _, it := range rep.Items {
			if it.Repair != nil {
				repaired = append(repaired, it)
			}
		}
	}
	for _, it := range repaired {
		fmt.Printf("   repaired %-14s %s\n", names[it.IdempotencyKey], it.Repair)
	}
	fmt.Println("   (would_…: the dry run's verdicts; ack_failed: re-injected, not acknowledged — the crash;")
	fmt.Println("    repaired/replayed: re-injected and acknowledged; repair_failed: still invalid after the repair, left for a human;")
	fmt.Println("    skipped: never replayed — a schema violation or an oversized payload)")
	handled, dl, err = consume()
	if err != nil {
		return err
	}
	fmt.Printf("   consumer: %d re-injected deliveries handled, %d dead-lettered again\n\n", handled, dl)

	// --- 5. Exactly once, from the claims store. ----------------------------
	fmt.Println("5. Side effects, from the claims store. HANDLER CALLS counts every delivery to the handler: retries in")
	fmt.Println("   place, the first consumption and the replay's two re-injections (replay #1 crashed before acking).")
	fmt.Println("   SIDE EFFECTS must never exceed 1:")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   EVENT\tHANDLER CALLS\tCLAIMS COMPLETED\tSIDE EFFECTS")
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return names[keys[i]] < names[keys[j]] })
	violations := 0
	for _, k := range keys {
		c := claims.Completions(k)
		if c > 1 || persisted[k] > 1 {
			violations++
		}
		fmt.Fprintf(tw, "   %s\t%d\t%d\t%d\n", names[k], deliveries[k], c, persisted[k])
	}
	tw.Flush()
	left, err := store.List(ctx, broker.ListOptions{Filter: broker.Filter{Classes: []classify.Class{classify.ClassSchemaViolation, classify.ClassResourceExhausted,
		classify.ClassInvalidGeometry, classify.ClassCRSMismatch}}, Limit: broker.MaxListLimit})
	if err != nil {
		return err
	}
	fmt.Printf("\n   %d events wait in the poison store for a human (schema violations, quarantined, unrepairable).\n", len(left.Entries))
	if violations > 0 {
		return fmt.Errorf("%d events ran their side effect more than once", violations)
	}
	fmt.Println("   Every side effect happened exactly once.")
	fmt.Printf("\nExplore the store it left behind (go install github.com/geodlq/geodlq/cmd/geodlq@latest):\n  geodlq --store sqlite://%s --blobs file://%s list\n", dbPath, blobs.Dir())
	fmt.Printf("See the store on a map (the operator console):\n  geodlq serve --store sqlite://%s --blobs file://%s\n", dbPath, blobs.Dir())
	return nil
}

func mustReplayer(o replay.Options) *replay.Replayer {
	r, err := replay.New(&o)
	if err != nil {
		panic(err) // only for missing Source/Target, a programming error
	}
	return r
}

// crashAfterReinject is a dead-letter source whose Ack never lands, as if
// the replayer died between re-injecting and acknowledging.
type crashAfterReinject struct{ *broker.Store }

func (crashAfterReinject) Ack(context.Context, *broker.Record) error {
	return errors.New("replayer crashed before acknowledging")
}

func counts(r replay.Report) string {
	var parts []string
	for o, n := range r.Counts {
		parts = append(parts, fmt.Sprintf("%s=%d", o, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// triage prints the dead-letter store's records, and names each event in
// names (by idempotency key) as its envelope does, so that every table
// calls an event the same: an event without an id of its own (the body
// that is not JSON) is known by the id the envelope derived for it.
func triage(ctx context.Context, store *broker.Store, names map[string]string) error {
	fmt.Println("3. Triage (dead-letter store; EPSG \"-\": no EPSG code known):")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   EVENT\tDEST\tCLASS\tSTAGE\tREASON\tAT\tEPSG\tGEOMETRY\tTRIES")
	for _, dest := range []string{poison, retry} {
		page, err := store.List(ctx, broker.ListOptions{Destination: dest, Limit: broker.MaxListLimit})
		if err != nil {
			return err
		}
		for _, e := range page.Entries {
			env, err := envelope.Decode(e.Record.Message.Body)
			if err != nil {
				return err
			}
			names[env.IdempotencyKey] = env.EventID
			reason, at, epsg := truncate(env.ErrorMessage, 60), "-", "-"
			if ge := env.GeometryError; ge != nil {
				if ge.Reason != "" {
					reason = truncate(ge.Reason, 60)
				}
				at = fault(ge)
				if ge.EPSG != nil && *ge.EPSG != 0 {
					epsg = strconv.Itoa(*ge.EPSG)
				}
			}
			if epsg == "-" && env.SourceEPSG != 0 {
				epsg = strconv.Itoa(env.SourceEPSG)
			}
			geom := fmt.Sprintf("inline %dB", env.Geometry.ByteSize)
			switch {
			case env.Geometry.Missing:
				geom = "none"
			case env.Geometry.OffloadURI != "":
				geom = fmt.Sprintf("offloaded %.1fMB sha256:%s…", float64(env.Geometry.ByteSize)/(1<<20), env.Geometry.ContentSHA256[:8])
			}
			fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", env.EventID, env.Route, env.FailureClass, env.FailedStage,
				reason, at, epsg, geom, env.Attempts)
		}
	}
	return tw.Flush()
}

// fault renders where the fault is: the location and the part/ring/vertex
// index in the input.
func fault(ge *envelope.GeometryError) string {
	var s []string
	if len(ge.Location) == 2 {
		s = append(s, fmt.Sprintf("(%g %g)", ge.Location[0], ge.Location[1]))
	}
	if f := ge.Fault; f != nil {
		idx := ""
		if f.Part >= 0 {
			idx += fmt.Sprintf("part %d ", f.Part)
		}
		if f.Ring >= 0 {
			idx += fmt.Sprintf("ring %d ", f.Ring)
		}
		if f.OnSegment {
			idx += fmt.Sprintf("segment %d-%d", f.Vertex, f.Vertex+1)
		} else {
			idx += fmt.Sprintf("vertex %d", f.Vertex)
		}
		s = append(s, idx)
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " ")
}

func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// eventName finds the event id for display, even in bodies that are not
// JSON (a bare NaN, or a key=value line).
func eventName(body []byte) string {
	if m := eventIDPattern.FindSubmatch(body); m != nil {
		return string(m[1])
	}
	return "(unnamed)"
}

var eventIDPattern = regexp.MustCompile(`event_id"?\s*[:=]\s*"?([A-Za-z0-9_.-]+)`)

// largeMultiPolygon returns an event with a valid MultiPolygon of about n
// bytes: a grid of small squares over Europe.
func largeMultiPolygon(n int) []byte {
	var b bytes.Buffer
	b.Grow(n + 256)
	b.WriteString(`{"event_id":"evt-big-multipolygon","crs":"EPSG:4326","geometry":{"type":"MultiPolygon","coordinates":[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		x := -10 + float64(i%2000)*0.02
		y := 35 + float64(i/2000)*0.02
		fmt.Fprintf(&b, "[[[%.4f,%.4f],[%.4f,%.4f],[%.4f,%.4f],[%.4f,%.4f],[%.4f,%.4f]]]",
			x, y, x+0.01, y, x+0.01, y+0.01, x, y+0.01, x, y)
	}
	b.WriteString(`]},"properties":{"source":"survey-2026"}}`)
	return b.Bytes()
}
