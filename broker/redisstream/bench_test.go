package redisstream_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/redisstream"
	"github.com/geodlq/geodlq/broker/redisstream/internal/redistest"
	"github.com/geodlq/geodlq/internal/benchenv"
)

const benchDest = "spatial.parcels.poison.dlt"

// openBench returns a store with the conformance harness's options (and
// dedup as given) under a key prefix of its own (deleted at the end), and
// its client.
func openBench(b *testing.B, dedup time.Duration) (*broker.Store, *redis.Client) {
	b.Helper()
	c := redistest.Client(b)
	o := opts
	o.Prefix = redistest.Prefix(b, "bench")
	o.DedupWindow = dedup
	s, err := redisstream.New(c, &o)
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	return s, c
}

// BenchmarkWrite publishes 2 KiB dlq.v1 envelopes, one at a time (the
// primary's acknowledgement, the store's default durability), through the
// deduplicating publish script that makes a write's outcome certain.
func BenchmarkWrite(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b, 0)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		return s.Publish(ctx, benchDest, m)
	})
}

// BenchmarkWriteNoDedup is BenchmarkWrite with DedupWindow negative: a
// bare XADD, whose outcome a dropped connection leaves uncertain.
func BenchmarkWriteNoDedup(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b, -1)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		return s.Publish(ctx, benchDest, m)
	})
}

// BenchmarkReplay fetches (XREADGROUP in the store's script) and
// acknowledges (XACK + XDEL) envelopes, 100 at a time.
func BenchmarkReplay(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b, 0)
	set.Replay(b, s, s, benchDest)
}

// BenchmarkBareClientWrite is the ceiling: go-redis XADD of the same entry
// to a stream under the same prefix — the body, key, headers and the
// envelope's index fields the store writes (known to the writer without
// decoding the envelope) — acknowledged by the primary, as the store's
// writes are.
func BenchmarkBareClientWrite(b *testing.B) {
	set := benchenv.New(b)
	s, c := openBench(b, 0)
	env := set.Envelope
	ge := env.GeometryError
	index := []any{
		"v", "1", "env", "1",
		"class", env.FailureClass.String(), "stage", env.FailedStage.String(),
		"epsg", strconv.Itoa(broker.EPSGOf(env)), "event_id", env.EventID,
		"dlq_at_s", strconv.FormatInt(env.DeadLetteredAt.Unix(), 10), "dlq_at_ns", strconv.Itoa(env.DeadLetteredAt.Nanosecond()),
		"loc_x", strconv.FormatFloat(ge.Location[0], 'g', -1, 64), "loc_y", strconv.FormatFloat(ge.Location[1], 'g', -1, 64),
	}
	stream := redisstream.StreamKey(s, benchDest)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		values := append(slices.Clip(index), "key", m.Key)
		for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
			values = append(values, "h:"+k, m.Headers[k])
		}
		values = append(values, "body", m.Body)
		return c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: values}).Err()
	})
}

// BenchmarkRedisTime reports the Redis server's own CPU time per write
// (on a private redis-server, so that no other client counts), with and
// without deduplication: the cost of a certain outcome where it is paid.
func BenchmarkRedisTime(b *testing.B) {
	set := benchenv.New(b)
	cases := []struct {
		name  string
		dedup time.Duration
	}{{"dedup", 0}, {"no-dedup", -1}}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			c := startRedis(b)
			o := opts
			o.DedupWindow = tc.dedup
			s, err := redisstream.New(c, &o)
			require.NoError(b, err)
			defer s.Close()
			// Warm up: the script compiled, the keyspace and the stream
			// grown past their first rehashes and allocations.
			for i := range 20_000 {
				require.NoError(b, s.Publish(context.Background(), benchDest, set.Message(1<<30+i)))
			}
			done := serverTime(b, c)
			set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
				return s.Publish(ctx, benchDest, m)
			})
			done()
		})
	}
}

// serverTime starts measuring the CPU time of the server's main thread
// (INFO cpu: parsing, the command, its reply; commandstats would count
// the commands a script calls twice); the function it returns reports it
// per op.
func serverTime(b *testing.B, c *redis.Client) func() {
	total := func() float64 {
		info, err := c.Info(context.Background(), "cpu").Result()
		require.NoError(b, err)
		var sum float64
		for _, line := range strings.Split(info, "\n") {
			name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (name == "used_cpu_sys_main_thread" || name == "used_cpu_user_main_thread") {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(b, err)
				sum += f
			}
		}
		return sum * 1e6
	}
	before := total()
	return func() { b.ReportMetric((total()-before)/float64(b.N), "redis-cpu-µs/op") }
}
