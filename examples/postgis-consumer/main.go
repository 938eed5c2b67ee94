// Command postgis-consumer loads GeoJSON events into a PostGIS table with
// geodlq's dead-letter path kept in the same database, ready to copy. It
// reads JSON lines — one event per line, from files or stdin, as a batch
// loader of a feed or an export would — validates each event with GEOS and
// PROJ, retries transient failures in place, and dead-letters what cannot
// be loaded to "<topic>.retry.dlt" or "<topic>.poison.dlt" in the PostGIS
// dead-letter table (broker/postgis: the failed geometry in a real geometry
// column, queryable by class, stage, EPSG and bounding box). The load
// itself — an upsert into the parcels table — runs once per idempotency
// key, under a claim in the same database (replay/pgclaims).
//
// A line has no broker to acknowledge it: it is done once the processor
// says so. If a dead-letter write fails the run stops with an error; run it
// again on the same input — events already loaded are skipped by their
// claims, and events already dead-lettered are absorbed as duplicates by
// the dead-letter table, whose idempotency key is unique among pending
// records.
//
// The replay subcommand reads the dead-letter table and re-injects every
// replayable record straight into this pipeline (a file has no queue to put
// events back on), repairing invalid geometries with GEOS MakeValid and
// reprojecting CRS mismatches with PROJ; a record is acknowledged only once
// its event was loaded or durably dead-lettered again.
//
//	go run ./examples/postgis-consumer -db postgres://app@db:5432/geo parcels.jsonl
//	producer | go run ./examples/postgis-consumer -db postgres://app@db:5432/geo
//	go run ./examples/postgis-consumer -db postgres://app@db:5432/geo replay -dry-run
//
// The tables live in -schema ("geodlq"): dead_letters, idempotency_claims
// and parcels; the consumer creates them (the migrations are idempotent).
// Everything it uses is public API, and this file builds on its own in
// your module. (Its walkthrough on the local PostgreSQL, sample.jsonl
// loaded and replayed twice, is a test: go test -v -run TestDemo
// ./examples/postgis-consumer.)
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/pgclaims"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
	"github.com/geodlq/geodlq/spatial/proj"
)

type config struct {
	db          string
	schema      string
	topic       string
	offloadDir  string
	lease       time.Duration
	maxAttempts int
	retryDelay  time.Duration
	maxLine     int
	// replay subcommand
	dryRun  bool
	classes classify.ClassList
	verbose bool
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.db, "db", envOr("GEODLQ_DB", "postgres://postgres@127.0.0.1:5432/geodlq_test?sslmode=disable"), "PostgreSQL DSN (PostGIS installed); default $GEODLQ_DB")
	fs.StringVar(&c.schema, "schema", "geodlq", "schema of the dead_letters, idempotency_claims and parcels tables")
	fs.StringVar(&c.topic, "topic", "spatial.events", "pipeline name: idempotency-key namespace and dead-letter destinations <topic>.retry.dlt / <topic>.poison.dlt")
	fs.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries (replay reads them back)")
	fs.DurationVar(&c.lease, "lease", 30*time.Second, "how long replay leases a dead-letter record")
	fs.IntVar(&c.maxAttempts, "max-attempts", 4, "attempts per event before a transient failure is dead-lettered")
	fs.DurationVar(&c.retryDelay, "retry-delay", 200*time.Millisecond, "backoff ceiling after the first failed attempt")
	fs.IntVar(&c.maxLine, "max-line", 64<<20, "longest line (event) accepted, in bytes")
	fs.BoolVar(&c.dryRun, "dry-run", false, "replay: report what would happen, change nothing")
	fs.Var(&c.classes, "class", "replay: only these failure classes (comma-separated)")
	fs.BoolVar(&c.verbose, "v", false, "log every dead-letter and replay decision")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "postgis-consumer:", err)
		os.Exit(1)
	}
}

// cli runs the command line: [flags] [FILE...] or [flags] replay [flags].
func cli(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("postgis-consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	replayMode := len(rest) > 0 && rest[0] == "replay"
	if replayMode {
		if err := fs.Parse(rest[1:]); err != nil {
			return err
		}
		rest = fs.Args()
	}
	level := slog.LevelError
	if c.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if replayMode {
		if len(rest) > 0 {
			return fmt.Errorf("replay takes no arguments, got %q", rest)
		}
		_, err := replayAll(ctx, c, stdout, log)
		return err
	}
	return run(ctx, c, rest, stdin, stdout, log)
}

// pipeline is what the loader and the replayer share: the dead-letter
// store, the claims, the checker, the offloader and the processor.
type pipeline struct {
	c      config
	pool   *pgxpool.Pool
	store  *broker.Store
	claims *pgclaims.Claims
	chk    *spatial.Checker
	off    *offload.Offloader
	proc   *broker.Processor
	log    *slog.Logger
	// enrich is the pipeline's call to a downstream service (a tile
	// server, a geocoder) before the parcel is stored; nil skips it. Its
	// transient failures are retried in place, then dead-lettered.
	enrich func(ctx context.Context, m *broker.Message) error
	close  func()
}

func newPipeline(ctx context.Context, c config, log *slog.Logger) (*pipeline, error) {
	p := &pipeline{c: c, log: log}
	var closers []func()
	p.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (*pipeline, error) {
		p.close()
		return nil, err
	}
	pool, err := pgxpool.New(ctx, c.db)
	if err != nil {
		return fail(fmt.Errorf("connecting to PostgreSQL: %w", err))
	}
	closers = append(closers, pool.Close)
	p.pool = pool
	// Create creates the PostGIS extension (when the role may), the
	// schema and the table with its GiST and B-tree indexes. Run it as a
	// deployment step instead if the service's role may not.
	if p.store, err = postgis.New(ctx, pool, &postgis.Options{Schema: c.schema, Create: true,
		StoreOptions: broker.StoreOptions{LeaseTTL: c.lease, Logger: log}}); err != nil {
		return fail(fmt.Errorf("dead-letter table: %w", err))
	}
	if p.claims, err = pgclaims.New(ctx, pool, &pgclaims.Options{Schema: c.schema, Create: true}); err != nil {
		return fail(fmt.Errorf("claims table: %w", err))
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+p.parcels()+` (
	idempotency_key text        PRIMARY KEY,
	event_id        text        NOT NULL,
	geom            geometry    NOT NULL,
	repair          text,
	writes          integer     NOT NULL DEFAULT 1,
	loaded_at       timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fail(fmt.Errorf("parcels table: %w", err))
	}
	// The check is pure Go; the repairs need GEOS (MakeValid) and PROJ
	// (reprojection), which a cgo build links (spatial/geos, spatial/proj).
	// Built with CGO_ENABLED=0 they are absent, and replay's repairs fail
	// with an error wrapping spatial.ErrNeedsCGO.
	copts := &spatial.Options{} // expects EPSG:4326
	if g, err := geos.New(); err == nil {
		closers = append(closers, func() { _ = g.Close() })
		copts.GEOS = g
	} else if !errors.Is(err, spatial.ErrNeedsCGO) {
		return fail(err)
	}
	if pj, err := proj.New(nil); err == nil {
		closers = append(closers, func() { _ = pj.Close() })
		copts.ResolveCRS, copts.Reprojector = pj.ResolveCRS, pj
	} else if !errors.Is(err, spatial.ErrNeedsCGO) {
		return fail(err)
	}
	if p.chk, err = spatial.NewChecker(copts); err != nil {
		return fail(err)
	}
	closers = append(closers, func() { _ = p.chk.Close() })
	blobs, err := offload.NewDirStore(c.offloadDir)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, func() { _ = blobs.Close() })
	if p.off, err = offload.New(blobs, nil); err != nil {
		return fail(err)
	}
	// The Processor asks the store for its limit (64 MiB) and the builder
	// offloads geometry until the envelope fits it.
	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: p.off, ResolveEPSG: p.chk.ResolveEPSG})
	if err != nil {
		return fail(err)
	}
	p.proc, err = broker.NewProcessor(&broker.ProcessorOptions{
		Publisher: p.store,
		Builder:   builder,
		// <topic>.retry.dlt for transient and unknown failures whose
		// budget is spent, <topic>.poison.dlt for the deterministic ones.
		Destination: broker.DefaultDestination,
		Policy:      classify.Policy{MaxAttempts: c.maxAttempts, BaseDelay: c.retryDelay},
		Logger:      log,
	})
	if err != nil {
		return fail(err)
	}
	return p, nil
}

// parcels is the quoted name of the table events are loaded into.
func (p *pipeline) parcels() string { return pgx.Identifier{p.c.schema, "parcels"}.Sanitize() }

// handle validates an event, then loads it exactly once per idempotency
// key: the claim is taken before the upsert, so a replayed or re-read
// duplicate does nothing.
func (p *pipeline) handle(ctx context.Context, m *broker.Message) error {
	if _, err := p.chk.CheckEventContext(ctx, m.Body); err != nil {
		return err // *classify.Error: class, stage, GEOS reason, location, EPSG
	}
	if p.enrich != nil {
		if err := p.enrich(ctx, m); err != nil {
			return classify.WithStage(err, classify.StageSpatialJoin)
		}
	}
	key := m.Header(broker.HeaderIdempotencyKey) // always set by the Processor
	_, err := replay.Once(ctx, p.claims, key, time.Minute, func(ctx context.Context) error {
		return p.load(ctx, key, m)
	})
	return classify.WithStage(err, classify.StagePersist)
}

// load upserts the parcel. writes counts how many times this ran for the
// key: with the claim in front of it, always 1.
func (p *pipeline) load(ctx context.Context, key string, m *broker.Message) error {
	var ev struct {
		EventID  string          `json:"event_id"`
		Geometry json.RawMessage `json:"geometry"`
	}
	if err := json.Unmarshal(m.Body, &ev); err != nil {
		return classify.SchemaViolation(fmt.Errorf("decoding the event: %w", err))
	}
	var repair *string
	if r := m.Header(broker.HeaderRepair); r != "" {
		repair = &r
	}
	_, err := p.pool.Exec(ctx, `INSERT INTO `+p.parcels()+` AS t (idempotency_key, event_id, geom, repair)
		VALUES ($1, $2, ST_SetSRID(ST_GeomFromGeoJSON($3), 4326), $4)
		ON CONFLICT (idempotency_key) DO UPDATE
		SET geom = EXCLUDED.geom, repair = EXCLUDED.repair, writes = t.writes + 1, loaded_at = now()`,
		key, ev.EventID, string(ev.Geometry), repair)
	if err != nil {
		return fmt.Errorf("storing parcel %s: %w", ev.EventID, err)
	}
	return nil
}

// loadStats counts what a load did.
type loadStats struct {
	lines, loaded, retry, poison int
}

// readLines feeds every non-blank line of r through the processor as one
// event, and calls report with each outcome. The idempotency key is the
// event's own idempotency_key member; the processor derives one, once,
// from the topic and the exact line for an event without it (and the
// envelope says idempotency_key_derived). The source position (name:line)
// is recorded in the envelope.
func (p *pipeline) readLines(ctx context.Context, r io.Reader, name string, report func(line int, out broker.Result)) (loadStats, error) {
	var st loadStats
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), p.c.maxLine)
	for line := 1; sc.Scan(); line++ {
		body := bytes.Clone(sc.Bytes())
		if len(bytes.TrimSpace(body)) == 0 {
			continue
		}
		st.lines++
		off := int64(line)
		m := &broker.Message{
			Body:   body,
			Source: &envelope.Source{System: "file", Topic: p.c.topic, MessageID: fmt.Sprintf("%s:%d", name, line), Offset: &off},
		}
		out, err := p.proc.Process(ctx, m, p.handle)
		if err != nil {
			// Neither loaded nor dead-lettered. Stop: a rerun on the same
			// input starts over harmlessly.
			return st, fmt.Errorf("%s:%d: not loaded and not dead-lettered: %w", name, line, err)
		}
		switch {
		case out.Processed:
			st.loaded++
		case out.Envelope.Route == classify.RoutePoison:
			st.poison++
		default:
			st.retry++
		}
		if report != nil {
			report(line, out)
		}
	}
	if err := sc.Err(); err != nil {
		return st, fmt.Errorf("reading %s: %w", name, err)
	}
	return st, nil
}

// run loads the named files ("-" or none: stdin).
func run(ctx context.Context, c config, files []string, stdin io.Reader, out io.Writer, log *slog.Logger) error {
	p, err := newPipeline(ctx, c, log)
	if err != nil {
		return err
	}
	defer p.close()
	if len(files) == 0 {
		files = []string{"-"}
	}
	var total loadStats
	for _, name := range files {
		r := stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			r = f
		}
		st, err := p.readLines(ctx, r, name, func(line int, o broker.Result) {
			if o.DeadLettered {
				fmt.Fprintf(out, "%s:%d %s\n", name, line, describe(o))
			}
		})
		total.lines, total.loaded, total.retry, total.poison = total.lines+st.lines, total.loaded+st.loaded, total.retry+st.retry, total.poison+st.poison
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "%d events: %d loaded, %d dead-lettered (poison %d, retry %d)\n", total.lines, total.loaded, total.retry+total.poison, total.poison, total.retry)
	return nil
}

// describe renders a dead-letter outcome: event, class, stage,
// destination and reason.
func describe(o broker.Result) string {
	e := o.Envelope
	reason := e.ErrorMessage
	if e.GeometryError != nil && e.GeometryError.Reason != "" {
		reason = e.GeometryError.Reason
	}
	return fmt.Sprintf("%s: %s at %s after %d attempt(s) -> %s: %s", e.EventID, e.FailureClass, e.FailedStage, e.Attempts, o.Destination, shorten(reason, 70))
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// reinject is the replayer's target: it runs a re-injected event through
// the pipeline as the loader does. Publish returns nil only once the event
// was loaded or durably dead-lettered again, so the replayer acknowledges
// the dead-letter record only then.
type reinject struct{ p *pipeline }

// Publish processes m as an event of topic, which must be this
// pipeline's.
func (r reinject) Publish(ctx context.Context, topic string, m *broker.Message) error {
	if topic != r.p.c.topic {
		return fmt.Errorf("re-injecting into %q: this pipeline is %q", topic, r.p.c.topic)
	}
	m = m.Clone()
	m.Source = &envelope.Source{System: "replay", Topic: topic, MessageID: m.Header(broker.HeaderReplayOf)}
	_, err := r.p.proc.Process(ctx, m, r.p.handle)
	return err
}

// replayer returns a replayer over src (the dead-letter table, or a
// wrapper of it) that repairs invalid geometries and CRS mismatches and
// re-injects into the pipeline.
func (p *pipeline) replayer(src broker.DeadLetterSource) (*replay.Replayer, error) {
	repairers, err := p.chk.Repairers(nil) // invalid_geometry → MakeValid, crs_mismatch → reproject to 4326
	if err != nil {
		return nil, err
	}
	return replay.New(&replay.Options{
		Source:    src,
		Target:    reinject{p},
		Fetcher:   p.off, // verifies offloaded blobs against their SHA-256
		Repairers: repairers,
		Check:     p.chk.ReplayCheck(), // a repair is re-injected only if it now passes
		Logger:    p.log,
	})
}

// destinations are the dead-letter destinations of the pipeline, retry
// first.
func destinations(topic string) []string {
	m := &broker.Message{Source: &envelope.Source{Topic: topic}}
	return []string{broker.DefaultDestination(m, classify.RouteRetry), broker.DefaultDestination(m, classify.RoutePoison)}
}

// replayDestinations runs r over every destination and prints the reports.
func replayDestinations(ctx context.Context, r *replay.Replayer, c config, indent, label string, out io.Writer) (map[string]replay.Report, error) {
	reports := map[string]replay.Report{}
	for _, d := range destinations(c.topic) {
		rep, err := r.Run(ctx, replay.Request{Destination: d, Filter: broker.Filter{Classes: c.classes}, DryRun: c.dryRun})
		reports[d] = rep
		printReport(out, indent, label, d, rep)
		if err != nil {
			return reports, err
		}
	}
	return reports, nil
}

// replayAll is the replay subcommand.
func replayAll(ctx context.Context, c config, out io.Writer, log *slog.Logger) (map[string]replay.Report, error) {
	p, err := newPipeline(ctx, c, log)
	if err != nil {
		return nil, err
	}
	defer p.close()
	r, err := p.replayer(p.store)
	if err != nil {
		return nil, err
	}
	label := "replay"
	if c.dryRun {
		label = "dry run"
	}
	return replayDestinations(ctx, r, c, "", label, out)
}

// printReport prints a replay's counts, then one line per record: its id,
// event, class and outcome, and the repair or why it was left.
func printReport(out io.Writer, indent, label, dest string, rep replay.Report) {
	summary := rep.Summary()
	if summary == "" {
		summary = "nothing to replay"
	}
	fmt.Fprintf(out, "%s%s of %s: %s\n", indent, label, dest, summary)
	for _, it := range rep.Items {
		fmt.Fprintf(out, "%s  record %s\n", indent, it)
	}
}
