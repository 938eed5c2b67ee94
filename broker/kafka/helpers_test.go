package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/kafka"
	"github.com/geodlq/geodlq/broker/kafka/kafkatest"
	"github.com/geodlq/geodlq/classify"
)

// cluster is a kfake cluster (package kafkatest) for one test.
type cluster struct {
	t *testing.T
	c *kafkatest.Cluster
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c, err := kafkatest.NewCluster(context.Background(), &kafkatest.Options{GroupMinSessionTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return &cluster{t: t, c: c}
}

// client returns a new client of the cluster, closed when the test ends.
func (c *cluster) client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.c.Addrs()...)}, opts...)...)
	require.NoError(c.t, err)
	c.t.Cleanup(cl.Close)
	return cl
}

// store returns a store on a new client, with short test timings.
func (c *cluster) store(opts *kafka.Options) *broker.Store {
	c.t.Helper()
	o := kafka.Options{
		StoreOptions: broker.StoreOptions{LeaseTTL: 3 * time.Second},
		Topics:       &kafka.TopicOptions{Partitions: 3},
		JoinWait:     2 * time.Second,
		ConsumerOpts: []kgo.Opt{kgo.SessionTimeout(3 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)},
	}
	if opts != nil {
		o = *opts
	}
	s, err := kafka.New(c.client(kafka.ProducerOpts(&o)...), &o)
	require.NoError(c.t, err)
	c.t.Cleanup(func() { _ = s.Close() })
	return s
}

func (c *cluster) admin() *kadm.Client { return kadm.NewClient(c.client()) }

// createTopic creates topic with n partitions.
func (c *cluster) createTopic(topic string, n int32) {
	c.t.Helper()
	resp, err := c.admin().CreateTopic(context.Background(), n, 1, nil, topic)
	require.NoError(c.t, err)
	require.NoError(c.t, resp.Err)
}

// produce writes records synchronously.
func (c *cluster) produce(rs ...*kgo.Record) {
	c.t.Helper()
	require.NoError(c.t, c.client().ProduceSync(context.Background(), rs...).FirstErr())
}

// committed returns the group's committed offset of topic/partition, or -1.
func (c *cluster) committed(group, topic string, p int32) int64 {
	c.t.Helper()
	os, err := c.admin().FetchOffsets(context.Background(), group)
	require.NoError(c.t, err)
	if o, ok := os.Lookup(topic, p); ok && o.Err == nil {
		return o.At
	}
	return -1
}

// metadata returns the group's commit metadata of topic/partition.
func (c *cluster) metadata(group, topic string, p int32) string {
	c.t.Helper()
	os, err := c.admin().FetchOffsets(context.Background(), group)
	require.NoError(c.t, err)
	o, _ := os.Lookup(topic, p)
	return o.Metadata
}

// unique returns name with a random suffix.
func unique(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + "." + hex.EncodeToString(b[:])
}

// drain fetches and acknowledges everything in destination.
func drain(t *testing.T, s *broker.Store, destination string) []*broker.Record {
	t.Helper()
	ctx := context.Background()
	var all []*broker.Record
	for {
		recs, err := s.Fetch(ctx, destination, broker.Filter{}, 100)
		require.NoError(t, err)
		if len(recs) == 0 {
			return all
		}
		for _, r := range recs {
			require.NoError(t, s.Ack(ctx, r))
		}
		all = append(all, recs...)
	}
}

// headers returns a record's headers as a map, failing on a repeated key.
func headers(t *testing.T, hs []kgo.RecordHeader) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, h := range hs {
		_, dup := m[h.Key]
		require.False(t, dup, "header %q appears twice", h.Key)
		m[h.Key] = string(h.Value)
	}
	return m
}

// consumeAll reads every record of topic from the start with a fresh
// group-less client.
func (c *cluster) consumeAll(topic string, want int) []*kgo.Record {
	c.t.Helper()
	cl := c.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		require.NoError(c.t, ctx.Err(), "got %d of %d records of %s", len(out), want, topic)
		out = append(out, fs.Records()...)
	}
	return out
}

// headerBytes returns the bytes of header keys and values, what
// Options.HeaderBudget bounds.
func headerBytes(hs []kgo.RecordHeader) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

var poison = &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation, Err: errSelfIntersection}
