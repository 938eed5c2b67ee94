package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
)

// The Processor hands adapters the envelope it built (Message.Envelope) so
// they need not decode the body again; that is only sound if the built
// envelope is exactly what decoding the body gives.
func TestBuiltEnvelopeEqualsDecodedBody(t *testing.T) {
	ins := append(brokertest.SampleInputs(), brokertest.FilterInputs()...)
	big := ins[0]
	big.Payload = []byte(strings.Repeat("not json, and long enough to be offloaded ", 100))
	ins = append(ins, big)
	// Offloading everything (geometry, then the payload, to fit 1,400 bytes)
	// fills the envelope's pointer fields too.
	off, err := offload.New(offload.NewMemStore(), &offload.Options{Threshold: 1})
	require.NoError(t, err)
	geomOff, payloadOff := 0, 0
	for i := range 2 * len(ins) {
		in := ins[i%len(ins)]
		opts := &envelope.BuilderOptions{Now: func() time.Time { return in.At.In(time.FixedZone("X", 3600)) }}
		maxBytes := 0
		if i >= len(ins) {
			opts.Offloader, maxBytes = off, 1400
		}
		b, err := envelope.NewBuilder(opts)
		require.NoError(t, err)
		built, body, err := b.Build(context.Background(), envelope.Input{
			Payload: in.Payload, IdempotencyKey: in.IdempotencyKey, Err: in.Err,
			Attempts: 2, FirstSeenAt: in.At.Add(-time.Second), Source: in.Source, MaxBytes: maxBytes,
		})
		require.NoError(t, err, "input %d", i)
		if built.Geometry.OffloadURI != "" {
			geomOff++
		}
		if built.RawPayloadOffloadURI != "" {
			payloadOff++
		}
		decoded, err := envelope.Decode(body)
		require.NoError(t, err, "input %d", i)
		if built.Source != nil && built.Source.Timestamp != nil {
			// The same instant; JSON keeps the offset, not the *Location.
			require.True(t, built.Source.Timestamp.Equal(*decoded.Source.Timestamp), "input %d", i)
			decoded.Source.Timestamp = built.Source.Timestamp
		}
		require.Equal(t, built, decoded, "input %d: built and decoded envelopes differ", i)

		m := &broker.Message{Body: body, Envelope: built}
		got, err := broker.EnvelopeOf(m)
		require.NoError(t, err)
		require.Same(t, built, got, "the carried envelope is used")
		m.Envelope = nil
		got, err = broker.EnvelopeOf(m)
		require.NoError(t, err)
		require.Equal(t, decoded, got, "without one, the body is decoded")
	}
	require.Positive(t, geomOff, "some geometries were offloaded")
	require.Positive(t, payloadOff, "some payloads were offloaded")
	_, err = broker.EnvelopeOf(&broker.Message{Body: []byte(`{"schema_version":"dlq.v9"}`)})
	require.ErrorIs(t, err, envelope.ErrUnsupportedVersion)
	_, err = broker.EnvelopeOf(nil)
	require.Error(t, err)
}
