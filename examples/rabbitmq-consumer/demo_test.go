package main

// The demo: the sample events through the consumer on the local RabbitMQ,
// the dead-letter queues, a dry run, a replay that crashes before
// acknowledging and the one after it, and the output queue that shows
// every event emitted once. Run it with
//
//	go test -v -run TestDemo ./examples/rabbitmq-consumer [-args -keep]
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

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/rabbitmq"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
)

// demoEvents are what producers sent (see sampleEventList).
var demoEvents = sampleEventList()

var keep = flag.Bool("keep", false, "keep the queues and exchanges the tests made (TestDemo's, to look at them)")

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
	// emitted counts the output queue's messages by event id; repairs has
	// their dlq-repair headers.
	emitted map[string]int
	repairs map[string]string
}

// demo publishes the sample events to c.queue, consumes them, shows the
// dead-letter queues, replays twice — the first replayer crashing before
// it acknowledges — and shows from the output queue that every event was
// emitted exactly once.
func demo(ctx context.Context, c config, out io.Writer, log *slog.Logger) (*demoResult, error) {
	p, err := newPipeline(ctx, c, log)
	if err != nil {
		return nil, err
	}
	defer p.close()
	tiles := newTileServer()
	p.enrich = tiles.Enrich
	res := &demoResult{deadLettered: map[string][]*envelope.Envelope{}, calls: map[string]int{}, emitted: map[string]int{}, repairs: map[string]string{}}
	// Settled deliveries: handled successfully, or dead-lettered with the
	// broker's confirm. Either way the source delivery is acked next.
	var mu sync.Mutex
	settledCount := 0
	p.copts.OnResult = func(_ *broker.Delivery, r broker.Result, err error) {
		mu.Lock()
		defer mu.Unlock()
		res.calls[r.IdempotencyKey] += r.Attempts // every delivery here is a first one: its attempts are its handler calls
		if err == nil && r.Ack {
			settledCount++
		}
	}
	if err := p.setup(ctx); err != nil {
		return res, err
	}

	fmt.Fprintf(out, "geodlq rabbitmq-consumer demo: source queue %s, dead letters in %v, output queue %s\n\n", c.queue, p.deadLetterQueues(), c.out)
	fmt.Fprintf(out, "1. Consuming %d sample events (quorum queue, x-delivery-limit %d):\n", len(demoEvents), c.deliveryLimit)
	for _, e := range demoEvents {
		key := replay.NewKey("spatial.events", []byte(e)) // assigned once, at ingestion
		if err := p.pub.Publish(ctx, c.queue, &broker.Message{Body: []byte(e), Headers: map[string]string{broker.HeaderIdempotencyKey: key}}); err != nil {
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
	settled := func(n int) error {
		deadline := time.Now().Add(time.Minute)
		for {
			mu.Lock()
			got := settledCount
			mu.Unlock()
			if got >= n {
				fmt.Fprintf(out, "   %d deliveries settled (processed, or dead-lettered and confirmed)\n", got)
				return nil
			}
			select {
			case <-finished:
				return fmt.Errorf("consumer stopped: %w", consumeErr)
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("demo: %d of %d deliveries settled", got, n)
			}
		}
	}
	if err := settled(len(demoEvents)); err != nil {
		return res, err
	}

	fmt.Fprintln(out, "\n2. The dead-letter queues:")
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
	// re-injecting: its channels close and the broker requeues its
	// deliveries.
	crashed, err := rabbitmq.New(ctx, p.conn, &rabbitmq.Options{Exchange: c.exchange, QueuePrefix: c.queuePrefix, QueueArgs: map[string]any{"x-queue-type": "quorum"}})
	if err != nil {
		return res, err
	}
	crashing, err := p.replayer(crashBeforeAck{DeadLetterSource: crashed})
	if err != nil {
		_ = crashed.Close()
		return res, err
	}
	res.crashed, err = replayDestinations(ctx, crashing, c, "   ", "replay #1 (crashes before acknowledging)", out)
	_ = crashed.Close()
	if err != nil {
		return res, err
	}
	for d, rep := range res.crashed {
		if err := waitReady(ctx, p, rabbitmq.Queue(p.store, d), rep.Examined); err != nil {
			return res, err
		}
	}
	if res.replayed, err = replayDestinations(ctx, r, c, "   ", "replay #2", out); err != nil {
		return res, err
	}
	reinjected := 0
	for _, reps := range []map[string]replay.Report{res.crashed, res.replayed} {
		for _, rep := range reps {
			reinjected += rep.Counts[replay.OutcomeAckFailed] + rep.Acked()
		}
	}

	fmt.Fprintf(out, "\n4. The consumer handles the %d re-injected messages:\n", reinjected)
	if err := settled(len(demoEvents) + reinjected); err != nil {
		return res, err
	}
	if err := stopConsumer(); !errors.Is(err, context.Canceled) {
		return res, err
	}

	fmt.Fprintf(out, "\n5. The output queue %s (each replayed event was re-injected twice):\n", c.out)
	return res, drainOutput(ctx, out, p, res)
}

// waitReady waits until queue holds n ready messages.
func waitReady(ctx context.Context, p *pipeline, queue string, n int) error {
	ch, err := p.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return err
		}
		if q.Messages >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: %d of %d messages back in %s", q.Messages, n, queue)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// listDeadLetters prints every message of the dead-letter queues, then
// releases them all.
func listDeadLetters(ctx context.Context, out io.Writer, p *pipeline, res *demoResult) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   QUEUE\tEVENT\tCLASS\tSTAGE\tREASON\tEPSG\tATTEMPTS")
	var held []*broker.Record
	defer func() {
		for _, r := range held {
			_ = p.store.Release(context.WithoutCancel(ctx), r)
		}
	}()
	for _, d := range destinations(p.c.queue) {
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
				fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%s\t%d\t%d\n", rabbitmq.Queue(p.store, d), shorten(env.EventID, 16), env.FailureClass, env.FailedStage,
					shorten(reason, 40), broker.EPSGOf(env), env.Attempts)
			}
		}
	}
	return tw.Flush()
}

// drainOutput reads the output queue as a downstream service would,
// counts its messages by event, and fails if any event was emitted more
// than once.
func drainOutput(ctx context.Context, out io.Writer, p *pipeline, res *demoResult) error {
	ch, err := p.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	for ctx.Err() == nil {
		d, ok, err := ch.Get(p.c.out, false)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		m := rabbitmq.MessageOf(d, p.c.out)
		var ev struct {
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal(m.Body, &ev)
		res.emitted[ev.EventID]++
		if r := m.Header(broker.HeaderRepair); r != "" {
			res.repairs[ev.EventID] = r
		}
		if err := d.Ack(false); err != nil {
			return err
		}
	}
	ids := make([]string, 0, len(res.emitted))
	for id := range res.emitted {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   EVENT\tEMITTED\tREPAIR")
	twice := 0
	for _, id := range ids {
		if res.emitted[id] > 1 {
			twice++
		}
		r := res.repairs[id]
		if r == "" {
			r = "-"
		}
		fmt.Fprintf(tw, "   %s\t%d\t%s\n", id, res.emitted[id], r)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if twice > 0 {
		return fmt.Errorf("%d events were emitted more than once", twice)
	}
	fmt.Fprintln(out, "\n   Every event was emitted exactly once.")
	return nil
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// deleteAll deletes the queues and exchanges the pipeline declared (the
// demo's and the tests').
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
