// Command jetstream-consumer is a NATS JetStream consumer with geodlq's
// dead-letter path, ready to copy. It pulls GeoJSON events from a source
// stream through a durable consumer (broker/jetstream's NewConsumer: explicit
// acks, attempts counted from the server's NumDelivered), validates each
// with GEOS and PROJ, retries transient failures in place, and
// dead-letters what cannot be processed to "<subject>.retry.dlt" or
// "<subject>.poison.dlt" in the JetStream dead-letter store (one
// work-queue stream, default GEODLQ, that never discards an un-replayed
// record). A message is double-acked only once it was processed or its
// envelope was acknowledged by the dead-letter stream; messages the server
// gives up on after max_deliver are dead-lettered from the MAX_DELIVERIES
// advisory.
//
// The work — here, storing the validated event in the KV bucket -kv under
// the hex SHA-256 of its idempotency key — runs once per idempotency key
// under a replay.Once claim. Claims live in memory by default, which makes
// duplicates harmless only within one process; give -claims a
// redis://…[?geodlq_prefix=P] or postgres://…[?geodlq_schema=S] URL to
// share them between processes and restarts, as production needs.
//
// The source stream (subjects: -subject) is created when missing, the
// durable consumer created or updated. Producers should set the idempotency-key header
// (replay.NewKey) or put the key in the event's idempotency_key member;
// without either, one is derived once, from the subject and the exact body,
// and the envelope says idempotency_key_derived.
//
// The replay subcommand reads both dead-letter destinations, repairs
// invalid geometries (GEOS MakeValid) and CRS mismatches (PROJ),
// re-publishes each replayable event to its source subject with its
// idempotency key (jetstream.SourcePublisher), and acknowledges the
// dead-letter record only after the stream acknowledged the re-injection.
//
//	go run ./examples/jetstream-consumer -nats nats://nats:4222 -stream SPATIAL -subject spatial.events -claims redis://cache:6379/0
//	go run ./examples/jetstream-consumer -nats nats://nats:4222 -subject spatial.events replay -dry-run
//
// Everything it uses is public API, and this file builds on its own in
// your module. (Its walkthrough on the local nats-server, sample events
// through the consumer and two replays, is a test: go test -v -run TestDemo
// ./examples/jetstream-consumer.)
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/jetstream"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/pgclaims"
	"github.com/geodlq/geodlq/replay/redisclaims"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
	"github.com/geodlq/geodlq/spatial/proj"
)

type config struct {
	concurrency int // events processed at once
	natsURL     string
	stream      string // source stream
	subject     string // source subject
	durable     string
	maxDeliver  int
	ackWait     time.Duration
	fetchWait   time.Duration
	kv          string // output bucket
	dlqStream   string
	dlqPrefix   string
	replayer    string
	lease       time.Duration // the dead-letter store's ack wait
	claims      string
	offloadDir  string
	maxAttempts int
	retryDelay  time.Duration
	// replay subcommand
	dryRun  bool
	classes classify.ClassList
	verbose bool
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.natsURL, "nats", nats.DefaultURL, "NATS server URL (JetStream enabled)")
	fs.IntVar(&c.concurrency, "concurrency", runtime.GOMAXPROCS(0), "events processed at once (one pull fetches as many; each message is acknowledged on its own)")
	fs.StringVar(&c.stream, "stream", "SPATIAL", "source stream (created when missing, capturing -subject)")
	fs.StringVar(&c.subject, "subject", "spatial.events", "source subject")
	fs.StringVar(&c.durable, "durable", "spatial-app", "durable pull consumer on the source stream")
	fs.IntVar(&c.maxDeliver, "max-deliver", 5, "the source consumer's max_deliver; then the MAX_DELIVERIES advisory dead-letters the message")
	fs.DurationVar(&c.ackWait, "ack-wait", 30*time.Second, "the source consumer's ack_wait (kept alive with in-progress acks while a message is processed)")
	fs.DurationVar(&c.fetchWait, "fetch-wait", 5*time.Second, "longest wait of one pull")
	fs.StringVar(&c.kv, "kv", "parcels", "KV bucket the validated events are stored in (created when missing)")
	fs.StringVar(&c.dlqStream, "dlq-stream", jetstream.DefaultStream, "dead-letter stream")
	fs.StringVar(&c.dlqPrefix, "dlq-prefix", jetstream.DefaultSubjectPrefix, "dead-letter subject prefix")
	fs.StringVar(&c.replayer, "replayer", jetstream.DefaultReplayer, "replayer group: the durable consumers replay reads the dead-letter stream through")
	fs.DurationVar(&c.lease, "lease", jetstream.DefaultLeaseTTL, "how long replay leases a dead-letter record (its consumers' ack_wait)")
	fs.StringVar(&c.claims, "claims", "memory", "idempotency claims: memory (this process only), redis://…[?geodlq_prefix=P] or postgres://…[?geodlq_schema=S]")
	fs.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries (replay reads them back)")
	fs.IntVar(&c.maxAttempts, "max-attempts", 4, "attempts per delivery before a transient failure is dead-lettered")
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
		fmt.Fprintln(os.Stderr, "jetstream-consumer:", err)
		os.Exit(1)
	}
}

// cli runs the command line: [flags] or [flags] replay [flags].
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetstream-consumer", flag.ContinueOnError)
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
	p, err := newPipeline(ctx, c, log)
	if err != nil {
		return err
	}
	defer p.close()
	fmt.Fprintf(stdout, "consuming %s (%s) as %s; dead letters in stream %s\n", c.subject, c.stream, c.durable, c.dlqStream)
	return p.consume(ctx)
}

// pipeline is what the consumer and the replayer share.
type pipeline struct {
	c      config
	nc     *nats.Conn
	js     natsjs.JetStream
	store  *broker.Store
	kv     natsjs.KeyValue
	claims replay.Claims
	chk    *spatial.Checker
	off    *offload.Offloader
	popts  broker.ProcessorOptions
	copts  jetstream.ConsumerOptions
	log    *slog.Logger
	// enrich is the pipeline's call to a downstream service (a tile
	// server, a geocoder) before the event is stored; nil skips it. Its
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
	var err error
	if p.nc, err = nats.Connect(c.natsURL); err != nil {
		return fail(fmt.Errorf("connecting to %s: %w", c.natsURL, err))
	}
	closers = append(closers, p.nc.Close)
	if p.js, err = natsjs.New(p.nc); err != nil {
		return fail(err)
	}
	// The dead-letter store: every destination in one work-queue stream,
	// created when missing. Run nats-server with sync_interval: always (or
	// replicas) so an acknowledged write survives a machine crash.
	if p.store, err = jetstream.New(ctx, p.js, &jetstream.Options{
		Stream: c.dlqStream, SubjectPrefix: c.dlqPrefix, Replayer: c.replayer, Create: true,
		StoreOptions: broker.StoreOptions{LeaseTTL: c.lease, Logger: log},
	}); err != nil {
		return fail(fmt.Errorf("dead-letter stream: %w", err))
	}
	closers = append(closers, func() { _ = p.store.Close() })
	claims, closeClaims, err := openClaims(ctx, c.claims)
	if err != nil {
		return fail(err)
	}
	p.claims = claims
	closers = append(closers, closeClaims)
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
	p.popts = broker.ProcessorOptions{
		Publisher:   p.store, // its limit (max_payload less headers) is honoured by offloading geometry
		Builder:     builder,
		Destination: broker.DefaultDestination, // <subject>.retry.dlt / <subject>.poison.dlt
		Policy:      classify.Policy{MaxAttempts: c.maxAttempts, BaseDelay: c.retryDelay},
		Logger:      log,
	}
	p.copts = jetstream.ConsumerOptions{FetchWait: c.fetchWait, ConsumerOptions: broker.ConsumerOptions{Logger: log, Concurrency: c.concurrency}}
	return p, nil
}

// openClaims opens the idempotency claims store a URL names.
func openClaims(ctx context.Context, raw string) (replay.Claims, func(), error) {
	if raw == "" || raw == "memory" {
		return replay.NewMemClaims(nil), func() {}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("-claims: %w", err)
	}
	q := u.Query()
	switch u.Scheme {
	case "redis", "rediss":
		prefix := q.Get("geodlq_prefix")
		q.Del("geodlq_prefix")
		u.RawQuery = q.Encode()
		opts, err := redis.ParseURL(u.String())
		if err != nil {
			return nil, nil, fmt.Errorf("-claims: %w", err)
		}
		rdb := redis.NewClient(opts)
		s, err := redisclaims.New(rdb, &redisclaims.Options{Prefix: prefix})
		if err != nil {
			_ = rdb.Close()
			return nil, nil, err
		}
		return s, func() { _ = rdb.Close() }, nil
	case "postgres", "postgresql":
		schema := q.Get("geodlq_schema")
		q.Del("geodlq_schema")
		u.RawQuery = q.Encode()
		pool, err := pgxpool.New(ctx, u.String())
		if err != nil {
			return nil, nil, fmt.Errorf("-claims: %w", err)
		}
		s, err := pgclaims.New(ctx, pool, &pgclaims.Options{Schema: schema, Create: true})
		if err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("-claims: %w", err)
		}
		return s, pool.Close, nil
	}
	return nil, nil, fmt.Errorf("-claims: want memory, redis://… or postgres://…, got %q", raw)
}

// setup creates the source stream and the output bucket when missing
// (existing ones are left as they are), and creates or updates the durable
// consumer with -max-deliver and -ack-wait.
func (p *pipeline) setup(ctx context.Context) (natsjs.Consumer, error) {
	c := p.c
	if _, err := p.js.Stream(ctx, c.stream); errors.Is(err, natsjs.ErrStreamNotFound) {
		if _, err := p.js.CreateStream(ctx, natsjs.StreamConfig{Name: c.stream, Subjects: []string{c.subject}, Storage: natsjs.FileStorage}); err != nil {
			return nil, fmt.Errorf("creating stream %s: %w", c.stream, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("stream %s: %w", c.stream, err)
	}
	cons, err := p.js.CreateOrUpdateConsumer(ctx, c.stream, natsjs.ConsumerConfig{
		Durable: c.durable, FilterSubject: c.subject, AckPolicy: natsjs.AckExplicitPolicy, AckWait: c.ackWait, MaxDeliver: c.maxDeliver,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", c.durable, c.stream, err)
	}
	if p.kv, err = p.js.KeyValue(ctx, c.kv); errors.Is(err, natsjs.ErrBucketNotFound) {
		p.kv, err = p.js.CreateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: c.kv, History: 8})
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", c.kv, err)
	}
	return cons, nil
}

// consume runs the consumer until ctx ends.
func (p *pipeline) consume(ctx context.Context) error {
	cons, err := p.setup(ctx)
	if err != nil {
		return err
	}
	proc, err := broker.NewProcessor(&p.popts)
	if err != nil {
		return err
	}
	jc, err := jetstream.NewConsumer(ctx, p.js, cons, proc, &p.copts)
	if err != nil {
		return err
	}
	defer jc.Close()            // also stops dead-lettering what the server gives up on
	err = jc.Run(ctx, p.handle) // until ctx ends
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// handle validates an event, then stores it exactly once per idempotency
// key: the claim is taken before the KV put, so a duplicate does nothing.
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
		// The pipeline's real work goes here; this one stores the event.
		_, err := p.kv.Put(ctx, parcelKey(key), m.Body)
		return err
	})
	return classify.WithStage(err, classify.StagePersist)
}

// parcelKey is the KV key of an event: KV keys allow only
// [-/_=.a-zA-Z0-9], idempotency keys anything.
func parcelKey(idempotencyKey string) string {
	sum := sha256.Sum256([]byte(idempotencyKey))
	return hex.EncodeToString(sum[:])
}

// replayer returns a replayer over src (the dead-letter store, or a
// wrapper of it) that repairs invalid geometries and CRS mismatches and
// re-injects into the source subject the envelope names.
func (p *pipeline) replayer(src broker.DeadLetterSource) (*replay.Replayer, error) {
	repairers, err := p.chk.Repairers(nil) // invalid_geometry → MakeValid, crs_mismatch → reproject to 4326
	if err != nil {
		return nil, err
	}
	return replay.New(&replay.Options{
		Source:    src,
		Target:    jetstream.SourcePublisher(p.store), // publishes to the source subject, waits for the PubAck
		Fetcher:   p.off,                              // verifies offloaded blobs against their SHA-256
		Repairers: repairers,
		Check:     p.chk.ReplayCheck(), // a repair is re-injected only if it now passes
		Logger:    p.log,
	})
}

// destinations are the pipeline's dead-letter destinations, retry first.
func destinations(subject string) []string {
	m := &broker.Message{Source: &envelope.Source{Topic: subject}}
	return []string{broker.DefaultDestination(m, classify.RouteRetry), broker.DefaultDestination(m, classify.RoutePoison)}
}

// replayDestinations runs r over every destination and prints the reports.
func replayDestinations(ctx context.Context, r *replay.Replayer, c config, indent, label string, out io.Writer) (map[string]replay.Report, error) {
	reports := map[string]replay.Report{}
	for _, d := range destinations(c.subject) {
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

// printReport prints a replay's counts, then one line per record: its
// sequence, event, class and outcome, and the repair or why it was left.
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
