// Command redis-consumer is a Redis Streams consumer with geodlq's
// dead-letter path, ready to copy. It reads GeoJSON events from a source
// stream through a consumer group (broker/redisstream's NewConsumer),
// validates each with GEOS and PROJ, retries transient failures in place,
// and dead-letters what cannot be processed to "<stream>.retry.dlt" or
// "<stream>.poison.dlt" — parked streams of the Redis dead-letter store,
// which never trims them. An entry is acknowledged (XACK) only once it was
// processed or its envelope is in the dead-letter stream; entries a
// crashed consumer left unacknowledged are taken over (XAUTOCLAIM) after
// -claim-idle, with their delivery count as the attempt.
//
// The work — here, appending the validated event to the output stream -out
// — runs once per idempotency key, under a claim in Redis
// (replay/redisclaims), so a redelivered or replayed duplicate does
// nothing.
//
// Source entries carry the event in the "body" field, the ordering key in
// "key" and headers in "h:<name>" fields — the layout broker/redisstream
// writes — for example
//
//	XADD spatial.events * body '{"event_id":"p-1","geometry":{…}}' h:idempotency-key idem:v1:…
//
// A producer should set h:idempotency-key (replay.NewKey) or put the key in
// the event's idempotency_key member; without either, one is derived once,
// from the stream and the exact body, and the envelope says
// idempotency_key_derived. An entry without a
// body field is processed as its fields in JSON. A group that does not
// exist yet is created at the stream's first entry, so it processes the
// backlog; acknowledged entries stay in the producer's stream.
//
// The replay subcommand reads both dead-letter streams, repairs invalid
// geometries (GEOS MakeValid) and CRS mismatches (PROJ), re-injects each
// replayable event into its source stream with its idempotency key, and
// acknowledges the dead-letter entry only after that XADD succeeded.
//
//	go run ./examples/redis-consumer -redis redis://cache:6379/0 -stream spatial.events -group spatial-app
//	go run ./examples/redis-consumer -redis redis://cache:6379/0 -stream spatial.events replay -dry-run
//
// Everything it uses is public API, and this file builds on its own in
// your module. (Its walkthrough on the local Redis, sample events through
// the consumer and two replays, is a test: go test -v -run TestDemo
// ./examples/redis-consumer.)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/redisclaims"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
	"github.com/geodlq/geodlq/spatial/proj"
)

type config struct {
	concurrency  int // events processed at once
	redisURL     string
	stream       string // source stream
	group        string
	consumer     string
	out          string // output stream
	prefix       string // dead-letter streams: <prefix>:<destination>
	replayGroup  string
	claimsPrefix string
	claimIdle    time.Duration
	poll         time.Duration
	lease        time.Duration
	offloadDir   string
	maxAttempts  int
	retryDelay   time.Duration
	// replay subcommand
	dryRun  bool
	classes classify.ClassList
	verbose bool
}

func (c *config) register(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&c.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL")
	fs.StringVar(&c.stream, "stream", "spatial.events", "source stream")
	fs.StringVar(&c.group, "group", "spatial-app", "consumer group on the source stream")
	fs.StringVar(&c.consumer, "consumer", fmt.Sprintf("%s-%d", host, os.Getpid()), "this consumer's name in the group (unique per process)")
	fs.StringVar(&c.out, "out", "spatial.parcels", "output stream the validated events are appended to")
	fs.StringVar(&c.prefix, "prefix", redisstream.DefaultPrefix, "dead-letter streams are <prefix>:<stream>.retry.dlt and <prefix>:<stream>.poison.dlt")
	fs.StringVar(&c.replayGroup, "replay-group", redisstream.DefaultGroup, "consumer group replay reads the dead-letter streams through")
	fs.StringVar(&c.claimsPrefix, "claims-prefix", redisclaims.DefaultPrefix, "key prefix of the idempotency claims")
	fs.DurationVar(&c.claimIdle, "claim-idle", time.Minute, "take over source entries left unacknowledged this long (a crashed consumer's); longer than an event takes")
	fs.DurationVar(&c.poll, "poll", time.Second, "wait after a read that found nothing")
	fs.IntVar(&c.concurrency, "concurrency", runtime.GOMAXPROCS(0), "events processed at once (entries of one stream then finish out of order; each is acknowledged on its own)")
	fs.DurationVar(&c.lease, "lease", 30*time.Second, "how long replay leases a dead-letter entry")
	fs.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries (replay reads them back)")
	fs.IntVar(&c.maxAttempts, "max-attempts", 4, "attempts per event before a transient failure is dead-lettered")
	fs.DurationVar(&c.retryDelay, "retry-delay", 200*time.Millisecond, "backoff ceiling after the first failed attempt")
	fs.BoolVar(&c.dryRun, "dry-run", false, "replay: report what would happen, change nothing")
	fs.Var(&c.classes, "class", "replay: only these failure classes (comma-separated)")
	fs.BoolVar(&c.verbose, "v", false, "log every dead-letter and replay decision")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, context.Canceled) {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "redis-consumer:", err)
		os.Exit(1)
	}
}

// cli runs the command line: [flags] or [flags] replay [flags].
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("redis-consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	replayMode := fs.NArg() > 0 && fs.Arg(0) == "replay"
	if replayMode {
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return err
		}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	level := slog.LevelError
	if c.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if replayMode {
		_, err := replayAll(ctx, c, stdout, log)
		return err
	}
	p, err := newPipeline(c, log)
	if err != nil {
		return err
	}
	defer p.close()
	fmt.Fprintf(stdout, "consuming %s as %s/%s; dead letters in %s\n", c.stream, c.group, c.consumer, strings.Join(p.deadLetterKeys(), ", "))
	return p.consume(ctx)
}

// pipeline is what the consumer and the replayer share.
type pipeline struct {
	c      config
	rdb    *redis.Client
	src    *broker.Store // the source and output streams, by key
	store  *broker.Store // the dead-letter streams
	claims *redisclaims.Claims
	chk    *spatial.Checker
	off    *offload.Offloader
	proc   *broker.Processor
	copts  redisstream.ConsumerOptions
	log    *slog.Logger
	// enrich is the pipeline's call to a downstream service (a tile
	// server, a geocoder) before the event is emitted; nil skips it. Its
	// transient failures are retried in place, then dead-lettered.
	enrich func(ctx context.Context, m *broker.Message) error
	close  func()
}

func newPipeline(c config, log *slog.Logger) (*pipeline, error) {
	opts, err := redis.ParseURL(c.redisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	p := &pipeline{c: c, log: log, rdb: redis.NewClient(opts)}
	closers := []func(){func() { _ = p.rdb.Close() }}
	p.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (*pipeline, error) {
		p.close()
		return nil, err
	}
	// The producer's streams, by key (RawKeys): the consumer reads the
	// source stream through -group (KeepAcked: acknowledged entries stay
	// in it), the handler appends to the output stream, and the replayer
	// re-injects into the source stream, all in the layout above. An
	// entry left unacknowledged -claim-idle long is taken over.
	if p.src, err = redisstream.New(p.rdb, &redisstream.Options{RawKeys: true, KeepAcked: true, Group: c.group, Consumer: c.consumer,
		StoreOptions: broker.StoreOptions{LeaseTTL: c.claimIdle, Logger: log}}); err != nil {
		return fail(err)
	}
	closers = append(closers, func() { _ = p.src.Close() })
	// The dead-letter store: one parked stream per destination, never
	// trimmed. Run Redis with appendonly yes (and appendfsync always, or
	// set WaitAOF) so an acknowledged dead-letter write survives a crash.
	if p.store, err = redisstream.New(p.rdb, &redisstream.Options{Prefix: c.prefix, Group: c.replayGroup,
		StoreOptions: broker.StoreOptions{LeaseTTL: c.lease, Logger: log}}); err != nil {
		return fail(err)
	}
	closers = append(closers, func() { _ = p.store.Close() })
	if p.claims, err = redisclaims.New(p.rdb, &redisclaims.Options{Prefix: c.claimsPrefix}); err != nil {
		return fail(err)
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
	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: p.off, ResolveEPSG: p.chk.ResolveEPSG})
	if err != nil {
		return fail(err)
	}
	p.proc, err = broker.NewProcessor(&broker.ProcessorOptions{
		Publisher:   p.store, // its 64 MiB limit is honoured by offloading geometry
		Builder:     builder,
		Destination: broker.DefaultDestination, // <stream>.retry.dlt / <stream>.poison.dlt
		Policy:      classify.Policy{MaxAttempts: c.maxAttempts, BaseDelay: c.retryDelay},
		Logger:      log,
	})
	if err != nil {
		return fail(err)
	}
	p.copts = redisstream.ConsumerOptions{PollInterval: c.poll, ConsumerOptions: broker.ConsumerOptions{Logger: log, Concurrency: c.concurrency}}
	return p, nil
}

// consume runs the consumer until ctx ends.
func (p *pipeline) consume(ctx context.Context) error {
	cons, err := redisstream.NewConsumer(p.src, p.c.stream, p.proc, &p.copts)
	if err != nil {
		return err
	}
	defer cons.Close()
	err = cons.Run(ctx, p.handle) // until ctx ends
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// handle validates an event, then emits it exactly once per idempotency
// key: the claim is taken before the XADD, so a duplicate does nothing.
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
		// The pipeline's real work goes here; this one emits the event.
		return p.src.Publish(ctx, p.c.out, m)
	})
	return classify.WithStage(err, classify.StagePersist)
}

// replayer returns a replayer over src (the dead-letter store, or a
// wrapper of it) that repairs invalid geometries and CRS mismatches and
// re-injects into the source stream the envelope names.
func (p *pipeline) replayer(src broker.DeadLetterSource) (*replay.Replayer, error) {
	repairers, err := p.chk.Repairers(nil) // invalid_geometry → MakeValid, crs_mismatch → reproject to 4326
	if err != nil {
		return nil, err
	}
	return replay.New(&replay.Options{
		Source:    src,
		Target:    p.src, // XADD to the source stream; a byte-identical re-injection within 2 minutes is stored once
		Fetcher:   p.off, // verifies offloaded blobs against their SHA-256
		Repairers: repairers,
		Check:     p.chk.ReplayCheck(), // a repair is re-injected only if it now passes
		Logger:    p.log,
	})
}

// destinations are the pipeline's dead-letter destinations, retry first.
func destinations(stream string) []string {
	m := &broker.Message{Source: &envelope.Source{Topic: stream}}
	return []string{broker.DefaultDestination(m, classify.RouteRetry), broker.DefaultDestination(m, classify.RoutePoison)}
}

// deadLetterKeys are the Redis keys of the dead-letter streams.
func (p *pipeline) deadLetterKeys() []string {
	var keys []string
	for _, d := range destinations(p.c.stream) {
		keys = append(keys, p.c.prefix+":"+d) // the store's stream key: <prefix>:<destination>
	}
	return keys
}

// replayDestinations runs r over every destination and prints the reports.
func replayDestinations(ctx context.Context, r *replay.Replayer, c config, indent, label string, out io.Writer) (map[string]replay.Report, error) {
	reports := map[string]replay.Report{}
	for _, d := range destinations(c.stream) {
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
	p, err := newPipeline(c, log)
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

// printReport prints a replay's counts, then one line per record: its
// entry id, event, class and outcome, and the repair or why it was left.
func printReport(out io.Writer, indent, label, dest string, rep replay.Report) {
	summary := rep.Summary()
	if summary == "" {
		summary = "nothing to replay"
	}
	fmt.Fprintf(out, "%s%s of %s: %s\n", indent, label, dest, summary)
	for _, it := range rep.Items {
		fmt.Fprintf(out, "%s  %s\n", indent, it)
	}
}
