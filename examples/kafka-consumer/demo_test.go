package main

// The demo: a Kafka of its own (franz-go's kfake, run by package
// kafkatest), sample events through the
// consumer, and the dead-letter topics read back as a replayer sees them.
// Run it with
//
//	go test -v -run TestDemo ./examples/kafka-consumer
//
// It lives in a test file so that main.go, which a service copies, does
// not link a test Kafka.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/kafka"
	"github.com/geodlq/geodlq/broker/kafka/kafkatest"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// demoOutput is where TestDemo prints its walkthrough: the terminal too
// with -v, and the test's log if it fails.
func demoOutput(t *testing.T) io.Writer {
	var buf bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() && !testing.Verbose() {
			t.Log(buf.String())
		}
	})
	if testing.Verbose() {
		return io.MultiWriter(&buf, os.Stdout)
	}
	return &buf
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
	cluster, err := kafkatest.NewCluster(ctx, &kafkatest.Options{Topics: []string{c.topic}, Partitions: 3})
	if err != nil {
		return err
	}
	defer cluster.Close()
	c.brokers = cluster.Addrs()

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
