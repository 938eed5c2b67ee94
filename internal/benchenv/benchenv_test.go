package benchenv_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/benchenv"
)

func TestMessagesAreRealEnvelopes(t *testing.T) {
	s := benchenv.New(t)
	pad, err := benchenv.Pad()
	require.NoError(t, err)
	for _, i := range []int{0, 1, 12_345, 1 << 40} {
		m := s.Message(i)
		require.Len(t, m.Body, benchenv.EnvelopeBytes)
		env, want, err := benchenv.BuildEnvelope(pad, i)
		require.NoError(t, err)
		require.Equal(t, string(want), string(m.Body), "message %d is what the builder makes", i)
		require.Equal(t, broker.Headers(env), m.Headers)
		require.Equal(t, benchenv.MessageKey, string(m.Key))

		got, err := envelope.Decode(m.Body)
		require.NoError(t, err)
		require.NoError(t, got.Validate())
		require.Equal(t, benchenv.Key(i), got.IdempotencyKey)
		require.Equal(t, got, m.Envelope, "the carried envelope is the body's")
		require.Equal(t, env, m.Envelope, "and the builder's")
		require.Equal(t, classify.ClassInvalidGeometry, got.FailureClass)
		require.Equal(t, 4326, broker.EPSGOf(got))
		restored, err := got.Restore(t.Context(), nil)
		require.NoError(t, err)
		require.Equal(t, s.Payload(), restored)
	}
	require.NotEqual(t, s.Body(1), s.Body(2))
	require.Len(t, s.Headers(3), len(s.Headers(4)))
}

func TestName(t *testing.T) {
	a, b := benchenv.Name("bench"), benchenv.Name("bench")
	require.NotEqual(t, a, b)
	require.Regexp(t, `^bench-[0-9a-f]{12}$`, a)
}
