package offload_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/offloadtest"
)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestSpanPutIsPut: whatever Run did, Finish stores what Put stores and
// returns the same Ref.
func TestSpanPutIsPut(t *testing.T) {
	ctx := context.Background()
	data := randomBytes(3<<20+999, 1)
	modes := []struct {
		name string
		run  func(p *offload.SpanPut) (wait func())
	}{
		{"without Run", func(*offload.SpanPut) func() { return func() {} }},
		{"Run concurrently", func(p *offload.SpanPut) func() {
			var wg sync.WaitGroup
			wg.Go(p.Run)
			return wg.Wait
		}},
		{"Run through the data first", func(p *offload.SpanPut) func() {
			var wg sync.WaitGroup
			wg.Go(p.Run)
			time.Sleep(50 * time.Millisecond) // Run hashes 3 MiB, then waits for the end
			return wg.Wait
		}},
	}
	for _, m := range modes {
		for _, span := range []struct{ start, end int }{
			{0, len(data)}, {0, 0}, {100, 100}, {100, 1 << 20}, {5, 2<<20 + 3}, {len(data) - 10, len(data)},
		} {
			want := offload.NewMemStore()
			o, err := offload.New(want, nil)
			require.NoError(t, err)
			wantRef, err := o.Put(ctx, data[span.start:span.end], offload.ExtGeoJSON)
			require.NoError(t, err)

			got := offloadtest.NewCountingStore(offload.NewMemStore())
			o2, err := offload.New(got, &offload.Options{BaseURI: o.BaseURI()})
			require.NoError(t, err)
			p, err := o2.NewSpanPut(data, span.start, offload.ExtGeoJSON)
			require.NoError(t, err)
			wait := m.run(p)
			ref, err := p.Finish(ctx, span.end)
			wait()
			require.NoError(t, err, "%s %v", m.name, span)
			require.Equal(t, wantRef, ref, "%s %v", m.name, span)
			b, err := o2.Fetch(ctx, ref)
			require.NoError(t, err)
			require.Equal(t, data[span.start:span.end], b)
			require.Equal(t, int64(1), got.Puts())
			// Deduplicated like Put.
			p, err = o2.NewSpanPut(data, span.start, offload.ExtGeoJSON)
			require.NoError(t, err)
			_, err = p.Finish(ctx, span.end)
			require.NoError(t, err)
			require.Equal(t, int64(1), got.Puts(), "an existing blob is not written again")
		}
	}
}

func TestSpanPutMisuse(t *testing.T) {
	ctx := context.Background()
	data := []byte(`{"geometry":{"type":"Point","coordinates":[1,2]}}`)
	o, err := offload.New(offload.NewMemStore(), &offload.Options{MaxSize: 20})
	require.NoError(t, err)
	_, err = o.NewSpanPut(data, -1, offload.ExtGeoJSON)
	require.Error(t, err)
	_, err = o.NewSpanPut(data, len(data)+1, offload.ExtGeoJSON)
	require.Error(t, err)
	_, err = o.NewSpanPut(data, 0, "exe")
	require.Error(t, err)

	p, err := o.NewSpanPut(data, 12, offload.ExtGeoJSON)
	require.NoError(t, err)
	_, err = p.Finish(ctx, 11)
	require.Error(t, err, "end before start")
	p, err = o.NewSpanPut(data, 12, offload.ExtGeoJSON)
	require.NoError(t, err)
	_, err = p.Finish(ctx, len(data)+1)
	require.Error(t, err, "end past the data")
	p, err = o.NewSpanPut(data, 0, offload.ExtGeoJSON)
	require.NoError(t, err)
	_, err = p.Finish(ctx, 21)
	require.ErrorIs(t, err, classify.ErrTooLarge)

	p, err = o.NewSpanPut(data, 12, offload.ExtGeoJSON)
	require.NoError(t, err)
	_, err = p.Finish(ctx, 30)
	require.NoError(t, err)
	_, err = p.Finish(ctx, 30)
	require.Error(t, err, "Finish twice")
	p.Cancel() // no effect after Finish

	p, err = o.NewSpanPut(data, 12, offload.ExtGeoJSON)
	require.NoError(t, err)
	p.Cancel()
	_, err = p.Finish(ctx, 30)
	require.Error(t, err, "Finish after Cancel")
	p.Run() // returns at once after Cancel
}

// TestSpanPutCancelStopsRun: Cancel ends a Run that is hashing, or
// waiting for the end once the data is hashed.
func TestSpanPutCancelStopsRun(t *testing.T) {
	o, err := offload.New(offload.NewMemStore(), nil)
	require.NoError(t, err)
	for _, delay := range []time.Duration{0, time.Millisecond, 50 * time.Millisecond} {
		data := bytes.Repeat([]byte("x"), 8<<20)
		p, err := o.NewSpanPut(data, 0, offload.ExtJSON)
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			p.Run()
			close(done)
		}()
		time.Sleep(delay)
		p.Cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			require.FailNow(t, "Run did not stop after Cancel")
		}

	}
}

func TestSpanPutStoreError(t *testing.T) {
	boom := errors.New("boom")
	o, err := offload.New(failingStore{offload.NewMemStore(), boom}, &offload.Options{BaseURI: "mem://x"})
	require.NoError(t, err)
	p, err := o.NewSpanPut([]byte("abc"), 0, offload.ExtJSON)
	require.NoError(t, err)
	_, err = p.Finish(context.Background(), 3)
	require.ErrorIs(t, err, boom)
}

type failingStore struct {
	offload.Store
	err error
}

func (s failingStore) Exists(context.Context, string) (bool, error) { return false, s.err }
