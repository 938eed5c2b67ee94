package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/jetstream"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/redisclaims"
)

// testConfig names streams, subjects and a bucket no other run uses, and
// deletes them when the test ends.
func testConfig(t *testing.T) config {
	var b [6]byte
	_, _ = rand.Read(b[:])
	run := hex.EncodeToString(b[:])
	c := config{
		natsURL: testNATS(t), stream: "SRC_" + run, subject: "geodlqtest." + run + ".spatial.events", durable: "spatial-app",
		maxDeliver: 5, ackWait: 30 * time.Second, fetchWait: 200 * time.Millisecond, kv: "PARCELS_" + run,
		dlqStream: "DLQ_" + run, dlqPrefix: "geodlqtest." + run + ".dlq", replayer: "geodlq-replay", lease: 30 * time.Second,
		claims: "memory", offloadDir: t.TempDir(), maxAttempts: 4, retryDelay: 5 * time.Millisecond,
	}
	t.Cleanup(func() {
		if *keep {
			t.Logf("kept streams %s and %s and bucket %s (-keep); remove them with nats stream rm and nats kv rm", c.stream, c.dlqStream, c.kv)
			return
		}
		require.NoError(t, deleteAll(context.Background(), c))
	})
	return c
}

func connect(t *testing.T, c config) natsjs.JetStream {
	t.Helper()
	nc, err := nats.Connect(c.natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	return js
}

// TestDemo runs the demo on the real nats-server: the sample events
// through the durable consumer, the dead-letter destinations, a replay
// that crashes before acknowledging and the one after it; then checks the
// streams and the bucket.
func TestDemo(t *testing.T) {
	ctx := context.Background()
	c := testConfig(t)
	js := connect(t, c)
	var out bytes.Buffer
	res, err := demo(ctx, c, io.MultiWriter(&out, demoOutput(t)), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	retry, poison := destinations(c.subject)[0], destinations(c.subject)[1]
	key := func(i int) string { return replay.NewKey("spatial.events", []byte(demoEvents[i])) }

	// After the first pass: three events in poison, the outage in retry.
	require.Len(t, res.deadLettered[poison], 3)
	bowtie := res.deadLettered[poison][0]
	require.Equal(t, "evt-bowtie", bowtie.EventID)
	require.Equal(t, classify.ClassInvalidGeometry, bowtie.FailureClass)
	require.Equal(t, classify.StageTopologyValidation, bowtie.FailedStage)
	require.Equal(t, "Self-intersection[0.5 0.5]", bowtie.GeometryError.Reason)
	require.Equal(t, key(1), bowtie.IdempotencyKey, "the producer's key, verbatim")
	require.Equal(t, "nats", bowtie.Source.System)
	require.Equal(t, c.subject, bowtie.Source.Topic)
	require.EqualValues(t, 2, *bowtie.Source.Offset, "the source stream sequence")
	require.Equal(t, 1, bowtie.Source.DeliveryCount)
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
	// re-injected and repaired) and was stored once, repaired; so was
	// every other event that could be.
	require.Equal(t, 3, res.calls[key(1)])
	require.Equal(t, map[string]int{"evt-parcel": 1, "evt-flaky": 1, "evt-bowtie": 1, "evt-outage": 1}, res.stored)
	kv, err := js.KeyValue(ctx, c.kv)
	require.NoError(t, err)
	e, err := kv.Get(ctx, parcelKey(key(1)))
	require.NoError(t, err)
	require.Contains(t, string(e.Value()), `"MultiPolygon"`)

	// Nothing left unacknowledged on the source; what no repair applies to
	// is still in the dead-letter stream.
	src, err := js.Consumer(ctx, c.stream, c.durable)
	require.NoError(t, err)
	info, err := src.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.NumAckPending)
	require.Zero(t, info.NumPending)
	require.EqualValues(t, 10, info.Delivered.Stream, "6 sample events and 4 re-injections")
	store, err := jetstream.New(ctx, js, &jetstream.Options{Stream: c.dlqStream, SubjectPrefix: c.dlqPrefix, Replayer: c.replayer, StoreOptions: broker.StoreOptions{LeaseTTL: time.Second}})
	require.NoError(t, err)
	var left []string
	for _, d := range []string{retry, poison} {
		recs, err := store.Fetch(ctx, d, broker.Filter{}, 10)
		require.NoError(t, err)
		for _, r := range recs {
			env, err := envelope.Decode(r.Message.Body)
			require.NoError(t, err)
			left = append(left, env.FailureClass.String())
			require.NoError(t, store.Release(ctx, r))
		}
	}
	require.ElementsMatch(t, []string{"crs_mismatch", "schema_violation"}, left)
	require.Contains(t, out.String(), "Every event was stored exactly once.")

	// The cleanup deletes the streams and the bucket.
	if *keep {
		return
	}
	require.NoError(t, deleteAll(ctx, c))
	for _, s := range []string{c.stream, c.dlqStream} {
		_, err := js.Stream(ctx, s)
		require.ErrorIs(t, err, natsjs.ErrStreamNotFound)
	}
	_, err = js.KeyValue(ctx, c.kv)
	require.ErrorIs(t, err, natsjs.ErrBucketNotFound)
}

// TestCommandLine drives the command as an operator would, with claims in
// Redis: the consumer dead-letters a bowtie, the replay subcommand repairs
// and re-injects it, and the consumer stores it.
func TestCommandLine(t *testing.T) {
	ctx := context.Background()
	c := testConfig(t)
	js := connect(t, c)
	rdb := testRedisClient(t)
	claimsPrefix := testRedisPrefix(t, "jetstream-consumer")
	claimsURL := "redis://" + testRedis(t) + "/0?geodlq_prefix=" + url.QueryEscape(claimsPrefix)
	flags := []string{"-nats", c.natsURL, "-stream", c.stream, "-subject", c.subject, "-kv", c.kv, "-dlq-stream", c.dlqStream,
		"-dlq-prefix", c.dlqPrefix, "-claims", claimsURL, "-offload-dir", c.offloadDir, "-fetch-wait", "200ms", "-retry-delay", "5ms",
		"-concurrency", "1"} // one event at a time: the walkthrough checks outputs and dead letters in order, behind sentinels

	dlqMsgs := func() uint64 {
		s, err := js.Stream(ctx, c.dlqStream)
		if err != nil {
			return 1 << 62
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 1 << 62
		}
		return info.State.Msgs
	}
	stored := func() int {
		kv, err := js.KeyValue(ctx, c.kv)
		if err != nil {
			return -1
		}
		keys, err := kv.Keys(ctx)
		if errors.Is(err, natsjs.ErrNoKeysFound) {
			return 0
		}
		if err != nil {
			return -1
		}
		return len(keys)
	}
	settled := func() bool {
		cons, err := js.Consumer(ctx, c.stream, "spatial-app")
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}
	consume := func(publish func(), until func() bool) string {
		t.Helper()
		cctx, cancel := context.WithCancel(ctx)
		var stdout, stderr bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- cli(cctx, flags, &stdout, &stderr) }()
		require.Eventually(t, func() bool { _, err := js.Stream(ctx, c.stream); return err == nil && settled() }, 60*time.Second, 20*time.Millisecond)
		publish()
		require.Eventually(t, func() bool { return until() && settled() }, 60*time.Second, 20*time.Millisecond)
		cancel()
		require.ErrorIs(t, <-done, context.Canceled, stderr.String())
		return stdout.String()
	}

	bowtie := []byte(`{"event_id":"evt-bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`)
	s := consume(func() {
		_, err := js.Publish(ctx, c.subject, bowtie) // no idempotency key: one is derived
		require.NoError(t, err)
		m := nats.NewMsg(c.subject)
		m.Data = []byte(`{"event_id":"evt-ok","geometry":{"type":"Point","coordinates":[12.49,41.89]}}`)
		m.Header.Set(broker.HeaderIdempotencyKey, "key-ok")
		_, err = js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}, func() bool { return dlqMsgs() == 1 && stored() == 1 })
	require.Contains(t, s, "consuming "+c.subject+" ("+c.stream+") as spatial-app")

	claims, err := redisclaims.New(rdb, &redisclaims.Options{Prefix: claimsPrefix})
	require.NoError(t, err)
	state, _ := claims.Keys("key-ok")
	require.Equal(t, "done", rdb.Get(ctx, state).Val(), "the claim is in Redis")

	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		require.NoError(t, cli(ctx, append(append([]string(nil), flags...), args...), &stdout, &stderr), stderr.String())
		return stdout.String()
	}
	poison := destinations(c.subject)[1]
	require.Contains(t, run("replay", "-class", "transient"), "replay of "+poison+": nothing to replay")
	require.Contains(t, run("replay", "-dry-run"), "dry run of "+poison+": would_repair=1")
	require.EqualValues(t, 1, dlqMsgs(), "a dry run changes nothing")
	require.Contains(t, run("replay"), "replay of "+poison+": repaired=1")
	require.Zero(t, dlqMsgs(), "acknowledged records leave the work-queue stream")

	consume(func() {}, func() bool { return stored() == 2 })
	kv, err := js.KeyValue(ctx, c.kv)
	require.NoError(t, err)
	keys, err := kv.Keys(ctx)
	require.NoError(t, err)
	var repaired int
	for _, k := range keys {
		hist, err := kv.History(ctx, k)
		require.NoError(t, err)
		require.Len(t, hist, 1, "stored once")
		if bytes.Contains(hist[0].Value(), []byte("evt-bowtie")) {
			repaired++
			require.Contains(t, string(hist[0].Value()), `"MultiPolygon"`)
		}
	}
	require.Equal(t, 1, repaired)

	var stderr bytes.Buffer
	require.Error(t, cli(ctx, append(flags, "replay", "-class", "nonsense"), &bytes.Buffer{}, &stderr))
	require.Error(t, cli(ctx, append(flags, "extra"), &bytes.Buffer{}, &stderr))
	require.ErrorContains(t, cli(ctx, append(flags, "-claims", "mysql://db"), &bytes.Buffer{}, &stderr), "want memory, redis://")
}
