// Command redis-consumer is a Redis Streams consumer with geodlq's
// dead-letter path, ready to copy. It reads GeoJSON events from a source
// stream through a consumer group, validates each with GEOS and PROJ,
// retries transient failures in place, and dead-letters what cannot be
// processed to "<stream>.retry.dlt" or "<stream>.poison.dlt" — parked
// streams of the Redis dead-letter store (broker/redisstream), which never
// trims them. An entry is acknowledged (XACK) only once it was processed
// or its envelope is in the dead-letter stream; entries a crashed consumer
// left unacknowledged are taken over (XAUTOCLAIM) after -claim-idle, with
// their delivery count as the attempt.
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
// A producer should set h:idempotency-key (replay.NewKey); without it one
// is derived once, from the stream and the exact body. An entry without a
// body field is dead-lettered with its fields as a JSON object. A group
// that does not exist yet is created at the stream's first entry, so it
// processes the backlog.
//
// The replay subcommand reads both dead-letter streams, repairs invalid
// geometries (GEOS MakeValid) and CRS mismatches (PROJ), re-injects each
// replayable event into its source stream with its idempotency key, and
// acknowledges the dead-letter entry only after that XADD succeeded.
//
//	go run ./examples/redis-consumer -redis redis://cache:6379/0 -stream spatial.events -group spatial-app
//	go run ./examples/redis-consumer -redis redis://cache:6379/0 -stream spatial.events replay -dry-run
//	go run ./examples/redis-consumer -demo   # sample events on the local Redis (scripts/services.sh)
//
// Everything it uses is public API.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
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
)

type config struct {
	redisURL     string
	stream       string // source stream
	group        string
	consumer     string
	out          string // output stream
	prefix       string // dead-letter streams: <prefix>:<destination>
	replayGroup  string
	claimsPrefix string
	claimIdle    time.Duration
	block        time.Duration
	lease        time.Duration
	offloadDir   string
	maxAttempts  int
	retryDelay   time.Duration
	// replay subcommand
	dryRun  bool
	classes string
	// demo
	demo, keep bool
	verbose    bool
}

func (c *config) register(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&c.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL")
	fs.StringVar(&c.stream, "stream", "spatial.events", "source stream")
	fs.StringVar(&c.group, "group", "spatial-app", "consumer group on the source stream")
	fs.StringVar(&c.consumer, "consumer", fmt.Sprintf("%s-%d", host, os.Getpid()), "this consumer's name in the group")
	fs.StringVar(&c.out, "out", "spatial.parcels", "output stream the validated events are appended to")
	fs.StringVar(&c.prefix, "prefix", redisstream.DefaultPrefix, "dead-letter streams are <prefix>:<stream>.retry.dlt and <prefix>:<stream>.poison.dlt")
	fs.StringVar(&c.replayGroup, "replay-group", redisstream.DefaultGroup, "consumer group replay reads the dead-letter streams through")
	fs.StringVar(&c.claimsPrefix, "claims-prefix", redisclaims.DefaultPrefix, "key prefix of the idempotency claims")
	fs.DurationVar(&c.claimIdle, "claim-idle", time.Minute, "take over source entries left unacknowledged this long (a crashed consumer's)")
	fs.DurationVar(&c.block, "block", 2*time.Second, "longest XREADGROUP wait")
	fs.DurationVar(&c.lease, "lease", 30*time.Second, "how long replay leases a dead-letter entry")
	fs.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries (replay reads them back)")
	fs.IntVar(&c.maxAttempts, "max-attempts", 4, "attempts per event before a transient failure is dead-lettered")
	fs.DurationVar(&c.retryDelay, "retry-delay", 200*time.Millisecond, "backoff ceiling after the first failed attempt")
	fs.BoolVar(&c.dryRun, "dry-run", false, "replay: report what would happen, change nothing")
	fs.StringVar(&c.classes, "class", "", "replay: only these failure classes (comma-separated)")
	fs.BoolVar(&c.demo, "demo", false, "run sample events through the consumer on keys of its own, replay, print everything, then delete the keys")
	fs.BoolVar(&c.keep, "keep", false, "demo: keep the demo's keys")
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

// cli runs the command line: [flags], [flags] replay [flags], or -demo.
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
	switch {
	case c.demo:
		run := "demo-" + strings.ToLower(rand.Text()[:8])
		c.stream, c.out, c.prefix, c.claimsPrefix = run+":spatial.events", run+":spatial.parcels", run+":dlq", run+":claim"
		_, err := demo(ctx, c, stdout, log)
		if c.keep {
			fmt.Fprintf(stdout, "\nKept the demo's keys; delete them with: redis-cli --scan --pattern '%s:*' | xargs redis-cli del\n", run)
		} else if cerr := deleteKeys(context.WithoutCancel(ctx), c, run+":*"); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return err
	case replayMode:
		_, err := replayAll(ctx, c, stdout, log)
		return err
	default:
		p, err := newPipeline(c, log)
		if err != nil {
			return err
		}
		defer p.close()
		fmt.Fprintf(stdout, "consuming %s as %s/%s; dead letters in %s\n", c.stream, c.group, c.consumer, strings.Join(p.deadLetterKeys(), ", "))
		return p.consume(ctx, nil)
	}
}

// pipeline is what the consumer and the replayer share.
type pipeline struct {
	c      config
	rdb    *redis.Client
	store  *broker.Store // the Redis Streams dead-letter store
	claims *redisclaims.Store
	chk    *spatial.Checker
	off    *offload.Offloader
	proc   *broker.Processor
	log    *slog.Logger
	// enrich is the pipeline's call to a downstream service before the
	// event is emitted (the demo's tile server). Nil skips it.
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
	p.proc, err = broker.NewProcessor(broker.ProcessorOptions{
		Publisher:   p.store, // its 64 MiB limit is honoured by offloading geometry
		Builder:     builder,
		Destination: broker.DefaultDestination, // <stream>.retry.dlt / <stream>.poison.dlt
		Policy:      classify.Policy{MaxAttempts: c.maxAttempts, BaseDelay: c.retryDelay},
		Logger:      log,
	})
	if err != nil {
		return fail(err)
	}
	return p, nil
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
		return streamPublisher{p.rdb}.Publish(ctx, p.c.out, m)
	})
	return classify.WithStage(err, classify.StagePersist)
}

// consume reads the source stream through the consumer group until ctx
// ends: first entries left pending longer than claimIdle (XAUTOCLAIM),
// then new ones (XREADGROUP >). onOutcome, when set, sees every entry's
// outcome.
func (p *pipeline) consume(ctx context.Context, onOutcome func(*broker.Message, broker.Result, error)) error {
	c := p.c
	if err := p.rdb.XGroupCreateMkStream(ctx, c.stream, c.group, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("creating group %s on %s: %w", c.group, c.stream, err)
	}
	cursor := "0-0"
	for ctx.Err() == nil {
		claimed, next, err := p.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: c.stream, Group: c.group, Consumer: c.consumer, MinIdle: c.claimIdle, Start: cursor, Count: 16,
		}).Result()
		if err != nil {
			return fmt.Errorf("XAUTOCLAIM %s: %w", c.stream, err)
		}
		cursor = next
		for _, x := range claimed {
			// XAUTOCLAIM counted this delivery: the attempt continues
			// where the crashed consumer left off.
			attempt := 0
			if pe, err := p.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: c.stream, Group: c.group, Start: x.ID, End: x.ID, Count: 1}).Result(); err == nil && len(pe) == 1 {
				attempt = int(pe[0].RetryCount)
			}
			p.handleEntry(ctx, x, attempt, onOutcome)
		}
		if len(claimed) > 0 {
			continue
		}
		res, err := p.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: c.group, Consumer: c.consumer, Streams: []string{c.stream, ">"}, Count: 16, Block: c.block,
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("XREADGROUP %s: %w", c.stream, err)
		}
		for _, s := range res {
			for _, x := range s.Messages {
				p.handleEntry(ctx, x, 1, onOutcome)
			}
		}
	}
	return ctx.Err()
}

// handleEntry processes one entry and acknowledges it when the processor
// says so. An entry left unacknowledged stays pending and is taken over
// after claimIdle.
func (p *pipeline) handleEntry(ctx context.Context, x redis.XMessage, attempt int, onOutcome func(*broker.Message, broker.Result, error)) {
	m := messageFrom(p.c.stream, x, attempt)
	out, err := p.proc.Process(ctx, m, p.handle)
	if err == nil {
		if aerr := p.rdb.XAck(context.WithoutCancel(ctx), p.c.stream, p.c.group, x.ID).Err(); aerr != nil {
			err = fmt.Errorf("XACK %s %s (processed or dead-lettered; the redelivery is absorbed by its idempotency key): %w", p.c.stream, x.ID, aerr)
		}
	}
	if err != nil {
		p.log.WarnContext(ctx, "entry not acknowledged", slog.String("stream", p.c.stream), slog.String("id", x.ID), slog.Any("error", err))
	}
	if onOutcome != nil {
		onOutcome(m, out, err)
	}
}

// messageFrom converts a source entry for the processor.
func messageFrom(stream string, x redis.XMessage, attempt int) *broker.Message {
	m := &broker.Message{Headers: map[string]string{}, DeliveryAttempt: attempt}
	hasBody := false
	for k, v := range x.Values {
		s, _ := v.(string)
		switch {
		case k == "body":
			m.Body, hasBody = []byte(s), true
		case k == "key":
			m.Key = []byte(s)
		case strings.HasPrefix(k, "h:"):
			m.Headers[k[2:]] = s
		}
	}
	if !hasBody {
		m.Body, _ = json.Marshal(x.Values)
	}
	m.Source = &envelope.Source{System: "redis", Topic: stream, MessageID: x.ID, Key: m.Key, DeliveryCount: attempt}
	return m
}

// streamPublisher appends messages to streams in the layout the consumer
// reads: the replayer's target, and the consumer's output.
type streamPublisher struct{ rdb redis.UniversalClient }

// Publish appends m to stream (XADD) and returns once Redis has it.
func (s streamPublisher) Publish(ctx context.Context, stream string, m *broker.Message) error {
	values := []any{"body", m.Body}
	if m.Key != nil {
		values = append(values, "key", m.Key)
	}
	for k, v := range m.Headers {
		values = append(values, "h:"+k, v)
	}
	if err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: values}).Err(); err != nil {
		return fmt.Errorf("XADD %s: %w", stream, err)
	}
	return nil
}

// replayer returns a replayer over src (the dead-letter store, or a
// wrapper of it) that repairs invalid geometries and CRS mismatches and
// re-injects into the source stream the envelope names.
func (p *pipeline) replayer(src broker.DeadLetterSource) (*replay.Replayer, error) {
	repairers, err := p.chk.Repairers(nil) // invalid_geometry → MakeValid, crs_mismatch → reproject to 4326
	if err != nil {
		return nil, err
	}
	return replay.New(replay.Options{
		Source:    src,
		Target:    streamPublisher{p.rdb},
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
	for _, d := range destinations(c.stream) {
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
		fmt.Fprintf(out, "%s  %-15s %-14s %-17s %-13s %s\n", indent, it.RecordID, shorten(it.EventID, 14), it.Class, it.Outcome, why)
	}
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

// deleteKeys deletes the keys matching pattern (the demo's).
func deleteKeys(ctx context.Context, c config, pattern string) error {
	opts, err := redis.ParseURL(c.redisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, pattern, 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := rdb.Del(ctx, keys[:n]...).Err(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}
