// Command kafka-consumer is a Kafka consumer with geodlq's dead-letter path,
// ready to copy: it validates each GeoJSON event of a topic with GEOS and
// PROJ, retries transient failures in place, dead-letters what cannot be
// processed to "<topic>.retry.dlt" or "<topic>.poison.dlt" (offloading large
// geometries to a blob directory so envelopes fit Kafka's message limit),
// and commits a record's offset only after its envelope is acknowledged by
// every in-sync replica.
//
//	go run ./examples/kafka-consumer -brokers kafka:9092 -topic spatial.events -group spatial-app
//	go run ./examples/kafka-consumer -demo    # an in-process Kafka, sample events, then the DLT topics
//
// Everything it uses is public API.
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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
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
	demo       bool
	verbose    bool
}

func main() {
	var c config
	brokers := flag.String("brokers", "localhost:9092", "comma-separated seed brokers")
	flag.StringVar(&c.topic, "topic", "spatial.events", "source topic")
	flag.StringVar(&c.group, "group", "spatial-app", "consumer group of the source topic")
	flag.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries")
	flag.BoolVar(&c.demo, "demo", false, "run against an in-process Kafka (kfake) with sample events, print the dead-letter topics, and exit")
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
	var err error
	if c.demo {
		err = demo(ctx, c, os.Stdout, log)
	} else {
		err = consume(ctx, c, nil, log)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
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
	proc, err := broker.NewProcessor(broker.ProcessorOptions{
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

// demoEvents are what producers sent: two valid parcels, a bowtie, an
// EPSG:3857 payload in an EPSG:4326 pipeline, a body that is not JSON, and
// a 40,000-vertex polygon with a self-intersection, whose geometry is
// offloaded.
func demoEvents() [][]byte {
	var big strings.Builder
	big.WriteString(`{"event_id":"evt-coastline","geometry":{"type":"Polygon","coordinates":[[[0,0]`)
	for i := 1; i < 40_000; i++ {
		fmt.Fprintf(&big, ",[%d.%06d,%d]", i%2, i, i%2)
	}
	big.WriteString(`,[0,0]]]}}`)
	return [][]byte{
		[]byte(`{"event_id":"evt-1","geometry":{"type":"Point","coordinates":[12.49,41.89]}}`),
		[]byte(`{"event_id":"evt-bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`),
		[]byte(`{"event_id":"evt-3857","crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[1113194.9,6446275.8]}}`),
		[]byte(`not json at all`),
		[]byte(big.String()),
		[]byte(`{"event_id":"evt-2","geometry":{"type":"Point","coordinates":[2.35,48.85]}}`),
	}
}

// demo starts an in-process Kafka, produces the sample events, consumes
// them, and prints the dead-letter topics as a replay tool sees them.
func demo(ctx context.Context, c config, out io.Writer, log *slog.Logger) error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, c.topic))
	if err != nil {
		return err
	}
	defer cluster.Close()
	c.brokers = cluster.ListenAddrs()

	prod, err := kgo.NewClient(append(kafka.ProducerOpts(nil), kgo.SeedBrokers(c.brokers...))...)
	if err != nil {
		return err
	}
	defer prod.Close()
	events := demoEvents()
	for i, e := range events {
		r := &kgo.Record{Topic: c.topic, Key: fmt.Appendf(nil, "parcel-%d", i), Value: e}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			return err
		}
	}

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var done atomic.Int32
	var mu sync.Mutex // OnOutcome runs on each partition's goroutine
	err = consume(cctx, c, func(r *kgo.Record, o broker.Result, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			fmt.Fprintf(out, "offset %d: NOT acknowledged, will be read again: %v\n", r.Offset, err)
		case o.Processed:
			fmt.Fprintf(out, "partition %d offset %d: processed\n", r.Partition, r.Offset)
		default:
			fmt.Fprintf(out, "partition %d offset %d: %s at %s -> %s\n", r.Partition, r.Offset, o.Envelope.FailureClass, o.Envelope.FailedStage, o.Destination)
		}
		if int(done.Add(1)) == len(events) {
			cancel()
		}
	}, log)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if int(done.Load()) != len(events) {
		return fmt.Errorf("demo: %d of %d events processed", done.Load(), len(events))
	}

	// Read the dead-letter topics back, as the replayer does, and leave
	// everything there (Release).
	p, err := newPipeline(c, log)
	if err != nil {
		return err
	}
	defer p.close()
	for _, d := range []classify.Route{classify.RouteRetry, classify.RoutePoison} {
		topic := kafka.Destination(&broker.Message{Source: &envelope.Source{Topic: c.topic}}, d)
		recs, err := p.store.Fetch(ctx, topic, broker.Filter{}, 100)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\n%s: %d records\n", topic, len(recs))
		for _, r := range recs {
			env, err := envelope.Decode(r.Message.Body)
			if err != nil {
				return err
			}
			m := r.Message
			fmt.Fprintf(out, "  %s key=%s from %s/%s@%s %s/%s %q",
				r.ID, m.Key, m.Header(kafka.HeaderOriginalTopic), m.Header(kafka.HeaderOriginalPartition),
				m.Header(kafka.HeaderOriginalOffset), env.FailureClass, env.FailedStage, shorten(env.ErrorMessage))
			if env.Geometry.OffloadURI != "" {
				fmt.Fprintf(out, " geometry offloaded (%d bytes)", env.Geometry.ByteSize)
			}
			fmt.Fprintf(out, " envelope %d bytes\n", len(m.Body))
			if err := p.store.Release(ctx, r); err != nil {
				return err
			}
		}
	}
	return nil
}

func shorten(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}
