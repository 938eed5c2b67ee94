package pubsub_test

import (
	"context"
	"math"
	"net"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const project = "geodlq-test"

// server is pstest, Pub/Sub's in-process fake, served on a listener that
// accepts Pub/Sub's 10 MB messages: pstest's own listener keeps gRPC's
// default 4 MiB receive limit, so the same fake (its GServer) is also
// registered on a gRPC server with a 16 MiB limit.
type server struct {
	*pstest.Server
	addr string
}

func newServer(t testing.TB) *server {
	t.Helper()
	ps := pstest.NewServer()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer(grpc.MaxRecvMsgSize(16 << 20))
	pubsubpb.RegisterPublisherServer(g, &ps.GServer)
	pubsubpb.RegisterSubscriberServer(g, &ps.GServer)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(func() { g.Stop(); _ = ps.Close() })
	return &server{Server: ps, addr: l.Addr().String()}
}

// newClient returns a real client connected to srv (with the call size
// limits pubsub.NewClient sets on its own connections).
func newClient(t testing.TB, srv *server) *pubsub.Client {
	t.Helper()
	conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)))
	require.NoError(t, err)
	c, err := pubsub.NewClient(context.Background(), project, option.WithGRPCConn(conn))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(); _ = conn.Close() })
	return c
}
