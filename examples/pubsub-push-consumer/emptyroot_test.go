package main

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/geodlq/geodlq/envelope"
)

// TestStaticBinaryInEmptyRoot builds the binary the Dockerfile copies
// into its FROM scratch image (CGO_ENABLED=0) and runs it in an empty
// root, with the dead-letter topic on pstest (PUBSUB_EMULATOR_HOST): a
// valid event is answered 204, a bowtie is dead-lettered, then answered
// 204.
func TestStaticBinaryInEmptyRoot(t *testing.T) {
	bin := Build(t, ".")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ps := pstest.NewServer()
	t.Cleanup(func() { _ = ps.Close() })
	conn, err := grpc.NewClient(ps.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	client, err := pubsub.NewClient(ctx, "p", option.WithGRPCConn(conn))
	require.NoError(t, err)
	_, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/p/topics/vector-dlq"})
	require.NoError(t, err)
	_, err = client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{Name: "projects/p/subscriptions/vector-dlq-sub", Topic: "projects/p/topics/vector-dlq"})
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	var stderr LockedBuffer
	Start(t, ctx, bin, []string{"PROJECT_ID=p", "DLQ_TOPIC_ID=vector-dlq", "PUBSUB_EMULATOR_HOST=" + ps.Addr,
		"PORT=" + strconv.Itoa(port)}, &stderr)
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/push"
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, time.Minute, 50*time.Millisecond, "the binary did not listen; stderr: %s", &stderr)

	require.Equal(t, http.StatusNoContent, push(t, url, `{"crs":"urn:ogc:def:crs:EPSG::4326","geometry":{"type":"Point","coordinates":[1,2]}}`), "stderr: %s", &stderr)
	require.Empty(t, ps.Messages())
	require.Equal(t, http.StatusNoContent, push(t, url, `{"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}}`), "stderr: %s", &stderr)
	msgs := ps.Messages()
	require.Len(t, msgs, 1, "stderr: %s", &stderr)
	env, err := envelope.Decode(msgs[0].Data)
	require.NoError(t, err)
	require.Equal(t, "self_intersection", env.GeometryError.Kind)
}
