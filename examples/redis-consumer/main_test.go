package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/replay/redisclaims"
)

func testConfig(t *testing.T, prefix string) config {
	return config{
		redisURL: "redis://" + testRedis(t) + "/0", stream: prefix + ":spatial.events", group: "spatial-app", consumer: "test",
		out: prefix + ":spatial.parcels", prefix: prefix + ":dlq", replayGroup: "geodlq-replay", claimsPrefix: prefix + ":claim",
		claimIdle: time.Minute, poll: 50 * time.Millisecond, lease: 30 * time.Second, offloadDir: t.TempDir(),
		maxAttempts: 4, retryDelay: 5 * time.Millisecond,
	}
}

// entries decodes a stream's entries: body, key and h:* fields.
func entries(t *testing.T, rdb *redis.Client, key string) []*broker.Message {
	t.Helper()
	xs, err := rdb.XRange(context.Background(), key, "-", "+").Result()
	require.NoError(t, err)
	var ms []*broker.Message
	for _, x := range xs {
		m := &broker.Message{Headers: map[string]string{}}
		for k, v := range x.Values {
			s, _ := v.(string)
			switch {
			case k == "body":
				m.Body = []byte(s)
			case k == "key":
				m.Key = []byte(s)
			case strings.HasPrefix(k, "h:"):
				m.Headers[k[2:]] = s
			}
		}
		ms = append(ms, m)
	}
	return ms
}

func eventID(body []byte) string {
	var ev struct {
		EventID string `json:"event_id"`
	}
	if json.Unmarshal(body, &ev) != nil {
		return "(not json)"
	}
	return ev.EventID
}

// TestDemo runs the demo on the real Redis: the sample events through the
// consumer group, the dead-letter streams, a replay that crashes before
// acknowledging and the one after it; then checks the streams and claims.
func TestDemo(t *testing.T) {
	ctx := context.Background()
	rdb := testRedisClient(t)
	prefix := testRedisPrefix(t, "redis-consumer") // deleted when the test ends
	if *keep {
		prefix = "geodlq-demo:" + strings.ToLower(rand.Text()[:8])
	}
	c := testConfig(t, prefix)
	var out bytes.Buffer
	res, err := demo(ctx, c, io.MultiWriter(&out, demoOutput(t)), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	poison, retry := destinations(c.stream)[1], destinations(c.stream)[0]

	// The first six deliveries are the sample events, in order.
	require.GreaterOrEqual(t, len(res.deliveries), len(demoEvents))
	first := map[string]broker.Result{}
	for i, d := range res.deliveries[:len(demoEvents)] {
		require.NoError(t, d.err)
		require.Equal(t, demoEvents[i], string(d.msg.Body))
		first[eventID(d.msg.Body)] = d.out
	}
	require.True(t, first["evt-parcel"].Processed)
	require.True(t, first["evt-flaky"].Processed, "the flaky event recovered in place")
	require.Equal(t, 3, first["evt-flaky"].Attempts)
	bowtie := first["evt-bowtie"]
	require.Equal(t, poison, bowtie.Destination)
	require.Equal(t, classify.ClassInvalidGeometry, bowtie.Envelope.FailureClass)
	require.Equal(t, "Self-intersection[0.5 0.5]", bowtie.Envelope.GeometryError.Reason)
	require.Equal(t, "redisstream", bowtie.Envelope.Source.System)
	require.Equal(t, c.stream, bowtie.Envelope.Source.Topic)
	require.Equal(t, replay.NewKey("spatial.events", []byte(demoEvents[1])), bowtie.IdempotencyKey, "the producer's key, verbatim")
	require.Equal(t, poison, first["evt-bad-crs"].Destination)
	require.Equal(t, classify.ClassCRSMismatch, first["evt-bad-crs"].Envelope.FailureClass)
	require.Equal(t, poison, first["(not json)"].Destination)
	require.Equal(t, classify.ClassSchemaViolation, first["(not json)"].Envelope.FailureClass)
	require.Equal(t, retry, first["evt-outage"].Destination)
	require.Equal(t, classify.ClassTransient, first["evt-outage"].Envelope.FailureClass)
	require.Equal(t, 4, first["evt-outage"].Envelope.Attempts)

	// The replays.
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeWouldRepair: 1, replay.OutcomeWouldFail: 1, replay.OutcomeSkipped: 1}, res.dry[poison].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeAckFailed: 1, replay.OutcomeRepairFailed: 1, replay.OutcomeSkipped: 1}, res.crashed[poison].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeAckFailed: 1}, res.crashed[retry].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeRepaired: 1, replay.OutcomeRepairFailed: 1, replay.OutcomeSkipped: 1}, res.replayed[poison].Counts)
	require.Equal(t, map[replay.Outcome]int{replay.OutcomeReplayed: 1}, res.replayed[retry].Counts)

	// The bowtie reached the consumer twice (once as sent, once repaired:
	// the second replay's re-injection was the same XADD as the first's,
	// absorbed by the source store's dedup window), every delivery
	// acknowledged...
	var bowtieDeliveries int
	for _, d := range res.deliveries {
		if d.out.IdempotencyKey == bowtie.IdempotencyKey {
			bowtieDeliveries++
			require.NoError(t, d.err)
		}
	}
	require.Equal(t, 2, bowtieDeliveries)
	require.EqualValues(t, len(demoEvents)+2, rdb.XLen(ctx, c.stream).Val(), "the sample events, one re-injection of the bowtie and one of the outage")
	pending, err := rdb.XPending(ctx, c.stream, c.group).Result()
	require.NoError(t, err)
	require.Zero(t, pending.Count)

	// ...and was emitted once, repaired; so were the others.
	emitted := map[string]int{}
	for _, m := range entries(t, rdb, c.out) {
		id := eventID(m.Body)
		emitted[id]++
		if id == "evt-bowtie" {
			require.Equal(t, "true", m.Header(broker.HeaderRepaired))
			require.Equal(t, bowtie.IdempotencyKey, m.Header(broker.HeaderIdempotencyKey))
			require.Contains(t, string(m.Body), `"MultiPolygon"`)
		}
	}
	require.Equal(t, map[string]int{"evt-parcel": 1, "evt-flaky": 1, "evt-bowtie": 1, "evt-outage": 1}, emitted)
	claims, err := redisclaims.New(rdb, &redisclaims.Options{Prefix: c.claimsPrefix})
	require.NoError(t, err)
	state, _ := claims.Keys(bowtie.IdempotencyKey)
	require.Equal(t, "done", rdb.Get(ctx, state).Val())

	// What no repair applies to is still in the poison stream; the retry
	// stream is empty (acknowledged entries are deleted).
	var left []string
	for _, m := range entries(t, rdb, prefix+":dlq:"+poison) {
		env, err := envelope.Decode(m.Body)
		require.NoError(t, err)
		left = append(left, env.FailureClass.String())
	}
	require.ElementsMatch(t, []string{"crs_mismatch", "schema_violation"}, left)
	require.Zero(t, rdb.XLen(ctx, prefix+":dlq:"+retry).Val())
	require.Contains(t, out.String(), "Every event was emitted exactly once.")

	// The cleanup deletes the keys.
	if *keep {
		t.Logf("kept the keys %s:* (-keep); delete them with: redis-cli --scan --pattern '%s:*' | xargs redis-cli del", prefix, prefix)
		return
	}
	require.NoError(t, deleteKeys(ctx, c, prefix+":*"))
	keys, err := rdb.Keys(ctx, prefix+":*").Result()
	require.NoError(t, err)
	require.Empty(t, keys)
}

// TestCommandLine drives the command as an operator would: a consumer
// takes over an entry a crashed consumer left pending, the replay
// subcommand repairs and re-injects it, and the consumer handles it.
func TestCommandLine(t *testing.T) {
	ctx := context.Background()
	rdb := testRedisClient(t)
	prefix := testRedisPrefix(t, "redis-consumer")
	c := testConfig(t, prefix)
	flags := []string{"-redis", c.redisURL, "-stream", c.stream, "-group", c.group, "-out", c.out, "-prefix", c.prefix,
		"-claims-prefix", c.claimsPrefix, "-offload-dir", c.offloadDir, "-claim-idle", "100ms", "-poll", "50ms", "-retry-delay", "5ms",
		"-concurrency", "1"} // one event at a time: the walkthrough checks outputs and dead letters in order, behind sentinels
	poisonKey := prefix + ":dlq:" + destinations(c.stream)[1]
	bowtieBody := `{"event_id":"evt-bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`
	okBody := `{"event_id":"evt-ok","geometry":{"type":"Point","coordinates":[12.49,41.89]}}`

	// A consumer read the bowtie (no idempotency key: one is derived) and
	// crashed before acknowledging it.
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, c.stream, c.group, "$").Err())
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: c.stream, Values: []any{"body", bowtieBody}}).Err())
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: c.stream, Values: []any{"body", okBody, "h:idempotency-key", "key-ok"}}).Err())
	got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: c.group, Consumer: "crashed", Streams: []string{c.stream, ">"}, Count: 1, Block: -1}).Result()
	require.NoError(t, err)
	require.Len(t, got[0].Messages, 1)

	consume := func(until func() bool) string {
		t.Helper()
		cctx, cancel := context.WithCancel(ctx)
		var stdout, stderr bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- cli(cctx, flags, &stdout, &stderr) }()
		require.Eventually(t, until, 60*time.Second, 20*time.Millisecond)
		cancel()
		require.ErrorIs(t, <-done, context.Canceled, stderr.String())
		return stdout.String()
	}
	settled := func(poison, out int64) func() bool {
		return func() bool {
			p, err := rdb.XPending(ctx, c.stream, c.group).Result()
			return err == nil && p.Count == 0 && rdb.XLen(ctx, poisonKey).Val() == poison && rdb.XLen(ctx, c.out).Val() == out
		}
	}
	s := consume(settled(1, 1))
	require.Contains(t, s, "consuming "+c.stream+" as spatial-app/")
	dl := entries(t, rdb, poisonKey)
	require.Len(t, dl, 1)
	env, err := envelope.Decode(dl[0].Body)
	require.NoError(t, err)
	require.Equal(t, "evt-bowtie", env.EventID)
	require.Equal(t, 2, env.Attempts, "the crashed consumer's delivery counts")
	require.Equal(t, 2, env.Source.DeliveryCount)
	require.True(t, replay.ValidKey(env.IdempotencyKey), env.IdempotencyKey)
	require.Equal(t, "key-ok", entries(t, rdb, c.out)[0].Header(broker.HeaderIdempotencyKey))

	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		require.NoError(t, cli(ctx, append(append([]string(nil), flags...), args...), &stdout, &stderr), stderr.String())
		return stdout.String()
	}
	require.Contains(t, run("replay", "-class", "transient"), "replay of "+destinations(c.stream)[1]+": nothing to replay")
	require.Contains(t, run("replay", "-dry-run"), "dry run of "+destinations(c.stream)[1]+": would_repair=1")
	require.Equal(t, int64(1), rdb.XLen(ctx, poisonKey).Val(), "a dry run changes nothing")
	s = run("replay")
	require.Contains(t, s, "replay of "+destinations(c.stream)[1]+": repaired=1")
	require.Zero(t, rdb.XLen(ctx, poisonKey).Val())

	consume(settled(0, 2))
	outs := entries(t, rdb, c.out)
	require.Len(t, outs, 2)
	require.Equal(t, env.IdempotencyKey, outs[1].Header(broker.HeaderIdempotencyKey), "re-injected with the derived key, verbatim")
	require.Equal(t, "true", outs[1].Header(broker.HeaderRepaired))
	require.True(t, strings.HasPrefix(outs[1].Header(broker.HeaderRepair), "make_valid:"))

	var stderr bytes.Buffer
	require.Error(t, cli(ctx, append(flags, "replay", "-class", "nonsense"), &bytes.Buffer{}, &stderr))
	require.Error(t, cli(ctx, append(flags, "extra"), &bytes.Buffer{}, &stderr))
}
