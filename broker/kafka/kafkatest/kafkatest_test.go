package kafkatest_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker/kafka/kafkatest"
)

// TestCluster starts a cluster with a seeded topic, round-trips a record
// through it with a real client, and checks that Close stops the process:
// the port no longer accepts connections, and a second Close is harmless.
func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := kafkatest.NewCluster(ctx, &kafkatest.Options{Topics: []string{"parcels"}, Partitions: 3, GroupMinSessionTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	addrs := c.Addrs()
	require.Len(t, addrs, 1)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("parcels"), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "parcels", Key: []byte("k"), Value: []byte("v")}).FirstErr())
	var got []*kgo.Record
	for len(got) == 0 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		require.NoError(t, fs.Err0())
		got = append(got, fs.Records()...)
	}
	require.Len(t, got, 1)
	require.Equal(t, "v", string(got[0].Value))
	require.Less(t, got[0].Partition, int32(3))
	cl.Close()

	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	_, err = net.DialTimeout("tcp", addrs[0], time.Second)
	require.Error(t, err, "the cluster's process still listens after Close")
}

// TestClustersAreSeparate checks that each cluster is its own: a topic
// created in one is absent from another.
func TestClustersAreSeparate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	a, err := kafkatest.NewCluster(ctx, &kafkatest.Options{Topics: []string{"only-in-a"}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	b, err := kafkatest.NewCluster(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	require.NotEqual(t, a.Addrs(), b.Addrs())

	for addrs, want := range map[*kafkatest.Cluster]bool{a: true, b: false} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs.Addrs()...))
		require.NoError(t, err)
		topics, err := kadm.NewClient(cl).ListTopics(ctx)
		cl.Close()
		require.NoError(t, err)
		require.Equal(t, want, topics.Has("only-in-a"))
	}
}

func TestBadOptions(t *testing.T) {
	for name, o := range map[string]*kafkatest.Options{
		"negative brokers":    {Brokers: -1},
		"negative partitions": {Partitions: -2},
		"empty topic":         {Topics: []string{""}},
		"comma in topic":      {Topics: []string{"a,b"}},
		"negative timeout":    {GroupMinSessionTimeout: -time.Second},
	} {
		_, err := kafkatest.NewCluster(context.Background(), o)
		require.Error(t, err, name)
	}
}
