package redisstream_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/internal/benchenv"
	"github.com/geodlq/geodlq/internal/redistest"
)

const benchDest = "spatial.parcels.poison.dlt"

// openBench returns a store with the conformance harness's options under
// a key prefix of its own (deleted at the end), and its client.
func openBench(b *testing.B) (*redisstream.Store, *redis.Client) {
	b.Helper()
	c := redistest.Client(b)
	o := opts
	o.Prefix = redistest.Prefix(b, "bench")
	s, err := redisstream.New(c, &o)
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	return s, c
}

// BenchmarkWrite publishes 2 KiB dlq.v1 envelopes, one at a time (the
// primary's acknowledgement, the store's default durability).
func BenchmarkWrite(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		return s.Publish(ctx, benchDest, m)
	})
}

// BenchmarkReplay fetches (XREADGROUP in the store's script) and
// acknowledges (XACK + XDEL) envelopes, 100 at a time.
func BenchmarkReplay(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Replay(b, s, s, benchDest)
}

// BenchmarkBareClientWrite is the ceiling: go-redis XADD of the same entry
// to a stream under the same prefix — the body, key, headers and the
// envelope's index fields the store writes (known to the writer without
// decoding the envelope) — acknowledged by the primary, as the store's
// writes are.
func BenchmarkBareClientWrite(b *testing.B) {
	set := benchenv.New(b)
	s, c := openBench(b)
	env := set.Envelope
	ge := env.GeometryError
	index := []any{
		"v", "1", "env", "1",
		"class", env.FailureClass.String(), "stage", env.FailedStage.String(),
		"epsg", strconv.Itoa(broker.EPSGOf(env)), "event_id", env.EventID,
		"dlq_at_s", strconv.FormatInt(env.DeadLetteredAt.Unix(), 10), "dlq_at_ns", strconv.Itoa(env.DeadLetteredAt.Nanosecond()),
		"loc_x", strconv.FormatFloat(ge.Location[0], 'g', -1, 64), "loc_y", strconv.FormatFloat(ge.Location[1], 'g', -1, 64),
	}
	stream := s.StreamKey(benchDest)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		values := append(slices.Clip(index), "key", m.Key)
		for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
			values = append(values, "h:"+k, m.Headers[k])
		}
		values = append(values, "body", m.Body)
		return c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: values}).Err()
	})
}
