package offload_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/offload"
)

// readChunks reads r to its end in reads of n bytes, as a streaming
// consumer would, and returns what it got and the error that ended it.
func readChunks(r io.Reader, n int) ([]byte, error) {
	var out []byte
	buf := make([]byte, n)
	for {
		m, err := r.Read(buf)
		out = append(out, buf[:m]...)
		if err != nil {
			return out, err
		}
	}
}

// TestOpen: the reader of Open hands on the blob and ends with io.EOF
// only when the blob is the one the reference names; a blob altered,
// cut short or extended in the store ends with an IntegrityError, and an
// extended one never yields a byte past the reference's size.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 50_000) // 800 KB: several 256 KiB steps
	flipped := bytes.Clone(data)
	flipped[len(flipped)-1] ^= 1
	for _, tc := range []struct {
		name string
		// stored is what the store holds under the blob's key.
		stored []byte
		// want is the blob the reference names; nil means data.
		want    []byte
		shape   func(io.Reader) io.Reader
		chunk   int
		problem offload.Problem // "" means the blob verifies
		gotSize int64
	}{
		{name: "intact", stored: data, chunk: 64 << 10},
		{name: "intact, one byte reads", stored: data[:3000], want: data[:3000], chunk: 1},
		{name: "intact, data with EOF", stored: data, shape: iotest.DataErrReader, chunk: 32 << 10},
		{name: "intact, half reads", stored: data, shape: iotest.HalfReader, chunk: 1 << 20},
		{name: "tampered", stored: flipped, chunk: 64 << 10, problem: offload.ProblemHash, gotSize: int64(len(data))},
		{name: "tampered, data with EOF", stored: flipped, shape: iotest.DataErrReader, chunk: 7, problem: offload.ProblemHash, gotSize: int64(len(data))},
		{name: "truncated", stored: data[:len(data)-1], chunk: 64 << 10, problem: offload.ProblemTruncated, gotSize: int64(len(data) - 1)},
		{name: "truncated to nothing", stored: []byte{}, chunk: 64 << 10, problem: offload.ProblemTruncated, gotSize: 0},
		{name: "oversized", stored: append(bytes.Clone(data), '!'), chunk: 64 << 10, problem: offload.ProblemExtended, gotSize: -1},
		{name: "oversized, large reads", stored: append(bytes.Clone(data), data...), chunk: 4 << 20, problem: offload.ProblemExtended, gotSize: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := offload.NewMemStore()
			var store offload.Store = mem
			if tc.shape != nil {
				store = shapedStore{mem, tc.shape}
			}
			o, err := offload.New(store, &offload.Options{BaseURI: "mem://geodlq"})
			require.NoError(t, err)
			want := data
			if tc.want != nil {
				want = tc.want
			}
			ref, err := o.Put(ctx, want, offload.ExtGeoJSON)
			require.NoError(t, err)
			key, err := o.KeyFor(ref.URI)
			require.NoError(t, err)
			require.NoError(t, mem.Put(ctx, key, bytes.NewReader(tc.stored), int64(len(tc.stored))))

			rc, err := o.Open(ctx, ref)
			require.NoError(t, err)
			got, err := readChunks(rc, tc.chunk)
			require.NoError(t, rc.Close())
			require.LessOrEqual(t, int64(len(got)), ref.Size, "never a byte past the reference's size")
			require.True(t, bytes.Equal(tc.stored[:len(got)], got), "the bytes handed on are the store's, in order")
			if tc.problem == "" {
				require.ErrorIs(t, err, io.EOF)
				require.Equal(t, want, got)
				return
			}
			require.NotErrorIs(t, err, io.EOF)
			require.ErrorIs(t, err, offload.ErrIntegrity)
			var ie *offload.IntegrityError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, tc.problem, ie.Problem)
			require.Equal(t, tc.gotSize, ie.GotSize)
			require.Equal(t, ref.URI, ie.URI)
			// The error is sticky.
			_, again := rc.Read(make([]byte, 10))
			require.ErrorIs(t, again, offload.ErrIntegrity)

			// Fetch is Open read to the end: the same verdict.
			_, ferr := o.Fetch(ctx, ref)
			var fie *offload.IntegrityError
			require.ErrorAs(t, ferr, &fie)
			require.Equal(t, ie.Problem, fie.Problem)
			require.Equal(t, ie.GotSize, fie.GotSize)
		})
	}
}

// TestOpenRefusals: what Open refuses before or while asking the store.
func TestOpenRefusals(t *testing.T) {
	ctx := context.Background()
	mem := offload.NewMemStore()
	o, err := offload.New(mem, &offload.Options{MaxSize: 1 << 20})
	require.NoError(t, err)
	ref, err := o.Put(ctx, []byte(`{"type":"Point","coordinates":[1,2]}`), offload.ExtGeoJSON)
	require.NoError(t, err)
	missing := ref
	missing.SHA256 = strings.Repeat("0", 64)
	missing.URI = o.URI(o.Key(missing.SHA256, offload.ExtGeoJSON))
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		ref      func(offload.Ref) offload.Ref
		wantErr  error
		tooLarge bool
	}{
		{"claims more than MaxSize", ctx, func(r offload.Ref) offload.Ref { r.Size = 1<<20 + 1; return r }, offload.ErrIntegrity, true},
		{"negative size", ctx, func(r offload.Ref) offload.Ref { r.Size = -1; return r }, offload.ErrIntegrity, false},
		{"malformed hash", ctx, func(r offload.Ref) offload.Ref { r.SHA256 = strings.ToUpper(r.SHA256); return r }, offload.ErrIntegrity, false},
		{"URI names another hash", ctx, func(r offload.Ref) offload.Ref { r.SHA256 = missing.SHA256; return r }, offload.ErrIntegrity, false},
		{"URI outside the store", ctx, func(r offload.Ref) offload.Ref { r.URI = "file:///etc/" + r.SHA256 + ".geojson"; return r }, offload.ErrForbiddenURI, false},
		{"missing blob", ctx, func(offload.Ref) offload.Ref { return missing }, offload.ErrNotFound, false},
		{"context done", canceled, func(r offload.Ref) offload.Ref { return r }, context.Canceled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := o.Open(tc.ctx, tc.ref(ref))
			require.Nil(t, rc)
			require.ErrorIs(t, err, tc.wantErr)
			require.Equal(t, tc.tooLarge, errors.Is(err, classify.ErrTooLarge), "%v", err)
		})
	}
}

// TestOpenCanceled: a context ended mid-stream ends the reader with its
// error, not with io.EOF, and the error sticks.
func TestOpenCanceled(t *testing.T) {
	o, err := offload.New(offload.NewMemStore(), nil)
	require.NoError(t, err)
	data := bytes.Repeat([]byte("x"), 1<<20)
	ref, err := o.Put(context.Background(), data, offload.ExtJSON)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, err := o.Open(ctx, ref)
	require.NoError(t, err)
	defer rc.Close()
	buf := make([]byte, 64<<10)
	n, err := rc.Read(buf)
	require.NoError(t, err)
	require.Equal(t, len(buf), n)
	cancel()
	_, err = rc.Read(buf)
	require.ErrorIs(t, err, context.Canceled)
	_, err = io.ReadAll(rc)
	require.ErrorIs(t, err, context.Canceled)
}

// TestOpenClosed: a Read after Close fails rather than reading a closed
// store reader.
func TestOpenClosed(t *testing.T) {
	ctx := context.Background()
	o, err := offload.New(offload.NewMemStore(), nil)
	require.NoError(t, err)
	ref, err := o.Put(ctx, []byte("[1,2]"), offload.ExtGeoJSON)
	require.NoError(t, err)
	rc, err := o.Open(ctx, ref)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	n, err := rc.Read(make([]byte, 8))
	require.Zero(t, n)
	require.Error(t, err)
	require.NotErrorIs(t, err, io.EOF)
}

// TestOpenDoesNotAllocateFromTheClaim: a 1.5 KB blob whose reference
// claims 512 MiB is read (and reported truncated) for a few kilobytes.
func TestOpenDoesNotAllocateFromTheClaim(t *testing.T) {
	ctx := context.Background()
	o, err := offload.New(offload.NewMemStore(), nil)
	require.NoError(t, err)
	ref, err := o.Put(ctx, bytes.Repeat([]byte("[1,2],"), 250), offload.ExtGeoJSON)
	require.NoError(t, err)
	ref.Size = 512 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rc, err := o.Open(ctx, ref)
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, rc)
	runtime.ReadMemStats(&after)
	require.NoError(t, rc.Close())
	var ie *offload.IntegrityError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, offload.ProblemTruncated, ie.Problem)
	require.Equal(t, int64(1500), n)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated while opening and reading")
}

// TestNewVerifier: the verifier Open uses, over any reader.
func TestNewVerifier(t *testing.T) {
	data := []byte(`{"geometry":{"type":"Point","coordinates":[1,2]}}`)
	sum := sha256.Sum256(data)
	good := offload.Ref{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	for _, tc := range []struct {
		name    string
		in      []byte
		ref     offload.Ref
		problem offload.Problem
	}{
		{"intact", data, good, ""},
		{"altered", append(bytes.Clone(data[:len(data)-1]), ']'), good, offload.ProblemHash},
		{"short", data[:10], good, offload.ProblemTruncated},
		{"long", append(bytes.Clone(data), ' '), good, offload.ProblemExtended},
		{"negative size", data, offload.Ref{Size: -1, SHA256: good.SHA256}, offload.ProblemBadRef},
		{"malformed hash", data, offload.Ref{Size: good.Size, SHA256: "abc"}, offload.ProblemBadRef},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readChunks(offload.NewVerifier(bytes.NewReader(tc.in), tc.ref), 5)
			if tc.problem == "" {
				require.ErrorIs(t, err, io.EOF)
				require.Equal(t, data, got)
				return
			}
			var ie *offload.IntegrityError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, tc.problem, ie.Problem)
			require.LessOrEqual(t, int64(len(got)), max(tc.ref.Size, 0))
		})
	}
}
