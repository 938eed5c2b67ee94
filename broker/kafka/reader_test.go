package kafka_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/kafka"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

func readerOpts(partitions int32) *kafka.Options {
	return &kafka.Options{
		StoreOptions: broker.StoreOptions{LeaseTTL: 2 * time.Second},
		Topics:       &kafka.TopicOptions{Partitions: partitions},
		JoinWait:     2 * time.Second,
		ConsumerOpts: []kgo.Opt{kgo.SessionTimeout(3 * time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)},
	}
}

// Records a filter skips are not lost: they hold the group's offset back,
// and a later unfiltered Fetch — here by another process after a restart —
// still gets them. The records acknowledged past them are listed in the
// commit metadata, so the restarted reader does not get those again.
func TestFilterSkipsHoldTheOffset(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(readerOpts(1))
	d := unique("filters") + ".poison.dlt"
	ins := brokertest.FilterInputs()[:6] // 0-2 invalid_geometry, 3-4 crs_mismatch, 5 transient
	for _, m := range brokertest.Messages(t, ins) {
		require.NoError(t, s.Publish(ctx, d, m))
	}
	only := broker.Filter{Classes: []classify.Class{classify.ClassCRSMismatch}}
	got, err := s.Fetch(ctx, d, only, 10)
	require.NoError(t, err)
	require.Len(t, got, 2, "the filter returns the matching records")
	for _, r := range got {
		require.NotNil(t, r.Envelope, "a filtered fetch hands out the envelope it decoded")
		require.Equal(t, classify.ClassCRSMismatch, r.Envelope.FailureClass)
		require.NoError(t, s.Ack(ctx, r))
	}
	again, err := s.Fetch(ctx, d, only, 10)
	require.NoError(t, err)
	require.Empty(t, again, "a filtered Fetch returns when nothing more matches")
	require.NoError(t, s.Close(), "Close commits what was acknowledged")
	group := "geodlq-replay." + d
	require.Equal(t, int64(0), c.committed(group, d, 0), "the skipped record at offset 0 holds the offset back")
	require.Equal(t, "geodlq.acked.v1:3-4", c.metadata(group, d, 0), "the acknowledged records past it are in the metadata")
	_, err = s.Fetch(ctx, d, broker.Filter{}, 10)
	require.ErrorIs(t, err, broker.ErrClosed)

	s2 := c.store(readerOpts(1))
	rest := drain(t, s2, d)
	var ids []string
	for _, r := range rest {
		ids = append(ids, r.ID)
	}
	require.Equal(t, []string{"0/0", "0/1", "0/2", "0/5"}, ids, "every skipped record, none of the acknowledged ones")
	require.NoError(t, s2.Close())
	require.Equal(t, int64(6), c.committed(group, d, 0))
	require.Empty(t, c.metadata(group, d, 0))
}

// A lease held longer than LeaseTTL is lost — the Store leaves the group,
// as a consumer past max.poll.interval.ms does — and the record comes back.
func TestLeaseExpiry(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(readerOpts(2))
	d := unique("lease") + ".retry.dlt"
	require.NoError(t, s.Publish(ctx, d, brokertest.Message(t, brokertest.SampleInputs()[3])))
	first, err := s.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Zero(t, first[0].Deliveries, "Kafka keeps no delivery count")
	time.Sleep(2*time.Second + 500*time.Millisecond)
	require.ErrorIs(t, s.Ack(ctx, first[0]), broker.ErrLeaseLost)
	require.ErrorIs(t, s.Release(ctx, first[0]), broker.ErrLeaseLost)
	again := drain(t, s, d)
	require.Len(t, again, 1, "the record is fetched again after the lease expired")
	require.Equal(t, first[0].ID, again[0].ID)
	require.NotEqual(t, first[0].Lease, again[0].Lease)
	require.ErrorIs(t, s.Ack(ctx, again[0]), broker.ErrLeaseLost, "acked already")
}

// With a small buffer, a filter that skips everything still returns, and
// an unfiltered reader goes on as acknowledgements free the buffer.
func TestBufferBound(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	o := readerOpts(1)
	o.MaxBufferedBytes = 16 << 10
	s := c.store(o)
	d := unique("buffer") + ".poison.dlt"
	const n = 60
	for i := range n {
		in := brokertest.SampleInputs()[0]
		in.IdempotencyKey = "idem:buffer:" + strconv.Itoa(i)
		require.NoError(t, s.Publish(ctx, d, brokertest.Message(t, in)))
	}
	none, err := s.Fetch(ctx, d, broker.Filter{Classes: []classify.Class{classify.ClassTransient}}, 10)
	require.NoError(t, err)
	require.Empty(t, none)
	seen := map[string]bool{}
	for _, r := range drain(t, s, d) {
		env, err := envelope.Decode(r.Message.Body)
		require.NoError(t, err)
		seen[env.IdempotencyKey] = true
	}
	require.Len(t, seen, n, "every record read through a buffer far smaller than the topic")
}

func TestAckOfForeignRecord(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	s := c.store(readerOpts(1))
	require.ErrorIs(t, s.Ack(ctx, &broker.Record{ID: "not-an-id", Destination: "nowhere"}), broker.ErrInvalidArgument)
	require.ErrorIs(t, s.Ack(ctx, &broker.Record{ID: "0/0", Destination: "nowhere", Lease: "x:1"}), broker.ErrLeaseLost)
	recs, err := s.Fetch(ctx, unique("missing"), broker.Filter{}, 10)
	require.NoError(t, err)
	require.Empty(t, recs, "a topic that does not exist holds nothing")
}
