package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/rabbitmq"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
)

// testConfig names queues and exchanges no other run uses, and deletes
// them when the test ends.
func testConfig(t *testing.T) config {
	var b [6]byte
	_, _ = rand.Read(b[:])
	run := "geodlqtest." + hex.EncodeToString(b[:])
	c := config{
		amqpURL: testAMQP(t), queue: run + ".spatial.events", deliveryLimit: 20, prefetch: 1, out: run + ".spatial.parcels",
		exchange: run + ".dlq", lease: time.Minute, claims: "memory", offloadDir: t.TempDir(), maxAttempts: 4, retryDelay: 5 * time.Millisecond,
	}
	t.Cleanup(func() {
		if *keep {
			t.Logf("kept queues and exchanges %s.* (-keep); delete them with rabbitmqctl delete_queue and delete_exchange", run)
			return
		}
		require.NoError(t, deleteAll(c))
	})
	return c
}

// ready returns how many messages wait in queue, or -1 when it does not
// exist.
func ready(t *testing.T, conn *amqp.Connection, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return -1 // the 404 closed the channel
	}
	return q.Messages
}

// requireReady waits until queue holds n ready messages: a quorum queue's
// counts follow acks and requeues with a short delay.
func requireReady(t *testing.T, conn *amqp.Connection, queue string, n int, msg ...any) {
	t.Helper()
	require.Eventually(t, func() bool { return ready(t, conn, queue) == n }, 10*time.Second, 10*time.Millisecond, msg...)
}

func dial(t *testing.T, c config) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(c.amqpURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestDemo runs the demo on the real RabbitMQ: the sample events through
// the consumer, the dead-letter queues, a replay that crashes before
// acknowledging and the one after it; then checks the queues.
func TestDemo(t *testing.T) {
	ctx := context.Background()
	c := testConfig(t)
	conn := dial(t, c)
	var out bytes.Buffer
	res, err := demo(ctx, c, io.MultiWriter(&out, demoOutput(t)), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	retry, poison := destinations(c.queue)[0], destinations(c.queue)[1]
	key := func(i int) string { return replay.NewKey("spatial.events", []byte(demoEvents[i])) }

	// After the first pass: three events in poison, the outage in retry.
	require.Len(t, res.deadLettered[poison], 3)
	bowtie := res.deadLettered[poison][0]
	require.Equal(t, "evt-bowtie", bowtie.EventID)
	require.Equal(t, classify.ClassInvalidGeometry, bowtie.FailureClass)
	require.Equal(t, classify.StageTopologyValidation, bowtie.FailedStage)
	require.Equal(t, "Self-intersection[0.5 0.5]", bowtie.GeometryError.Reason)
	require.Equal(t, key(1), bowtie.IdempotencyKey, "the producer's key, verbatim")
	require.Equal(t, "rabbitmq", bowtie.Source.System)
	require.Equal(t, c.queue, bowtie.Source.Topic)
	require.Equal(t, 1, bowtie.Attempts)
	require.Equal(t, classify.ClassCRSMismatch, res.deadLettered[poison][1].FailureClass)
	require.Equal(t, classify.ClassSchemaViolation, res.deadLettered[poison][2].FailureClass)
	require.Len(t, res.deadLettered[retry], 1)
	require.Equal(t, "evt-outage", res.deadLettered[retry][0].EventID)
	require.Equal(t, classify.ClassTransient, res.deadLettered[retry][0].FailureClass)
	require.Equal(t, 4, res.deadLettered[retry][0].Attempts)
	require.Equal(t, 3, res.calls[key(4)], "the flaky event was retried in place until it passed")

	// The replays.
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeWouldRepair: 1, replay.OutcomeWouldFail: 1, replay.OutcomeSkipped: 1}, res.dry[poison].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeAckFailed: 1, replay.OutcomeRepairFailed: 1, replay.OutcomeSkipped: 1}, res.crashed[poison].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeAckFailed: 1}, res.crashed[retry].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeRepaired: 1, replay.OutcomeRepairFailed: 1, replay.OutcomeSkipped: 1}, res.replayed[poison].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeReplayed: 1}, res.replayed[retry].Counts)

	// The bowtie reached the handler three times (as sent, then twice
	// re-injected and repaired) and was emitted once, repaired; so was
	// every other event that could be.
	require.Equal(t, 3, res.calls[key(1)])
	require.Equal(t, map[string]int{"evt-parcel": 1, "evt-flaky": 1, "evt-bowtie": 1, "evt-outage": 1}, res.emitted)
	require.True(t, strings.HasPrefix(res.repairs["evt-bowtie"], "make_valid:structure"), res.repairs["evt-bowtie"])

	// Nothing is left on the source or parked; what no repair applies to
	// is still in the poison queue.
	requireReady(t, conn, c.queue, 0)
	requireReady(t, conn, c.parking(), 0)
	requireReady(t, conn, c.out, 0, "the demo drained it")
	requireReady(t, conn, retry, 0)
	requireReady(t, conn, poison, 2)
	require.Contains(t, out.String(), "Every event was emitted exactly once.")

	// The cleanup deletes the queues.
	if *keep {
		return
	}
	require.NoError(t, deleteAll(c))
	for _, q := range []string{c.queue, c.parking(), c.out, retry, poison} {
		require.Equal(t, -1, ready(t, conn, q), q)
	}
}

// TestCommandLine drives the command as an operator would, with claims in
// PostgreSQL: the consumer dead-letters a bowtie, the replay subcommand
// repairs and re-injects it, and the consumer emits it.
func TestCommandLine(t *testing.T) {
	ctx := context.Background()
	c := testConfig(t)
	conn := dial(t, c)
	pool := testPool(t, 2)
	schema := testSchema(t)
	u, err := url.Parse(testPostgres(t))
	require.NoError(t, err)
	q := u.Query()
	q.Set("geodlq_schema", schema)
	u.RawQuery = q.Encode()
	flags := []string{"-amqp", c.amqpURL, "-queue", c.queue, "-out", c.out, "-exchange", c.exchange,
		"-claims", u.String(), "-offload-dir", c.offloadDir, "-retry-delay", "5ms",
		"-concurrency", "1"} // one event at a time: the walkthrough checks outputs and dead letters in order, behind sentinels
	poison := destinations(c.queue)[1]

	pubCh, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, pubCh.Confirm(false))
	publish := func(body, key string) {
		t.Helper()
		var h amqp.Table
		if key != "" {
			h = amqp.Table{broker.HeaderIdempotencyKey: key}
		}
		dc, err := pubCh.PublishWithDeferredConfirmWithContext(ctx, "", c.queue, true, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Headers: h, Body: []byte(body)})
		require.NoError(t, err)
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	// consume runs the consumer until n messages are in the output queue.
	// The last message published is a valid sentinel: with prefetch 1 it
	// is delivered only after everything before it was acknowledged.
	consume := func(sentinel string, n int) string {
		t.Helper()
		cctx, cancel := context.WithCancel(ctx)
		var stdout, stderr bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- cli(cctx, flags, &stdout, &stderr) }()
		publish(`{"event_id":"`+sentinel+`","geometry":{"type":"Point","coordinates":[0,0]}}`, sentinel)
		require.Eventually(t, func() bool { return ready(t, conn, c.out) == n }, 60*time.Second, 20*time.Millisecond)
		cancel()
		require.ErrorIs(t, <-done, context.Canceled, stderr.String())
		return stdout.String()
	}

	// The consumer declares the topology; publish once it exists.
	p, err := newPipeline(ctx, c, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, p.setup(ctx))
	p.close()
	publish(`{"event_id":"evt-bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`, "") // a key is derived
	publish(`{"event_id":"evt-ok","geometry":{"type":"Point","coordinates":[12.49,41.89]}}`, "key-ok")
	s := consume("sentinel-1", 2)
	require.Contains(t, s, "consuming "+c.queue+"; dead letters in "+c.queue+".retry.dlt, "+c.queue+".poison.dlt")
	requireReady(t, conn, poison, 1)
	requireReady(t, conn, c.queue, 0)
	var done bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT done_at IS NOT NULL FROM `+schema+`.idempotency_claims WHERE key = $1`, []byte("key-ok")).Scan(&done))
	require.True(t, done, "the claim is in PostgreSQL")

	// What the consumer dead-lettered, read without acknowledging.
	store, err := rabbitmq.New(ctx, conn, &rabbitmq.Options{Exchange: c.exchange, QueueArgs: amqp.Table{"x-queue-type": "quorum"}})
	require.NoError(t, err)
	recs, err := store.Fetch(ctx, poison, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	env, err := envelope.Decode(recs[0].Message.Body)
	require.NoError(t, err)
	require.Equal(t, "evt-bowtie", env.EventID)
	require.Equal(t, "Self-intersection[0.5 0.5]", env.GeometryError.Reason)
	require.True(t, replay.ValidKey(env.IdempotencyKey), env.IdempotencyKey)
	require.NoError(t, store.Release(ctx, recs[0]))
	require.NoError(t, store.Close())

	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		require.NoError(t, cli(ctx, append(append([]string(nil), flags...), args...), &stdout, &stderr), stderr.String())
		return stdout.String()
	}
	require.Contains(t, run("replay", "-class", "transient"), "replay of "+poison+": nothing to replay")
	require.Contains(t, run("replay", "-dry-run"), "dry run of "+poison+": would_repair=1")
	requireReady(t, conn, poison, 1, "a dry run changes nothing")
	require.Contains(t, run("replay"), "replay of "+poison+": repaired=1")
	requireReady(t, conn, poison, 0)

	consume("sentinel-2", 4)
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	var events []string
	for {
		d, ok, err := ch.Get(c.out, true)
		require.NoError(t, err)
		if !ok {
			break
		}
		m := rabbitmq.MessageOf(d, c.out)
		events = append(events, m.Header(broker.HeaderIdempotencyKey))
		if m.Header(broker.HeaderRepaired) == "true" {
			require.Equal(t, env.IdempotencyKey, m.Header(broker.HeaderIdempotencyKey), "re-injected with the derived key, verbatim")
			require.Contains(t, string(m.Body), `"MultiPolygon"`)
		}
	}
	require.Equal(t, []string{"key-ok", "sentinel-1", env.IdempotencyKey, "sentinel-2"}, events)

	var stderr bytes.Buffer
	require.Error(t, cli(ctx, append(flags, "replay", "-class", "nonsense"), &bytes.Buffer{}, &stderr))
	require.Error(t, cli(ctx, append(flags, "extra"), &bytes.Buffer{}, &stderr))
}
