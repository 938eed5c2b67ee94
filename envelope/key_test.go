package envelope_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/idemkey"
	"github.com/geodlq/geodlq/offload"
)

// TestEventKeyCorpus builds an envelope for every event of the keyed
// corpus — every failure kind, with and without the producer's own key —
// and checks the key: the event's own, verbatim and not derived, when it
// has one; derived from the payload (and marked) when it has none; the
// caller's when it gives one. The key survives encoding, and
// IdempotencyKeyOf reads the same key Build records.
func TestEventKeyCorpus(t *testing.T) {
	ctx := context.Background()
	off, err := offload.New(offload.NewMemStore(), &offload.Options{BaseURI: "mem://keys", Threshold: 64 << 10})
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	keyed, derived := 0, 0
	for _, ev := range corpus.Keyed() {
		t.Run(ev.Name, func(t *testing.T) {
			payload := ev.Item.Payload
			cause := errors.New("failed")
			if !ev.Item.Valid() {
				cause = &classify.Error{Class: ev.Item.Class, Stage: ev.Item.Stage, Err: cause}
			}
			require.Equal(t, ev.Key, b.IdempotencyKeyOf(payload))

			env, data, err := b.Build(ctx, envelope.Input{Payload: payload, Err: cause})
			require.NoError(t, err)
			if ev.Key != "" {
				keyed++
				require.Equal(t, ev.Key, env.IdempotencyKey, "the event's own key, verbatim")
				require.False(t, env.IdempotencyKeyDerived)
			} else {
				derived++
				sum := sha256.Sum256(payload)
				require.Equal(t, idemkey.Derive(envelope.PayloadKeyNamespace, sum[:]), env.IdempotencyKey)
				require.True(t, env.IdempotencyKeyDerived)
			}
			dec, err := envelope.Decode(data)
			require.NoError(t, err)
			require.Equal(t, env.IdempotencyKey, dec.IdempotencyKey)
			require.Equal(t, env.IdempotencyKeyDerived, dec.IdempotencyKeyDerived)
			restored, err := dec.Restore(ctx, off)
			require.NoError(t, err)
			require.True(t, bytes.Equal(payload, restored), "byte-exact restore")

			// A key given by the caller (a header) wins, and is marked
			// derived only when the caller says so.
			env, _, err = b.Build(ctx, envelope.Input{Payload: payload, Err: cause, IdempotencyKey: "header-key"})
			require.NoError(t, err)
			require.Equal(t, "header-key", env.IdempotencyKey)
			require.False(t, env.IdempotencyKeyDerived)
			env, _, err = b.Build(ctx, envelope.Input{Payload: payload, Err: cause, IdempotencyKey: "idem:v1:caller", IdempotencyKeyDerived: true})
			require.NoError(t, err)
			require.Equal(t, "idem:v1:caller", env.IdempotencyKey)
			require.True(t, env.IdempotencyKeyDerived)
		})
	}
	require.Positive(t, keyed)
	require.Positive(t, derived)
}

// TestIdempotencyKeyPath reads the event's key where the Builder is told
// to, and only there; keys that cannot be carried are not keys.
func TestIdempotencyKeyPath(t *testing.T) {
	long := `"` + string(bytes.Repeat([]byte("k"), 65537)) + `"`
	for _, tc := range []struct {
		name, path, payload, want string
	}{
		{"default", "", `{"idempotency_key":"a","properties":{"idempotency_key":"b"}}`, "a"},
		{"nested", "/properties/idempotency_key", `{"idempotency_key":"a","properties":{"idempotency_key":"b"}}`, "b"},
		{"other member", "/key", `{"idempotency_key":"a","key":"c"}`, "c"},
		{"escaped pointer", "/a~1b", `{"a/b":"d"}`, "d"},
		{"number", "", `{"idempotency_key":-12.5e3}`, "-12.5e3"},
		{"bool", "", `{"idempotency_key":true}`, ""},
		{"object", "", `{"idempotency_key":{"v":"x"}}`, ""},
		{"array", "", `{"idempotency_key":["x"]}`, ""},
		{"minus infinity", "", `{"idempotency_key":-Infinity}`, ""},
		{"NaN", "", `{"idempotency_key":NaN}`, ""},
		{"too long", "", `{"idempotency_key":` + long + `}`, ""},
		{"trailing garbage", "", `{"idempotency_key":"a"} x`, ""},
		{"top-level array", "", `[{"idempotency_key":"a"}]`, ""},
		{"invalid UTF-8", "", "{\"idempotency_key\":\"a\xffb\"}", "a\uFFFDb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := envelope.NewBuilder(&envelope.BuilderOptions{IdempotencyKeyPath: tc.path})
			require.NoError(t, err)
			require.Equal(t, tc.want, b.IdempotencyKeyOf([]byte(tc.payload)))
			env, _, err := b.Build(context.Background(), envelope.Input{Payload: []byte(tc.payload)})
			require.NoError(t, err)
			require.Equal(t, tc.want == "", env.IdempotencyKeyDerived)
			if tc.want != "" {
				require.Equal(t, tc.want, env.IdempotencyKey)
			}
		})
	}
	for _, bad := range []string{"idempotency_key", "/a~2"} {
		_, err := envelope.NewBuilder(&envelope.BuilderOptions{IdempotencyKeyPath: bad})
		require.Error(t, err, bad)
	}
}
