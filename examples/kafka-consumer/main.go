// Command kafka-consumer is a Kafka consumer with geodlq's dead-letter path,
// ready to copy: it validates each GeoJSON event of a topic (GEOS's
// verdicts, in pure Go), retries transient failures in place, dead-letters what cannot be
// processed to "<topic>.retry.dlt" or "<topic>.poison.dlt" (offloading large
// geometries to a blob directory so envelopes fit Kafka's message limit),
// and commits a record's offset only after its envelope is acknowledged by
// every in-sync replica.
//
//	go run ./examples/kafka-consumer -brokers kafka:9092 -topic spatial.events -group spatial-app
//
// Everything it uses is public API, and this file builds on its own in
// your module. (Its walkthrough on an in-process Kafka — sample events,
// then the DLT topics read back — is a test: go test -v -run TestDemo
// ./examples/kafka-consumer.)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/kafka"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
)

type config struct {
	brokers    []string
	topic      string
	group      string
	offloadDir string
	verbose    bool
}

func main() {
	var c config
	brokers := flag.String("brokers", "localhost:9092", "comma-separated seed brokers")
	flag.StringVar(&c.topic, "topic", "spatial.events", "source topic")
	flag.StringVar(&c.group, "group", "spatial-app", "consumer group of the source topic")
	flag.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries")
	flag.BoolVar(&c.verbose, "v", false, "log every dead-lettered event")
	flag.Parse()
	c.brokers = strings.Split(*brokers, ",")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	level := slog.LevelError
	if c.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := consume(ctx, c, nil, log); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "kafka-consumer:", err)
		os.Exit(1)
	}
}

// pipeline is what a consumer needs: the dead-letter store, the processor
// and the handler.
type pipeline struct {
	store *broker.Store
	proc  *broker.Processor
	h     broker.Handler
	close func()
}

func newPipeline(c config, log *slog.Logger) (*pipeline, error) {
	// The dead-letter producer: acks=all, idempotent, batches sized for
	// Kafka's 1 MiB message limit.
	dlq, err := kgo.NewClient(append(kafka.ProducerOpts(nil), kgo.SeedBrokers(c.brokers...))...)
	if err != nil {
		return nil, err
	}
	// Topics: the store creates a missing dead-letter topic on its first
	// write, sized for the store's records (an existing one is left as
	// it is).
	store, err := kafka.New(dlq, &kafka.Options{StoreOptions: broker.StoreOptions{Logger: log}, Topics: &kafka.TopicOptions{}})
	if err != nil {
		dlq.Close()
		return nil, err
	}
	chk, err := spatial.NewChecker(nil) // expects EPSG:4326
	if err != nil {
		dlq.Close()
		return nil, err
	}
	if err := os.MkdirAll(c.offloadDir, 0o755); err != nil {
		dlq.Close()
		return nil, err
	}
	blobs, err := offload.NewDirStore(c.offloadDir)
	if err != nil {
		dlq.Close()
		return nil, err
	}
	off, err := offload.New(blobs, nil)
	if err != nil {
		dlq.Close()
		return nil, err
	}
	// The Processor asks the Store for its limit (Store.MaxMessageBytes),
	// and the builder offloads geometries until the envelope fits it.
	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off, ResolveEPSG: chk.ResolveEPSG})
	if err != nil {
		dlq.Close()
		return nil, err
	}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{
		Publisher:   store,
		Destination: kafka.Destination, // <topic>.retry.dlt / <topic>.poison.dlt
		Builder:     builder,
		Policy:      classify.Policy{MaxAttempts: 3, BaseDelay: 100 * time.Millisecond},
		Logger:      log,
	})
	if err != nil {
		dlq.Close()
		return nil, err
	}
	h := func(ctx context.Context, m *broker.Message) error {
		// Validate, then do the real work (reproject, join, persist…);
		// claim m.Header(broker.HeaderIdempotencyKey) first with
		// replay.Once if that work has side effects.
		_, err := chk.CheckEventContext(ctx, m.Body)
		return err
	}
	return &pipeline{store: store, proc: proc, h: h, close: func() {
		_ = store.Close()
		_ = chk.Close()
		dlq.Close()
	}}, nil
}

// consume runs the consumer until ctx ends. onOutcome, when set, sees
// every record's outcome.
func consume(ctx context.Context, c config, onOutcome func(*kgo.Record, broker.Result, error), log *slog.Logger) error {
	p, err := newPipeline(c, log)
	if err != nil {
		return err
	}
	defer p.close()
	// The source consumer: a group member with manual, synchronous
	// commits after each poll's outcomes, and no rebalance mid-poll.
	src, err := kgo.NewClient(append(kafka.ConsumerOpts(c.group, c.topic), kgo.SeedBrokers(c.brokers...))...)
	if err != nil {
		return err
	}
	defer src.Close()
	opts := &kafka.ConsumerOptions{ConsumerOptions: broker.ConsumerOptions{Logger: log}}
	if onOutcome != nil {
		opts.OnResult = func(d *broker.Delivery, res broker.Result, err error) { onOutcome(d.Handle.(*kgo.Record), res, err) }
	}
	cons, err := kafka.NewConsumer(src, p.proc, opts)
	if err != nil {
		return err
	}
	defer cons.Close()
	return cons.Run(ctx, p.h)
}
