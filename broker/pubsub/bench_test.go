package pubsub_test

import (
	"context"
	"encoding/base64"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	geopubsub "github.com/geodlq/geodlq/broker/pubsub"
	"github.com/geodlq/geodlq/internal/benchenv"
)

// benchSettings are the conformance harness's publish settings, except
// that a batch closes at its first message (CountThreshold 1): a
// sequential writer would otherwise wait out the 1 ms DelayThreshold on
// every Publish, and both figures would measure that timer.
var benchSettings = func() pubsub.PublishSettings {
	ps := *harnessOpts.PublishSettings
	ps.CountThreshold = 1
	return ps
}()

// openBench returns a store with the conformance harness's options
// (publish settings: benchSettings) on a client of a new in-process
// pstest server, and the client.
func openBench(b *testing.B) (*broker.Store, *pubsub.Client) {
	b.Helper()
	c := newClient(b, newServer(b))
	o := harnessOpts
	o.PublishSettings = &benchSettings
	s, err := geopubsub.New(context.Background(), c, &o)
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	return s, c
}

// BenchmarkWrite publishes 2 KiB dlq.v1 envelopes, one at a time, each
// acknowledged by the server when Publish returns.
func BenchmarkWrite(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	dest := benchenv.Name("bench-dlq")
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		return s.Publish(ctx, dest, m)
	})
}

// BenchmarkReplay fetches (Pull + ModifyAckDeadline) and acknowledges
// envelopes, 100 at a time.
func BenchmarkReplay(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Replay(b, s, s, benchenv.Name("bench-dlq"))
}

// BenchmarkBareClientWrite is the ceiling: the Pub/Sub client's Publish
// and Get of the same data and attributes (the envelope's headers and the
// key), with the same publish settings, to a topic with a subscription.
func BenchmarkBareClientWrite(b *testing.B) {
	set := benchenv.New(b)
	_, c := openBench(b)
	ctx := context.Background()
	topic := "projects/" + c.Project() + "/topics/" + benchenv.Name("bench-dlq")
	_, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic})
	require.NoError(b, err)
	_, err = c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: topic + "-sub", Topic: topic, AckDeadlineSeconds: int32(harnessOpts.LeaseTTL.Seconds()),
	})
	require.NoError(b, err)
	p := c.Publisher(topic)
	p.PublishSettings = benchSettings
	b.Cleanup(p.Stop)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		attrs := make(map[string]string, len(m.Headers)+1)
		for k, v := range m.Headers {
			attrs[k] = v
		}
		attrs[geopubsub.HeaderKey] = base64.StdEncoding.EncodeToString(m.Key)
		_, err := p.Publish(ctx, &pubsub.Message{Data: m.Body, Attributes: attrs}).Get(ctx)
		return err
	})
}
