package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/kafka"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
)

var (
	fixedBowtie = []byte(`{"event_id":"evt-bowtie","geometry":{"type":"MultiPolygon","coordinates":[[[[0,0],[0.5,0.5],[1,0],[0,0]]],[[[0.5,0.5],[0,1],[1,1],[0.5,0.5]]]]}}`)
	flaky       = []byte(`{"event_id":"evt-flaky","geometry":{"type":"Point","coordinates":[1.0,2.0]}}`)
	notJSON     = []byte(`not json at all`)
	fine        = []byte(`{"event_id":"evt-ok","geometry":{"type":"Point","coordinates":[3,4]}}`)
)

type makeValid struct{}

func (makeValid) Repair(_ context.Context, _ *envelope.Envelope, payload []byte) ([]byte, replay.Repair, error) {
	if !bytes.Equal(payload, []byte(bowtie)) {
		return nil, replay.Repair{}, fmt.Errorf("test repairer knows only the bowtie: %w", replay.ErrNotRepairable)
	}
	return fixedBowtie, replay.Repair{Method: "make_valid", Detail: "structure", VerticesBefore: 5, VerticesAfter: 8}, nil
}

// The whole loop on Kafka: a consumer dead-letters what fails into the DLT
// topics (committing the source only after), the replayer reads the DLT
// topics through the Store's consumer group, repairs and re-injects into
// the source topic with the preserved idempotency keys, the consumer
// processes the re-injected events exactly once, and a second replay run
// (another process) finds only what was deliberately left behind.
func TestReplayEndToEnd(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(nil)
	src, group := unique("spatial.events"), unique("app")
	c.createTopic(src, 3)
	keys := map[string][]byte{"bowtie": []byte(bowtie), "flaky": flaky, "schema": notJSON, "ok": fine}
	var rs []*kgo.Record
	for name, body := range keys {
		rs = append(rs, &kgo.Record{Topic: src, Key: []byte("entity-" + name), Value: body,
			Headers: []kgo.RecordHeader{{Key: broker.HeaderIdempotencyKey, Value: []byte("idem:v1:" + name)}}})
	}
	c.produce(rs...)

	claims := replay.NewMemClaims(nil)
	var mu sync.Mutex
	effects := map[string]int{}
	var downstreamUp atomic.Bool
	h := func(ctx context.Context, m *broker.Message) error {
		switch {
		case bytes.Equal(m.Body, []byte(bowtie)):
			return poison
		case bytes.Equal(m.Body, notJSON):
			return classify.SchemaViolation(errors.New("invalid character 'o'"))
		case bytes.Equal(m.Body, flaky) && !downstreamUp.Load():
			return classify.Transient(errors.New("tile server 503"))
		}
		key := m.Header(broker.HeaderIdempotencyKey)
		_, err := replay.Once(ctx, claims, key, time.Minute, func(context.Context) error {
			mu.Lock()
			effects[key]++
			mu.Unlock()
			return nil
		})
		return err
	}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{
		Publisher: s, Destination: kafka.Destination, Policy: classify.Policy{MaxAttempts: 2},
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
	})
	require.NoError(t, err)

	var n atomic.Int32
	var nextMu sync.Mutex
	next := map[int32]int64{} // partition -> offset after its last record
	run(t, c.client(kafka.ConsumerOpts(group, src)...), proc, h, 0, func(r *kgo.Record, out broker.Result, err error) bool {
		assert.NoError(t, err)
		nextMu.Lock()
		next[r.Partition] = max(next[r.Partition], r.Offset+1)
		nextMu.Unlock()
		return n.Add(1) == 4
	})
	poisonT, retryT := src+".poison.dlt", src+".retry.dlt"
	require.Len(t, c.consumeAll(poisonT, 2), 2)
	require.Len(t, c.consumeAll(retryT, 1), 1)
	for p, off := range next {
		require.Equal(t, off, c.committed(group, src, p), "partition %d committed once its envelopes were written", p)
	}
	require.Equal(t, map[string]int{"idem:v1:ok": 1}, effects)

	downstreamUp.Store(true)
	r, err := replay.New(&replay.Options{Source: s, Target: s,
		Repairers: map[classify.Class]replay.Repairer{classify.ClassInvalidGeometry: makeValid{}}})
	require.NoError(t, err)
	rep, err := r.Run(ctx, replay.Request{Destination: poisonT})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Examined)
	require.Equal(t, 1, rep.Counts[replay.OutcomeRepaired])
	require.Equal(t, 1, rep.Counts[replay.OutcomeSkipped], "schema violations stay in the DLT")
	rep, err = r.Run(ctx, replay.Request{Destination: retryT})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Counts[replay.OutcomeReplayed])

	// The re-injected records keep key and idempotency key, and say where
	// they came from.
	var replayed []*kgo.Record
	for _, rec := range c.consumeAll(src, 6) {
		if kafka.MessageOf(rec).Header(broker.HeaderReplayOf) != "" {
			replayed = append(replayed, rec)
		}
	}
	require.Len(t, replayed, 2)
	for _, rec := range replayed {
		m := kafka.MessageOf(rec)
		key := m.Header(broker.HeaderIdempotencyKey)
		require.Contains(t, []string{"idem:v1:bowtie", "idem:v1:flaky"}, key)
		require.Equal(t, "entity-"+key[len("idem:v1:"):], string(rec.Key), "replayed with the source key")
		if key == "idem:v1:bowtie" {
			require.Equal(t, fixedBowtie, rec.Value)
			require.Equal(t, "true", m.Header(broker.HeaderRepaired))
		} else {
			require.Equal(t, flaky, rec.Value, "restored byte for byte")
		}
	}

	n.Store(0)
	run(t, c.client(kafka.ConsumerOpts(group, src)...), proc, h, 0, func(_ *kgo.Record, out broker.Result, err error) bool {
		assert.True(t, out.Processed)
		return n.Add(1) == 2
	})
	require.Equal(t, map[string]int{"idem:v1:ok": 1, "idem:v1:bowtie": 1, "idem:v1:flaky": 1}, effects, "each event's effect happened exactly once")
	require.NoError(t, s.Close())

	// Another replay process: only the schema violation is left.
	s2 := c.store(nil)
	r2, err := replay.New(&replay.Options{Source: s2, Target: s2})
	require.NoError(t, err)
	rep, err = r2.Run(ctx, replay.Request{Destination: poisonT, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Examined, "acknowledged records do not come back: %+v", rep.Items)
	require.Equal(t, "idem:v1:schema", rep.Items[0].IdempotencyKey)
	rep, err = r2.Run(ctx, replay.Request{Destination: retryT})
	require.NoError(t, err)
	require.Zero(t, rep.Examined)
}
