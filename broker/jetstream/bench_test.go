package jetstream_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/jetstream"
	"github.com/geodlq/geodlq/internal/benchenv"
	"github.com/geodlq/geodlq/internal/testenv"
)

const benchDest = "spatial.parcels.poison.dlt"

// openBench returns a store on a new connection, with a stream of its own
// (deleted at the end) made with the conformance harness's options, and
// the connection's JetStream client.
func openBench(b *testing.B) (*broker.Store, natsjs.JetStream) {
	b.Helper()
	url := testenv.NATS(b)
	nc, err := nats.Connect(url)
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	require.NoError(b, err)
	name := uniqueName("BENCH")
	s, err := jetstream.New(context.Background(), js, &jetstream.Options{
		Stream: name, SubjectPrefix: "geodlqbench." + name, Create: true,
		StoreOptions: broker.StoreOptions{LeaseTTL: time.Second},
	})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close(); deleteStream(b, url, name) })
	return s, js
}

// BenchmarkWrite publishes 2 KiB dlq.v1 envelopes, one at a time, each
// acknowledged by the stream (file storage) when Publish returns.
func BenchmarkWrite(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		return s.Publish(ctx, benchDest, m)
	})
}

// BenchmarkReplay fetches (from the durable pull consumer) and
// acknowledges (double ack) envelopes, 100 at a time.
func BenchmarkReplay(b *testing.B) {
	set := benchenv.New(b)
	s, _ := openBench(b)
	set.Replay(b, s, s, benchDest)
}

// BenchmarkBareClientWrite is the ceiling: nats.go's JetStream PublishMsg
// of the same body and headers (the envelope's, the key, and a
// Nats-Msg-Id of the same length, so the stream does the same duplicate
// check) to a stream made by jetstream.New with the same options, waiting
// for the stream's acknowledgement as the store does.
func BenchmarkBareClientWrite(b *testing.B) {
	set := benchenv.New(b)
	s, js := openBench(b)
	subject := jetstream.Subject(s, benchDest)
	set.Loop(b, func(ctx context.Context, _ int, m *broker.Message) error {
		msg := nats.NewMsg(subject)
		msg.Data = m.Body
		for k, v := range m.Headers {
			msg.Header[k] = []string{v}
		}
		msg.Header[jetstream.HeaderKey] = []string{base64.StdEncoding.EncodeToString(m.Key)}
		id := sha256.Sum256([]byte(m.Headers[broker.HeaderIdempotencyKey]))
		msg.Header[jetstream.HeaderMsgID] = []string{"geodlq-" + hex.EncodeToString(id[:16])}
		_, err := js.PublishMsg(ctx, msg)
		return err
	})
}
