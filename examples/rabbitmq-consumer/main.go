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
// -out, with confirms — runs once per idempotency key under a replay.Once
// claim. Claims live in memory by default, which makes duplicates harmless
// only within one process; give -claims a redis://…[?geodlq_prefix=P] or
// postgres://…[?geodlq_schema=S] URL to share them between processes and
// restarts, as production needs. Producers should set the idempotency-key
// header (replay.NewKey); without it one is derived once, from the queue
// and the exact body.
//
// The replay subcommand reads both dead-letter queues, repairs invalid
// geometries (GEOS MakeValid) and CRS mismatches (PROJ), re-publishes each
// replayable event to its source queue with its idempotency key, and
// acknowledges the dead-letter message only after the broker confirmed
// the re-injection.
//
//	go run ./examples/rabbitmq-consumer -amqp amqp://app:secret@mq:5672/ -queue spatial.events -claims postgres://app@db/geo
//	go run ./examples/rabbitmq-consumer -amqp amqp://app:secret@mq:5672/ -queue spatial.events replay -dry-run
//	go run ./examples/rabbitmq-consumer -demo   # sample events on the local RabbitMQ (scripts/services.sh)
//
// Everything it uses is public API.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
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
)

type config struct {
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
	classes string
	// demo
	demo, keep bool
	verbose    bool
}

func (c *config) register(fs *flag.FlagSet) {
	fs.StringVar(&c.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	fs.StringVar(&c.queue, "queue", "spatial.events", "source queue (a quorum queue, declared when missing)")
	fs.IntVar(&c.deliveryLimit, "delivery-limit", 20, "the source queue's x-delivery-limit: past it RabbitMQ parks the message in <queue>.parked")
	fs.IntVar(&c.prefetch, "prefetch", 1, "deliveries in flight (they are handled one after another)")
	fs.StringVar(&c.out, "out", "spatial.parcels", "output queue the validated events are published to (declared when missing)")
	fs.StringVar(&c.exchange, "exchange", rabbitmq.DefaultExchange, "the dead-letter store's exchange")
	fs.StringVar(&c.queuePrefix, "queue-prefix", "", "prefix of the dead-letter queues' names")
	fs.DurationVar(&c.lease, "lease", rabbitmq.DefaultLeaseTTL, "how long replay may hold a dead-letter message before the store requeues it")
	fs.StringVar(&c.claims, "claims", "memory", "idempotency claims: memory (this process only), redis://…[?geodlq_prefix=P] or postgres://…[?geodlq_schema=S]")
	fs.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries (replay reads them back)")
	fs.IntVar(&c.maxAttempts, "max-attempts", 4, "attempts per delivery before a transient failure is dead-lettered")
	fs.DurationVar(&c.retryDelay, "retry-delay", 200*time.Millisecond, "backoff ceiling after the first failed attempt")
	fs.BoolVar(&c.dryRun, "dry-run", false, "replay: report what would happen, change nothing")
	fs.StringVar(&c.classes, "class", "", "replay: only these failure classes (comma-separated)")
	fs.BoolVar(&c.demo, "demo", false, "run sample events through the consumer on queues of its own, replay, print everything, then delete the queues")
	fs.BoolVar(&c.keep, "keep", false, "demo: keep the demo's queues and exchanges")
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

// cli runs the command line: [flags], [flags] replay [flags], or -demo.
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
	switch {
	case c.demo:
		run := "demo." + strings.ToLower(rand.Text()[:8])
		c.queue, c.out, c.exchange, c.claims = run+".spatial.events", run+".spatial.parcels", run+".dlq", "memory"
		_, err := demo(ctx, c, stdout, log)
		if c.keep {
			fmt.Fprintf(stdout, "\nKept the demo's queues and exchanges (%s.*); delete them with rabbitmqctl delete_queue …\n", run)
		} else if cerr := deleteAll(c); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return err
	case replayMode:
		_, err := replayAll(ctx, c, stdout, log)
		return err
	default:
		p, err := newPipeline(ctx, c, log)
		if err != nil {
			return err
		}
		defer p.close()
		fmt.Fprintf(stdout, "consuming %s; dead letters in %s\n", c.queue, strings.Join(p.deadLetterQueues(), ", "))
		return p.consume(ctx)
	}
}

// pipeline is what the consumer and the replayer share.
type pipeline struct {
	c      config
	conn   *amqp.Connection
	store  *broker.Store
	pub    *queuePublisher
	claims replay.Claims
	chk    *spatial.Checker
	off    *offload.Offloader
	popts  broker.ProcessorOptions
	log    *slog.Logger
	// enrich is the pipeline's call to a downstream service before the
	// event is emitted (the demo's tile server). Nil skips it.
	enrich func(ctx context.Context, m *broker.Message) error
	// handled, when set, sees every handler call and its result (the
	// demo counts deliveries with it).
	handled func(m *broker.Message, err error)
	close   func()
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
	p.pub = &queuePublisher{conn: p.conn}
	closers = append(closers, p.pub.Close)
	claims, closeClaims, err := openClaims(ctx, c.claims)
	if err != nil {
		return fail(err)
	}
	p.claims = claims
	closers = append(closers, closeClaims)
	if p.chk, err = spatial.NewChecker(nil); err != nil { // expects EPSG:4326
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
		s, err := pgclaims.New(ctx, pool, &pgclaims.Options{Schema: schema, Migrate: true})
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
	proc, err := broker.NewProcessor(p.popts)
	if err != nil {
		return err
	}
	rc, err := rabbitmq.NewConsumer(ch, p.c.queue, proc, &rabbitmq.ConsumerOptions{Prefetch: p.c.prefetch,
		ConsumerOptions: broker.ConsumerOptions{Logger: p.log}})
	if err != nil {
		return err
	}
	defer rc.Close() // before the channel: requeues what the broker pushed and was not processed
	return rc.Run(ctx, p.handle)
}

// handle validates an event, then emits it exactly once per idempotency
// key: the claim is taken before the publish, so a duplicate does nothing.
func (p *pipeline) handle(ctx context.Context, m *broker.Message) (err error) {
	if p.handled != nil {
		defer func() { p.handled(m, err) }()
	}
	if _, err := p.chk.CheckEventContext(ctx, m.Body); err != nil {
		return err // *classify.Error: class, stage, GEOS reason, location, EPSG
	}
	if p.enrich != nil {
		if err := p.enrich(ctx, m); err != nil {
			return classify.WithStage(err, classify.StageSpatialJoin)
		}
	}
	key := m.Header(broker.HeaderIdempotencyKey) // always set by the Processor
	_, err = replay.Once(ctx, p.claims, key, time.Minute, func(ctx context.Context) error {
		// The pipeline's real work goes here; this one emits the event.
		return p.pub.Publish(ctx, p.c.out, m)
	})
	return classify.WithStage(err, classify.StagePersist)
}

// queuePublisher publishes persistent messages to queues through the
// default exchange and waits for the broker's confirm: the replayer's
// target, and the consumer's output. Headers travel as AMQP headers, the
// key as the byte-array header rabbitmq.HeaderKey, as
// rabbitmq.MessageOf reads them. It is safe for concurrent use.
type queuePublisher struct {
	conn    *amqp.Connection
	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
}

// Publish publishes m, persistent and mandatory, to queue and returns once
// the broker confirmed it. A message no queue takes fails with
// rabbitmq.ErrUnroutable, one the broker nacks with rabbitmq.ErrNacked.
func (q *queuePublisher) Publish(ctx context.Context, queue string, m *broker.Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ch == nil || q.ch.IsClosed() {
		ch, err := q.conn.Channel()
		if err != nil {
			return fmt.Errorf("opening a channel: %w", err)
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return fmt.Errorf("enabling publisher confirms: %w", err)
		}
		q.ch, q.returns = ch, ch.NotifyReturn(make(chan amqp.Return, 1))
	}
	headers := amqp.Table{}
	for k, v := range m.Headers {
		headers[k] = v
	}
	if m.Key != nil {
		headers[rabbitmq.HeaderKey] = m.Key
	}
	dc, err := q.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, Headers: headers, Body: m.Body, MessageId: strings.ToLower(rand.Text()), Timestamp: time.Now(),
	})
	if err != nil {
		q.drop()
		return fmt.Errorf("publishing to %q: %w", queue, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		q.drop() // a late confirm or return could not be told apart from the next message's
		return fmt.Errorf("waiting for the confirm of a message to %q (it may or may not be stored): %w", queue, err)
	}
	// A basic.return precedes the basic.ack of the same message, and the
	// client hands it over before it resolves the confirm.
	select {
	case r := <-q.returns:
		return fmt.Errorf("publishing to %q: %d %s: %w", queue, r.ReplyCode, r.ReplyText, rabbitmq.ErrUnroutable)
	default:
	}
	if !ok {
		return fmt.Errorf("publishing to %q: %w", queue, rabbitmq.ErrNacked)
	}
	return nil
}

func (q *queuePublisher) drop() {
	_ = q.ch.Close()
	q.ch = nil
}

// Close closes the publisher's channel.
func (q *queuePublisher) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ch != nil {
		q.drop()
	}
}

// replayer returns a replayer over src (the dead-letter store, or a
// wrapper of it) that repairs invalid geometries and CRS mismatches and
// re-injects into the source queue the envelope names.
func (p *pipeline) replayer(src broker.DeadLetterSource) (*replay.Replayer, error) {
	repairers, err := p.chk.Repairers(nil) // invalid_geometry → MakeValid, crs_mismatch → reproject to 4326
	if err != nil {
		return nil, err
	}
	return replay.New(replay.Options{
		Source:    src,
		Target:    p.pub,
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

func (c config) filter() (broker.Filter, error) {
	classes, err := classify.ParseClasses(c.classes)
	if err != nil {
		return broker.Filter{}, fmt.Errorf("-class: %w", err)
	}
	return broker.Filter{Classes: classes}, nil
}

// replayDestinations runs r over every destination and prints the reports.
func replayDestinations(ctx context.Context, r *replay.Replayer, c config, indent, label string, out io.Writer) (map[string]replay.Report, error) {
	f, err := c.filter()
	if err != nil {
		return nil, err
	}
	reports := map[string]replay.Report{}
	for _, d := range destinations(c.queue) {
		rep, err := r.Run(ctx, replay.Request{Destination: d, Filter: f, DryRun: c.dryRun})
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

func printReport(out io.Writer, indent, label, dest string, rep replay.Report) {
	summary := rep.Summary()
	if summary == "" {
		summary = "nothing to replay"
	}
	fmt.Fprintf(out, "%s%s of %s: %s\n", indent, label, dest, summary)
	for _, it := range rep.Items {
		why := ""
		switch {
		case it.Repair != nil:
			why = it.Repair.String()
		case it.Err != nil:
			why = shorten(it.Err.Error(), 70)
		}
		fmt.Fprintf(out, "%s  %-14s %-17s %-13s %s\n", indent, shorten(it.EventID, 14), it.Class, it.Outcome, why)
	}
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// deleteAll deletes the queues and exchanges the pipeline declared (the
// demo's).
func deleteAll(c config) error {
	conn, err := amqp.Dial(c.amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	queues := []string{c.queue, c.parking(), c.out}
	for _, d := range destinations(c.queue) {
		queues = append(queues, c.queuePrefix+d)
	}
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("deleting queue %s: %w", q, err)
		}
	}
	for _, x := range []string{c.dlx(), c.exchange} {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return fmt.Errorf("deleting exchange %s: %w", x, err)
		}
	}
	return nil
}
