package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/kafka"
	"github.com/geodlq/geodlq/broker/kafka/kafkatest"
	"github.com/geodlq/geodlq/internal/benchenv"
)

const benchDest = "spatial.parcels.poison.dlt"

// openBench starts a kfake cluster (package kafkatest) as the conformance harness
// does and returns a store with the harness's options on a client with
// kafka.ProducerOpts (acks=all, idempotent producer), the destination
// topic created, and the client.
func openBench(b *testing.B) (*broker.Store, *kgo.Client) {
	b.Helper()
	c, err := kafkatest.NewCluster(context.Background(), &kafkatest.Options{GroupMinSessionTimeout: 100 * time.Millisecond})
	require.NoError(b, err)
	b.Cleanup(func() { _ = c.Close() })
	o := harnessOpts
	cl, err := kgo.NewClient(append(kafka.ProducerOpts(&o), kgo.SeedBrokers(c.Addrs()...))...)
	require.NoError(b, err)
	b.Cleanup(cl.Close)
	s, err := kafka.New(cl, &o)
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), o.Topics.Partitions, 1, nil, benchDest)
	require.NoError(b, err)
	require.NoError(b, resp.Err)
	return s, cl
}

// BenchmarkWrite publishes 2 KiB dlq.v1 envelopes, one at a time, each on
// every in-sync replica (acks=all) when Publish returns.
func BenchmarkWrite(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		return s.Publish(ctx, benchDest, m)
	})
}

// BenchmarkReplay fetches (through the replay group) and acknowledges
// envelopes, 100 at a time.
func BenchmarkReplay(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Replay(b, s, s, benchDest)
}

// BenchmarkBareClientWrite is the ceiling: franz-go's ProduceSync, on a
// client with the same options (acks=all, idempotent producer), of a
// record with the same key, value and headers (the envelope's) to the same
// topic.
func BenchmarkBareClientWrite(b *testing.B) {
	set := benchenv.New(b)
	_, cl := openBench(b)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		hs := make([]kgo.RecordHeader, 0, len(m.Headers))
		for k, v := range m.Headers {
			hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		return cl.ProduceSync(ctx, &kgo.Record{Topic: benchDest, Key: m.Key, Value: m.Body, Headers: hs}).FirstErr()
	})
}

// BenchmarkList lists b.N envelopes, 100 a page, with the store's direct
// reader (no group, no leases), and decodes nothing.
func BenchmarkList(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	ctx := context.Background()
	require.NoError(b, set.PublishAll(ctx, s, benchDest, b.N))
	b.SetBytes(benchenv.EnvelopeBytes)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	err := s.ScanAll(ctx, broker.ListOptions{Destination: benchDest, Limit: benchenv.BatchSize}, func(broker.Entry) error { n++; return nil })
	b.StopTimer()
	require.NoError(b, err)
	require.Equal(b, b.N, n)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "envelopes/s")
}

// BenchmarkBareClientConsume is List's ceiling: a franz-go direct consumer
// reading the same b.N records from the start of every partition.
func BenchmarkBareClientConsume(b *testing.B) {
	set := benchenv.New(b)
	s, cl := openBench(b)
	ctx := context.Background()
	require.NoError(b, set.PublishAll(ctx, s, benchDest, b.N))
	b.SetBytes(benchenv.EnvelopeBytes)
	b.ReportAllocs()
	b.ResetTimer()
	seeds, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	rd, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(benchDest), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(b, err)
	defer rd.Close()
	n := 0
	for n < b.N {
		fs := rd.PollFetches(ctx)
		require.NoError(b, fs.Err0())
		n += fs.NumRecords()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "envelopes/s")
}
