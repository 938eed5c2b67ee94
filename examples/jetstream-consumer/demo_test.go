package main

// The demo: the sample events through the consumer on the local
// nats-server, the dead-letter destinations, a dry run, a replay that
// crashes before acknowledging and the one after it, and the bucket that
// shows every event stored once. Run it with
//
//	go test -v -run TestDemo ./examples/jetstream-consumer [-args -keep]
//
// It lives in a test file so that main.go stays what a service copies.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/jetstream"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
)

var keep = flag.Bool("keep", false, "keep the streams and buckets the tests made (TestDemo's, to look at them)")

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

// demoEvents are what producers sent (see sampleEventList).
var demoEvents = sampleEventList()

// demoResult is what the demo did, for its test.
type demoResult struct {
	// deadLettered are the envelopes in each destination after the
	// sample events were consumed.
	deadLettered map[string][]*envelope.Envelope
	// calls counts handler calls by idempotency key.
	calls map[string]int
	// dry, crashed and replayed are the reports of the dry run, the replay
	// that crashed before acknowledging, and the replay after it, by
	// destination.
	dry, crashed, replayed map[string]replay.Report
	// stored maps the event ids in the bucket to how many values each key
	// holds (one per write).
	stored map[string]int
}

// demo publishes the sample events to c.subject, consumes them, shows the
// dead-letter destinations, replays twice — the first replayer crashing
// before it acknowledges — and shows from the bucket that every event was
// stored exactly once.
func demo(ctx context.Context, c config, out io.Writer, log *slog.Logger) (*demoResult, error) {
	c.lease = time.Second // the crashed replayer's leases lapse quickly
	c.fetchWait = 500 * time.Millisecond
	p, err := newPipeline(ctx, c, log)
	if err != nil {
		return nil, err
	}
	defer p.close()
	tiles := newTileServer()
	p.enrich = tiles.Enrich
	res := &demoResult{deadLettered: map[string][]*envelope.Envelope{}, calls: map[string]int{}, stored: map[string]int{}}
	var mu sync.Mutex
	p.copts.OnResult = func(_ *broker.Delivery, r broker.Result, _ error) {
		mu.Lock()
		res.calls[r.IdempotencyKey] += r.Attempts // every delivery here is a first one: its attempts are its handler calls
		mu.Unlock()
	}
	cons, err := p.setup(ctx)
	if err != nil {
		return res, err
	}

	fmt.Fprintf(out, "geodlq jetstream-consumer demo: source %s (stream %s), dead letters in stream %s, bucket %s\n\n", c.subject, c.stream, c.dlqStream, c.kv)
	fmt.Fprintf(out, "1. Consuming %d sample events through %s (max_deliver %d):\n", len(demoEvents), c.durable, c.maxDeliver)
	for _, e := range demoEvents {
		msg := nats.NewMsg(c.subject)
		msg.Data = []byte(e)
		msg.Header.Set(broker.HeaderIdempotencyKey, replay.NewKey("spatial.events", msg.Data)) // assigned once, at ingestion
		if _, err := p.js.PublishMsg(ctx, msg); err != nil {
			return res, err
		}
	}
	cctx, stop := context.WithCancel(ctx)
	finished := make(chan struct{})
	var consumeErr error // set before finished is closed
	go func() {
		defer close(finished)
		consumeErr = p.consume(cctx)
	}()
	stopConsumer := func() error {
		stop()
		<-finished
		return consumeErr
	}
	defer stopConsumer() //nolint:errcheck // the error paths below report their own error
	// settled waits until the source consumer has every message acked.
	settled := func() error {
		deadline := time.Now().Add(time.Minute)
		for {
			info, err := cons.Info(ctx)
			if err != nil {
				return err
			}
			if info.NumPending == 0 && info.NumAckPending == 0 {
				fmt.Fprintf(out, "   %d messages delivered, all acknowledged (processed or dead-lettered)\n", info.Delivered.Stream)
				return nil
			}
			select {
			case <-finished:
				return fmt.Errorf("consumer stopped: %w", consumeErr)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("demo: %d messages pending, %d unacknowledged", info.NumPending, info.NumAckPending)
			}
		}
	}
	if err := settled(); err != nil {
		return res, err
	}

	fmt.Fprintln(out, "\n2. The dead-letter destinations:")
	if err := listDeadLetters(ctx, out, p, res); err != nil {
		return res, err
	}

	tiles.EndOutage()
	fmt.Fprintln(out, "\n3. The tile server is back. Replaying with repairs (GEOS MakeValid, PROJ reprojection):")
	r, err := p.replayer(p.store)
	if err != nil {
		return res, err
	}
	dry := c
	dry.dryRun = true
	if res.dry, err = replayDestinations(ctx, r, dry, "   ", "dry run", out); err != nil {
		return res, err
	}
	// The first replayer is a process of its own that dies after
	// re-injecting: the server redelivers its records after ack_wait.
	crashed, err := jetstream.New(ctx, p.js, &jetstream.Options{Stream: c.dlqStream, SubjectPrefix: c.dlqPrefix, Replayer: c.replayer, StoreOptions: broker.StoreOptions{LeaseTTL: c.lease}})
	if err != nil {
		return res, err
	}
	crashing, err := p.replayer(crashBeforeAck{DeadLetterSource: crashed})
	if err != nil {
		return res, err
	}
	res.crashed, err = replayDestinations(ctx, crashing, c, "   ", "replay #1 (crashes before acknowledging)", out)
	_ = crashed.Close()
	if err != nil {
		return res, err
	}
	time.Sleep(c.lease + 300*time.Millisecond) // its ack wait passes
	if res.replayed, err = replayDestinations(ctx, r, c, "   ", "replay #2", out); err != nil {
		return res, err
	}

	fmt.Fprintln(out, "\n4. The consumer handles the re-injected messages:")
	if err := settled(); err != nil {
		return res, err
	}
	if err := stopConsumer(); !errors.Is(err, context.Canceled) {
		return res, err
	}

	fmt.Fprintf(out, "\n5. The bucket %s (each replayed event was re-injected twice):\n", c.kv)
	return res, printBucket(ctx, out, p, res)
}

// listDeadLetters prints every record of the dead-letter destinations,
// then releases them all.
func listDeadLetters(ctx context.Context, out io.Writer, p *pipeline, res *demoResult) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   DESTINATION\tSEQ\tEVENT\tCLASS\tSTAGE\tREASON\tEPSG\tATTEMPTS")
	var held []*broker.Record
	defer func() {
		for _, r := range held {
			_ = p.store.Release(context.WithoutCancel(ctx), r)
		}
	}()
	for _, d := range destinations(p.c.subject) {
		for {
			recs, err := p.store.Fetch(ctx, d, broker.Filter{}, 100)
			if err != nil {
				return err
			}
			if len(recs) == 0 {
				break
			}
			held = append(held, recs...)
			for _, r := range recs {
				env, err := envelope.Decode(r.Message.Body)
				if err != nil {
					return err
				}
				res.deadLettered[d] = append(res.deadLettered[d], env)
				reason := env.ErrorMessage
				if ge := env.GeometryError; ge != nil && ge.Reason != "" {
					reason = ge.Reason
				}
				fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", d, r.ID, shorten(env.EventID, 16), env.FailureClass, env.FailedStage,
					shorten(reason, 40), broker.EPSGOf(env), env.Attempts)
			}
		}
	}
	return tw.Flush()
}

// printBucket lists the bucket's keys with the number of values each
// holds, and fails if any event was stored more than once.
func printBucket(ctx context.Context, out io.Writer, p *pipeline, res *demoResult) error {
	keys, err := p.kv.Keys(ctx)
	if err != nil && !errors.Is(err, natsjs.ErrNoKeysFound) {
		return err
	}
	for _, k := range keys {
		hist, err := p.kv.History(ctx, k)
		if err != nil {
			return err
		}
		var ev struct {
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal(hist[len(hist)-1].Value(), &ev)
		res.stored[ev.EventID] = len(hist)
	}
	ids := make([]string, 0, len(res.stored))
	for id := range res.stored {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   EVENT\tWRITES\tHANDLER CALLS")
	twice := 0
	calls := map[string]int{}
	for _, e := range demoEvents {
		var ev struct {
			EventID string `json:"event_id"`
		}
		if json.Unmarshal([]byte(e), &ev) == nil {
			calls[ev.EventID] = res.calls[replay.NewKey("spatial.events", []byte(e))]
		}
	}
	for _, id := range ids {
		if res.stored[id] > 1 {
			twice++
		}
		fmt.Fprintf(tw, "   %s\t%d\t%d\n", id, res.stored[id], calls[id])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if twice > 0 {
		return fmt.Errorf("%d events were stored more than once", twice)
	}
	fmt.Fprintln(out, "\n   Every event was stored exactly once.")
	return nil
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// deleteAll deletes the source stream, the dead-letter stream and the
// bucket (the demo's and the tests').
func deleteAll(ctx context.Context, c config) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(c.natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range []string{c.stream, c.dlqStream} {
		if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, natsjs.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("deleting stream %s: %w", s, err))
		}
	}
	if err := js.DeleteKeyValue(ctx, c.kv); err != nil && !errors.Is(err, natsjs.ErrBucketNotFound) {
		errs = append(errs, fmt.Errorf("deleting bucket %s: %w", c.kv, err))
	}
	return errors.Join(errs...)
}
