package envelope_test

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
)

// TestOpenPayloadRestores: the stream is Restore's payload, byte for
// byte, for each place the payload can be (inline, geometry offloaded,
// whole payload offloaded).
func TestOpenPayloadRestores(t *testing.T) {
	ctx := context.Background()
	big := []byte(`{"geometry":{"type":"Point","coordinates":[1,2]},"properties":{"blob":"` + strings.Repeat("p", 300<<10) + `"}}`)
	for _, tc := range []struct {
		name      string
		threshold int // -1: no offloader
		payload   []byte
		maxBytes  int
		where     func(t *testing.T, e *envelope.Envelope)
	}{
		{"inline", -1, []byte(bowtie), 0, func(t *testing.T, e *envelope.Envelope) {
			require.Empty(t, e.Geometry.OffloadURI)
			require.Empty(t, e.RawPayloadOffloadURI)
		}},
		{"geometry offloaded", 1, seedMultiPoint(), 0, func(t *testing.T, e *envelope.Envelope) {
			require.NotEmpty(t, e.Geometry.OffloadURI)
		}},
		{"whole payload offloaded", 0, big, 256 << 10, func(t *testing.T, e *envelope.Envelope) {
			require.NotEmpty(t, e.RawPayloadOffloadURI)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var off *offload.Offloader
			var o envelope.Opener
			if tc.threshold >= 0 {
				off, _ = newOffloader(t, tc.threshold)
				o = off
			}
			_, data, err := newBuilder(t, off).Build(ctx, envelope.Input{Payload: tc.payload, IdempotencyKey: "k", MaxBytes: tc.maxBytes})
			require.NoError(t, err)
			e, err := envelope.Decode(data)
			require.NoError(t, err)
			tc.where(t, e)
			rc, err := e.OpenPayload(ctx, o)
			require.NoError(t, err)
			got, err := io.ReadAll(rc)
			require.NoError(t, err)
			require.NoError(t, rc.Close())
			require.Equal(t, tc.payload, got)
			var f envelope.Fetcher
			if off != nil {
				f = off
			}
			restored, err := e.Restore(ctx, f)
			require.NoError(t, err)
			require.Equal(t, restored, got)
		})
	}
}

// lyingOpener hands out ref.Size bytes of 'x' without verifying.
type lyingOpener struct{}

func (lyingOpener) Open(_ context.Context, ref offload.Ref) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(strings.Repeat("x", int(ref.Size)))), nil
}

// TestOpenPayloadIntegrity: a tampered blob or envelope fails the
// stream — at once when the envelope itself is inconsistent, at the end
// (an IntegrityError instead of io.EOF) when only the bytes can tell —
// and Restore fails the same records.
func TestOpenPayloadIntegrity(t *testing.T) {
	ctx := context.Background()
	payload := seedMultiPoint()
	off, _ := newOffloader(t, 1)
	_, data, err := newBuilder(t, off).Build(ctx, envelope.Input{Payload: payload, IdempotencyKey: "k"})
	require.NoError(t, err)
	fresh := func() *envelope.Envelope {
		e, err := envelope.Decode(data)
		require.NoError(t, err)
		return e
	}
	env := fresh()
	require.NotEmpty(t, env.Geometry.OffloadURI)
	key, err := off.KeyFor(env.Geometry.OffloadURI)
	require.NoError(t, err)
	rc, err := off.Store().Get(ctx, key)
	require.NoError(t, err)
	blob, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	store := func(t *testing.T, b []byte) {
		require.NoError(t, off.Store().Put(ctx, key, bytes.NewReader(b), int64(len(b))))
		t.Cleanup(func() { require.NoError(t, off.Store().Put(ctx, key, bytes.NewReader(blob), int64(len(blob)))) })
	}
	flipped := bytes.Clone(blob)
	flipped[len(flipped)/2] ^= 1

	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, e *envelope.Envelope)
		o      envelope.Opener
		// atOpen: OpenPayload itself fails (nothing streamed).
		atOpen  bool
		target  error
		problem offload.Problem
		uri     bool // the IntegrityError names the geometry blob
	}{
		{"blob tampered", func(t *testing.T, _ *envelope.Envelope) { store(t, flipped) }, off, false, offload.ErrIntegrity, offload.ProblemHash, true},
		{"blob truncated", func(t *testing.T, _ *envelope.Envelope) { store(t, blob[:len(blob)-1]) }, off, false, offload.ErrIntegrity, offload.ProblemTruncated, true},
		{"blob extended", func(t *testing.T, _ *envelope.Envelope) { store(t, append(bytes.Clone(blob), ' ')) }, off, false, offload.ErrIntegrity, offload.ProblemExtended, true},
		{"blob missing", func(t *testing.T, _ *envelope.Envelope) {
			require.NoError(t, off.Store().Delete(ctx, key))
			t.Cleanup(func() { require.NoError(t, off.Store().Put(ctx, key, bytes.NewReader(blob), int64(len(blob)))) })
		}, off, true, offload.ErrNotFound, "", false},
		{"raw payload altered", func(_ *testing.T, e *envelope.Envelope) { e.RawPayload[2] = 'X' }, off, false, offload.ErrIntegrity, offload.ProblemHash, false},
		{"$ref moved", func(_ *testing.T, e *envelope.Envelope) { e.Geometry.PayloadOffset-- }, off, true, offload.ErrIntegrity, offload.ProblemBadRef, false},
		{"byte size lies", func(_ *testing.T, e *envelope.Envelope) { e.Geometry.ByteSize++; e.PayloadSize++ }, off, false, offload.ErrIntegrity, offload.ProblemTruncated, true},
		{"lying opener", func(*testing.T, *envelope.Envelope) {}, lyingOpener{}, false, offload.ErrIntegrity, offload.ProblemHash, true},
		{"no opener", func(*testing.T, *envelope.Envelope) {}, nil, true, envelope.ErrNoFetcher, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := fresh()
			tc.tamper(t, e)
			rc, err := e.OpenPayload(ctx, tc.o)
			var got []byte
			if !tc.atOpen {
				require.NoError(t, err)
				got, err = io.ReadAll(rc)
				require.NoError(t, rc.Close())
				require.Less(t, len(got), len(payload)+1, "never more than payload_size")
			} else {
				require.Nil(t, rc)
			}
			require.ErrorIs(t, err, tc.target)
			if tc.problem != "" {
				var ie *offload.IntegrityError
				require.ErrorAs(t, err, &ie)
				require.Equal(t, tc.problem, ie.Problem)
				if tc.uri {
					require.Equal(t, e.Geometry.OffloadURI, ie.URI)
				} else {
					require.Empty(t, ie.URI)
				}
			}
			// Restore refuses the same record.
			if f, ok := tc.o.(envelope.Fetcher); ok {
				_, rerr := e.Restore(ctx, f)
				require.ErrorIs(t, rerr, tc.target)
			}
		})
	}

	t.Run("whole payload blob tampered", func(t *testing.T) {
		off, _ := newOffloader(t, 0)
		big := []byte(`{"geometry":{"type":"Point","coordinates":[1,2]},"properties":{"blob":"` + strings.Repeat("p", 300<<10) + `"}}`)
		_, data, err := newBuilder(t, off).Build(ctx, envelope.Input{Payload: big, IdempotencyKey: "k", MaxBytes: 256 << 10})
		require.NoError(t, err)
		e, err := envelope.Decode(data)
		require.NoError(t, err)
		key, err := off.KeyFor(e.RawPayloadOffloadURI)
		require.NoError(t, err)
		forged := bytes.Replace(big, []byte("ppp"), []byte("qqq"), 1)
		require.NoError(t, off.Store().Put(ctx, key, bytes.NewReader(forged), int64(len(forged))))
		rc, err := e.OpenPayload(ctx, off)
		require.NoError(t, err)
		defer rc.Close()
		_, err = io.Copy(io.Discard, rc)
		var ie *offload.IntegrityError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, offload.ProblemHash, ie.Problem)
		require.Equal(t, e.RawPayloadOffloadURI, ie.URI)
	})

	t.Run("context canceled mid-stream", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		rc, err := fresh().OpenPayload(cctx, off)
		require.NoError(t, err)
		defer rc.Close()
		_, err = io.ReadFull(rc, make([]byte, 1000))
		require.NoError(t, err)
		cancel()
		_, err = io.Copy(io.Discard, rc)
		require.ErrorIs(t, err, context.Canceled)
	})
}

// TestOpenPayloadMemory: streaming an 8 MB payload whose geometry is
// offloaded allocates a small fraction of it (Restore allocates it
// twice: the geometry blob and the assembled payload).
func TestOpenPayloadMemory(t *testing.T) {
	ctx := context.Background()
	var b strings.Builder
	b.WriteString(`{"event_id":"evt-huge","geometry":{"type":"LineString","coordinates":[`)
	for i := 0; b.Len() < 8<<20; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("[12.345678901234,45.678901234567]")
	}
	b.WriteString(`]}}`)
	payload := []byte(b.String())
	off, _ := newOffloader(t, 0)
	_, data, err := newBuilder(t, off).Build(ctx, envelope.Input{Payload: payload, IdempotencyKey: "k"})
	require.NoError(t, err)
	e, err := envelope.Decode(data)
	require.NoError(t, err)
	require.NotEmpty(t, e.Geometry.OffloadURI)

	measure := func(read func() (int64, error)) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		n, err := read()
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		require.Equal(t, int64(len(payload)), n)
		return after.TotalAlloc - before.TotalAlloc
	}
	streamed := measure(func() (int64, error) {
		rc, err := e.OpenPayload(ctx, off)
		if err != nil {
			return 0, err
		}
		defer rc.Close()
		return io.CopyBuffer(io.Discard, struct{ io.Reader }{rc}, make([]byte, 64<<10))
	})
	restored := measure(func() (int64, error) {
		b, err := e.Restore(ctx, off)
		return int64(len(b)), err
	})
	t.Logf("payload %d bytes: OpenPayload allocated %d bytes, Restore %d", len(payload), streamed, restored)
	require.Less(t, streamed, uint64(1<<20), "bytes allocated streaming the payload")
	require.Greater(t, restored, uint64(len(payload)), "the measure sees Restore hold the payload")
}
