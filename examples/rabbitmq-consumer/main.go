// Command rabbitmq-consumer is a RabbitMQ consumer with geodlq's
// dead-letter path, ready to copy. It consumes GeoJSON events from a
// source queue with manual acknowledgements (broker/rabbitmq's NewConsumer),
// validates each with GEOS and PROJ, retries transient failures in place,
// and dead-letters what cannot be processed to "<queue>.retry.dlt" or
// "<queue>.poison.dlt" — durable queues of the RabbitMQ dead-letter store,
// behind its exchange (-exchange). A delivery is acknowledged only once it
// was processed or the broker confirmed its envelope; if that publish
// fails it is requeued and comes back.
//
// The source queue is declared (idempotently) as a quorum queue, whose
// x-delivery-count becomes the attempt, wired to RabbitMQ's own
// dead-lettering: a message redelivered more than -delivery-limit times
// (the dead-letter store was down all along) is parked in
// "<queue>.parked" with its x-death history instead of looping forever.
//
// The work — here, publishing the validated event to the output queue
// -out, with confirms (rabbitmq.SourcePublisher) — runs once per idempotency key under a replay.Once
// claim. Claims live in memory by default, which makes duplicates harmless
// only within one process; give -claims a redis://…[?geodlq_prefix=P] or
// postgres://…[?geodlq_schema=S] URL to share them between processes and
// restarts, as production needs. Producers should set the idempotency-key
// header (replay.NewKey) or put the key in the event's idempotency_key
// member; without either, one is derived once, from the queue and the
// exact body, and the envelope says idempotency_key_derived.
//
// The replay subcommand reads both dead-letter queues, repairs invalid
// geometries (GEOS MakeValid) and CRS mismatches (PROJ), re-publishes each
// replayable event to its source queue with its idempotency key
// (rabbitmq.SourcePublisher), and acknowledges the dead-letter message only
// after the broker confirmed the re-injection.
//
//	go run ./examples/rabbitmq-consumer -amqp amqp://app:secret@mq:5672/ -queue spatial.events -claims postgres://app@db/geo
//	go run ./examples/rabbitmq-consumer -amqp amqp://app:secret@mq:5672/ -queue spatial.events replay -dry-run
//
// Everything it uses is public API, and this file builds on its own in
// your module. (Its walkthrough on the local RabbitMQ, sample events
// through the consumer and two replays, is a test: go test -v -run TestDemo
// ./examples/rabbitmq-consumer.)
package main

import (
	"context"
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
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/rabbitmq"
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
	concurrency   int // events processed at once
	amqpURL       string
	queue         string // source queue
	deliveryLimit int
	prefetch      int
	out           string // output queue
	exchange      string // the dead-letter store's exchange
	queuePrefix   string
	lease         time.Duration
	claims        string
	offloadDir    string
	maxAttempts   int
	retryDelay    time.Duration
	// replay subcommand
	dryRun  bool
	classes classify.ClassList
	verbose bool
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	fs.IntVar(&c.concurrency, "concurrency", runtime.GOMAXPROCS(0), "deliveries processed at once (at most --prefetch; each is acknowledged on its own)")
	fs.StringVar(&c.queue, "queue", "spatial.events", "source queue (a quorum queue, declared when missing)")
	fs.IntVar(&c.deliveryLimit, "delivery-limit", 20, "the source queue's x-delivery-limit: past it RabbitMQ parks the message in <queue>.parked")
	fs.IntVar(&c.prefetch, "prefetch", 2*runtime.GOMAXPROCS(0), "deliveries in flight (at least --concurrency, so that every worker has one)")
	fs.StringVar(&c.out, "out", "spatial.parcels", "output queue the validated events are published to (declared when missing)")
	fs.StringVar(&c.exchange, "exchange", rabbitmq.DefaultExchange, "the dead-letter store's exchange")
	fs.StringVar(&c.queuePrefix, "queue-prefix", "", "prefix of the dead-letter queues' names")
	fs.DurationVar(&c.lease, "lease", rabbitmq.DefaultLeaseTTL, "how long replay may hold a dead-letter message before the store requeues it")
	fs.StringVar(&c.claims, "claims", "memory", "idempotency claims: memory (this process only), redis://…[?geodlq_prefix=P] or postgres://…[?geodlq_schema=S]")
	fs.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries (replay reads them back)")
	fs.IntVar(&c.maxAttempts, "max-attempts", 4, "attempts per delivery before a transient failure is dead-lettered")
	fs.DurationVar(&c.retryDelay, "retry-delay", 200*time.Millisecond, "backoff ceiling after the first failed attempt")
	fs.BoolVar(&c.dryRun, "dry-run", false, "replay: report what would happen, change nothing")
	fs.Var(&c.classes, "class", "replay: only these failure classes (comma-separated)")
	fs.BoolVar(&c.verbose, "v", false, "log every dead-letter and replay decision")
}

// dlx and parking name the source queue's dead-letter exchange and the
// queue RabbitMQ parks messages in.
func (c config) dlx() string     { return c.queue + ".dlx" }
func (c config) parking() string { return c.queue + ".parked" }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, context.Canceled) {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "rabbitmq-consumer:", err)
		os.Exit(1)
	}
}

// cli runs the command line: [flags] or [flags] replay [flags].
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rabbitmq-consumer", flag.ContinueOnError)
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
	fmt.Fprintf(stdout, "consuming %s; dead letters in %s\n", c.queue, strings.Join(p.deadLetterQueues(), ", "))
	return p.consume(ctx)
}

// pipeline is what the consumer and the replayer share.
type pipeline struct {
	c      config
	conn   *amqp.Connection
	store  *broker.Store
	pub    broker.Publisher // to queues by name: the output queue, and the replayer's target
	claims replay.Claims
	chk    *spatial.Checker
	off    *offload.Offloader
	popts  broker.ProcessorOptions
	copts  rabbitmq.ConsumerOptions
	log    *slog.Logger
	// enrich is the pipeline's call to a downstream service (a tile
	// server, a geocoder) before the event is emitted; nil skips it. Its
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
	if p.conn, err = amqp.Dial(c.amqpURL); err != nil {
		return fail(fmt.Errorf("connecting to RabbitMQ: %w", err))
	}
	closers = append(closers, func() { _ = p.conn.Close() })
	// The dead-letter store: persistent messages in durable quorum queues,
	// published with confirms.
	if p.store, err = rabbitmq.New(ctx, p.conn, &rabbitmq.Options{
		Exchange: c.exchange, QueuePrefix: c.queuePrefix, QueueArgs: amqp.Table{"x-queue-type": "quorum"}, Create: true,
		StoreOptions: broker.StoreOptions{LeaseTTL: c.lease, Logger: log},
	}); err != nil {
		return fail(fmt.Errorf("dead-letter store: %w", err))
	}
	closers = append(closers, func() { _ = p.store.Close() })
	// Publishes persistent and mandatory through the default exchange,
	// with confirms, on the store's channels.
	p.pub = rabbitmq.SourcePublisher(p.store)
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
		Publisher:   p.store, // confirms before the source is acked; its limit is honoured by offloading geometry
		Builder:     builder,
		Destination: broker.DefaultDestination, // <queue>.retry.dlt / <queue>.poison.dlt
		Policy:      classify.Policy{MaxAttempts: c.maxAttempts, BaseDelay: c.retryDelay},
		Logger:      log,
	}
	p.copts = rabbitmq.ConsumerOptions{Prefetch: c.prefetch, ConsumerOptions: broker.ConsumerOptions{Logger: log, Concurrency: c.concurrency}}
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

// setup declares, idempotently, the source queue with its dead-letter
// exchange and parking queue, the output queue and the dead-letter queues.
func (p *pipeline) setup(ctx context.Context) error {
	c := p.c
	ch, err := p.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if _, err := rabbitmq.DeclareSourceQueue(ctx, ch, c.queue, &rabbitmq.SourceQueueOptions{
		DeadLetterExchange: c.dlx(), ParkingQueue: c.parking(), Quorum: true, DeliveryLimit: c.deliveryLimit,
	}); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(c.out, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declaring output queue %q: %w", c.out, err)
	}
	for _, d := range destinations(c.queue) {
		if err := rabbitmq.Declare(ctx, p.store, d); err != nil {
			return err
		}
	}
	return nil
}

// consume runs the consumer until ctx ends.
func (p *pipeline) consume(ctx context.Context) error {
	if err := p.setup(ctx); err != nil {
		return err
	}
	ch, err := p.conn.Channel() // the consumer's own channel
	if err != nil {
		return err
	}
	defer ch.Close()
	proc, err := broker.NewProcessor(&p.popts)
	if err != nil {
		return err
	}
	rc, err := rabbitmq.NewConsumer(ch, p.c.queue, proc, &p.copts)
	if err != nil {
		return err
	}
	defer rc.Close() // before the channel: requeues what the broker pushed and was not processed
	return rc.Run(ctx, p.handle)
}

// handle validates an event, then emits it exactly once per idempotency
// key: the claim is taken before the publish, so a duplicate does nothing.
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
		return p.pub.Publish(ctx, p.c.out, m)
	})
	return classify.WithStage(err, classify.StagePersist)
}

// replayer returns a replayer over src (the dead-letter store, or a
// wrapper of it) that repairs invalid geometries and CRS mismatches and
// re-injects into the source queue the envelope names.
func (p *pipeline) replayer(src broker.DeadLetterSource) (*replay.Replayer, error) {
	repairers, err := p.chk.Repairers(nil) // invalid_geometry → MakeValid, crs_mismatch → reproject to 4326
	if err != nil {
		return nil, err
	}
	return replay.New(&replay.Options{
		Source:    src,
		Target:    p.pub, // the source queue, confirmed
		Fetcher:   p.off, // verifies offloaded blobs against their SHA-256
		Repairers: repairers,
		Check:     p.chk.ReplayCheck(), // a repair is re-injected only if it now passes
		Logger:    p.log,
	})
}

// destinations are the pipeline's dead-letter destinations, retry first.
func destinations(queue string) []string {
	m := &broker.Message{Source: &envelope.Source{Topic: queue}}
	return []string{broker.DefaultDestination(m, classify.RouteRetry), broker.DefaultDestination(m, classify.RoutePoison)}
}

// deadLetterQueues are the dead-letter destinations' queues.
func (p *pipeline) deadLetterQueues() []string {
	var qs []string
	for _, d := range destinations(p.c.queue) {
		qs = append(qs, rabbitmq.Queue(p.store, d))
	}
	return qs
}

// replayDestinations runs r over every destination and prints the reports.
func replayDestinations(ctx context.Context, r *replay.Replayer, c config, indent, label string, out io.Writer) (map[string]replay.Report, error) {
	reports := map[string]replay.Report{}
	for _, d := range destinations(c.queue) {
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
// message id, event, class and outcome, and the repair or why it was left.
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
