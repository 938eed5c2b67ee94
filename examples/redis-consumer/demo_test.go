package main

// The demo: the sample events through the consumer group on the local
// Redis, the dead-letter streams, a dry run, a replay that crashes before
// acknowledging and the one after it, and the output stream that shows
// every event emitted once. Run it with
//
//	go test -v -run TestDemo ./examples/redis-consumer [-args -keep]
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
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
)

// demoEvents are what producers sent (see sampleEventList).
var demoEvents = sampleEventList()

var keep = flag.Bool("keep", false, "keep TestDemo's keys, to look at them")

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

// delivery is one entry the demo's consumer handled.
type delivery struct {
	msg *broker.Message
	out broker.Result
	err error
}

// demoResult is what the demo did, for its test.
type demoResult struct {
	// deliveries are every entry the consumer handled, in order: the
	// sample events first, then the re-injected ones.
	deliveries []delivery
	// dry, crashed and replayed are the reports of the dry run, the replay
	// that crashed before acknowledging, and the replay after it, by
	// destination.
	dry, crashed, replayed map[string]replay.Report
}

// demo sends the sample events to c.stream, consumes them, shows the
// dead-letter streams, replays twice — the first replayer crashing before
// it acknowledges — and shows from the output stream that every event was
// emitted exactly once.
func demo(ctx context.Context, c config, out io.Writer, log *slog.Logger) (*demoResult, error) {
	c.lease = time.Second // the crashed replayer's leases lapse quickly
	c.poll = 100 * time.Millisecond
	p, err := newPipeline(c, log)
	if err != nil {
		return nil, err
	}
	defer p.close()
	tiles := newTileServer()
	p.enrich = tiles.Enrich
	res := &demoResult{}

	fmt.Fprintf(out, "geodlq redis-consumer demo: source stream %s, output %s\n\n", c.stream, c.out)
	fmt.Fprintf(out, "1. Consuming %d sample events through group %s:\n", len(demoEvents), c.group)
	for _, e := range demoEvents {
		key := replay.NewKey("spatial.events", []byte(e)) // assigned once, at ingestion
		// XADD c.stream * v 1 body <e> h:idempotency-key <key>
		if err := p.src.Publish(ctx, c.stream, &broker.Message{Body: []byte(e), Headers: map[string]string{broker.HeaderIdempotencyKey: key}}); err != nil {
			return res, fmt.Errorf("producing to %s (run scripts/services.sh): %w", c.stream, err)
		}
	}
	var mu sync.Mutex
	changed := make(chan struct{}, 1)
	p.copts.OnResult = func(d *broker.Delivery, o broker.Result, err error) {
		mu.Lock()
		res.deliveries = append(res.deliveries, delivery{d.Message, o, err})
		mu.Unlock()
		select {
		case changed <- struct{}{}:
		default:
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
	// waitFor waits until the consumer has handled n entries, and prints
	// those it handled since the last call.
	printed := 0
	waitFor := func(n int) error {
		deadline := time.After(time.Minute)
		for {
			mu.Lock()
			got := len(res.deliveries)
			mu.Unlock()
			if got >= n {
				mu.Lock()
				defer mu.Unlock()
				for _, d := range res.deliveries[printed:] {
					printDelivery(out, d)
				}
				printed = len(res.deliveries)
				return nil
			}
			select {
			case <-changed:
			case <-finished:
				return fmt.Errorf("consumer stopped: %w", consumeErr)
			case <-deadline:
				return fmt.Errorf("demo: the consumer handled %d of %d entries", got, n)
			}
		}
	}
	if err := waitFor(len(demoEvents)); err != nil {
		return res, err
	}

	fmt.Fprintln(out, "\n2. The dead-letter streams (XRANGE, nothing leased):")
	if err := printDeadLetters(ctx, out, p); err != nil {
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
	// The first replayer is a process of its own (its own consumer in
	// the replay group) that dies after re-injecting.
	crashed, err := redisstream.New(p.rdb, &redisstream.Options{Prefix: c.prefix, Group: c.replayGroup, StoreOptions: broker.StoreOptions{LeaseTTL: c.lease}})
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
	time.Sleep(c.lease + 300*time.Millisecond) // its leases lapse; XAUTOCLAIM takes them over
	if res.replayed, err = replayDestinations(ctx, r, c, "   ", "replay #2", out); err != nil {
		return res, err
	}
	// Replay #2 re-injected what replay #1 had, byte for byte: within the
	// store's dedup window those XADDs returned the first entries.
	entries, err := p.rdb.XLen(ctx, c.stream).Result() // acknowledged entries stay (KeepAcked)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(out, "\n4. The consumer handles the %d re-injected entries (replay #2's XADDs were absorbed as duplicates of #1's):\n", int(entries)-len(demoEvents))
	if err := waitFor(int(entries)); err != nil {
		return res, err
	}
	if err := stopConsumer(); !errors.Is(err, context.Canceled) {
		return res, err
	}

	fmt.Fprintf(out, "\n5. The output stream %s:\n", c.out)
	return res, printOutput(ctx, out, p)
}

func printDelivery(out io.Writer, d delivery) {
	m, o := d.msg, d.out
	switch {
	case d.err != nil:
		fmt.Fprintf(out, "   %s: NOT acknowledged, will be taken over: %v\n", m.Source.MessageID, d.err)
	case o.Processed && m.Header(broker.HeaderReplayOf) != "":
		fmt.Fprintf(out, "   %s: re-injected from %s, processed\n", m.Source.MessageID, m.Header(broker.HeaderReplayOf))
	case o.Processed:
		fmt.Fprintf(out, "   %s: processed after %d attempt(s)\n", m.Source.MessageID, o.Attempts)
	default:
		fmt.Fprintf(out, "   %s: %s\n", m.Source.MessageID, describe(o))
	}
}

// printDeadLetters lists the dead-letter streams without leasing anything.
func printDeadLetters(ctx context.Context, out io.Writer, p *pipeline) error {
	fmt.Fprintf(out, "   %s\n", strings.Join(p.deadLetterKeys(), "\n   "))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   DEST\tENTRY\tEVENT\tCLASS\tSTAGE\tREASON\tEPSG\tATTEMPTS")
	for _, key := range p.deadLetterKeys() {
		entries, err := p.rdb.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			return err
		}
		for _, x := range entries {
			body, _ := x.Values["body"].(string)
			env, err := envelope.Decode([]byte(body))
			if err != nil {
				return err
			}
			reason := env.ErrorMessage
			if ge := env.GeometryError; ge != nil && ge.Reason != "" {
				reason = ge.Reason
			}
			fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", env.Route, x.ID, shorten(env.EventID, 16), env.FailureClass, env.FailedStage,
				shorten(reason, 40), broker.EPSGOf(env), env.Attempts)
		}
	}
	return tw.Flush()
}

// printOutput counts the output stream's entries per event and fails if
// any was emitted more than once.
func printOutput(ctx context.Context, out io.Writer, p *pipeline) error {
	entries, err := p.rdb.XRange(ctx, p.c.out, "-", "+").Result()
	if err != nil {
		return err
	}
	count := map[string]int{}
	repair := map[string]string{}
	for _, x := range entries {
		body, _ := x.Values["body"].(string)
		var ev struct {
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal([]byte(body), &ev)
		count[ev.EventID]++
		if r, ok := x.Values["h:"+broker.HeaderRepair].(string); ok {
			repair[ev.EventID] = r
		}
	}
	ids := make([]string, 0, len(count))
	for id := range count {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   EVENT\tEMITTED\tREPAIR")
	twice := 0
	for _, id := range ids {
		if count[id] > 1 {
			twice++
		}
		r := repair[id]
		if r == "" {
			r = "-"
		}
		fmt.Fprintf(tw, "   %s\t%d\t%s\n", id, count[id], r)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	left := 0
	for _, key := range p.deadLetterKeys() {
		n, err := p.rdb.XLen(ctx, key).Result()
		if err != nil {
			return err
		}
		left += int(n)
	}
	fmt.Fprintf(out, "\n   %d entries wait in the dead-letter streams for a human (no repair applies).\n", left)
	if twice > 0 {
		return fmt.Errorf("%d events were emitted more than once", twice)
	}
	fmt.Fprintln(out, "   Every event was emitted exactly once.")
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

// deleteKeys deletes the keys matching pattern (the demo's and the
// tests').
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
