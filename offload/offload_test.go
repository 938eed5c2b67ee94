package offload_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/offloadtest"
)

func TestValidKey(t *testing.T) {
	for _, k := range []string{"a", "geodlq/" + strings.Repeat("ab", 32) + ".geojson", "A-b_c.d/e", "a.", "x/y.z/w"} {
		require.True(t, offload.ValidKey(k), k)
	}
	for _, k := range offloadtest.BadKeys {
		require.False(t, offload.ValidKey(k), "%q", k)
	}
}

func TestNewOptions(t *testing.T) {
	mem := offload.NewMemStore()
	o, err := offload.New(mem, nil)
	require.NoError(t, err)
	require.Equal(t, "mem://geodlq", o.BaseURI())
	require.Equal(t, offload.DefaultPrefix, o.Prefix())
	require.Equal(t, offload.DefaultThreshold, o.Threshold())
	require.Equal(t, 262144, offload.DefaultThreshold)
	require.Same(t, offload.Store(mem), o.Store())

	o, err = offload.New(mem, &offload.Options{BaseURI: "s3://dlq-geom/", Prefix: "2026/dlq", Threshold: 10})
	require.NoError(t, err)
	require.Equal(t, "s3://dlq-geom", o.BaseURI())
	require.Equal(t, 10, o.Threshold())
	require.Equal(t, "s3://dlq-geom/2026/dlq/x.json", o.URI(o.Key("x", "json")))

	_, err = offload.New(nil, nil)
	require.Error(t, err)
	_, err = offload.New(offloadtest.NewCountingStore(struct{ offload.Store }{mem}), nil)
	require.Error(t, err, "a store without a URI needs BaseURI")
	for _, base := range []string{"nope", "://x", "S3://x", "s3://a b", "s3://x?y", "s3://x#y", "s3://x/%2e", "s3://x/%2F", "s3://x/%5c", "s3://x/%zz", "s3://x/%4", "s3://x/../y", "s3://x//y", `s3://x\y`, "1s://x"} {
		_, err = offload.New(mem, &offload.Options{BaseURI: base})
		require.Error(t, err, base)
	}
	for _, prefix := range []string{"/abs", "../up", "a//b", "a/"} {
		_, err = offload.New(mem, &offload.Options{Prefix: prefix})
		require.ErrorIs(t, err, offload.ErrInvalidKey, prefix)
	}
	d, err := offload.NewDirStore(t.TempDir())
	require.NoError(t, err)
	defer d.Close()
	o, err = offload.New(d, nil)
	require.NoError(t, err)
	require.Equal(t, "file://"+filepath.ToSlash(d.Dir()), o.BaseURI())
}

func TestPutFetch(t *testing.T) {
	ctx := context.Background()
	cs := offloadtest.NewCountingStore(offload.NewMemStore())
	o, err := offload.New(cs, &offload.Options{BaseURI: "s3://dlq-geom", Prefix: "test"})
	require.NoError(t, err)
	geom := []byte("{\"type\": \"Point\",\n \"coordinates\": [1.0, 2e0]}")
	ref, err := o.Put(ctx, geom, offload.ExtGeoJSON)
	require.NoError(t, err)
	sum := sha256.Sum256(geom)
	require.Equal(t, offload.Ref{
		URI:    "s3://dlq-geom/test/" + hex.EncodeToString(sum[:]) + ".geojson",
		Size:   int64(len(geom)),
		SHA256: hex.EncodeToString(sum[:]),
	}, ref)
	got, err := o.Fetch(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, geom, got, "exact bytes, not a re-serialisation")

	_, err = o.Put(ctx, geom, "exe")
	require.Error(t, err)

	// Empty blob round trip.
	ref0, err := o.Put(ctx, nil, offload.ExtJSON)
	require.NoError(t, err)
	got, err = o.Fetch(ctx, ref0)
	require.NoError(t, err)
	require.Empty(t, got)

	// Inconsistent refs are refused before the store is read.
	gets := cs.Gets()
	for _, bad := range []offload.Ref{
		{URI: ref.URI, Size: -1, SHA256: ref.SHA256},
		{URI: ref.URI, Size: offload.DefaultMaxSize + 1, SHA256: ref.SHA256},
		{URI: ref.URI, Size: ref.Size, SHA256: strings.ToUpper(ref.SHA256)},
		{URI: ref.URI, Size: ref.Size, SHA256: ref0.SHA256},
	} {
		_, err := o.Fetch(ctx, bad)
		var ie *offload.IntegrityError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, offload.ProblemBadRef, ie.Problem)
		require.ErrorIs(t, err, offload.ErrIntegrity)
		require.Contains(t, err.Error(), "bad_ref")
	}
	require.Equal(t, gets, cs.Gets())
}

func TestDirStoreWithSpaceInPath(t *testing.T) {
	ctx := context.Background()
	d, err := offload.NewDirStore(filepath.Join(t.TempDir(), "dead letters"))
	require.NoError(t, err)
	defer d.Close()
	o, err := offload.New(d, nil)
	require.NoError(t, err)
	require.Contains(t, o.BaseURI(), "dead%20letters")
	ref, err := o.Put(ctx, []byte(`{"type":"Point","coordinates":[0,0]}`), offload.ExtGeoJSON)
	require.NoError(t, err)
	got, err := o.Fetch(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, `{"type":"Point","coordinates":[0,0]}`, string(got))
	bad := ref
	bad.URI = strings.Replace(ref.URI, "/geodlq/", "/geodlq/%2e%2e/", 1)
	_, err = o.Fetch(ctx, bad)
	require.ErrorIs(t, err, offload.ErrForbiddenURI)
}

func TestMaxSize(t *testing.T) {
	ctx := context.Background()
	o, err := offload.New(offload.NewMemStore(), &offload.Options{MaxSize: 4})
	require.NoError(t, err)
	_, err = o.Put(ctx, []byte("12345"), offload.ExtJSON)
	require.ErrorIs(t, err, classify.ErrTooLarge)
	ref, err := o.Put(ctx, []byte("1234"), offload.ExtJSON)
	require.NoError(t, err)
	for _, tc := range []struct {
		size     int64
		tooLarge bool
	}{{5, true}, {-1, false}, {3, false}} {
		bad := ref
		bad.Size = tc.size
		_, err = o.Fetch(ctx, bad)
		require.ErrorIs(t, err, offload.ErrIntegrity, "size %d", tc.size)
		require.Equal(t, tc.tooLarge, errors.Is(err, classify.ErrTooLarge), "size %d: %v", tc.size, err)
	}
}

// A store whose reader reports a size other than the object's, and one
// that reports no progress: Fetch trusts neither.
type lyingStore struct {
	offload.Store
	size  int64
	stuck bool
}

type lyingReader struct {
	io.ReadCloser
	size  int64
	stuck bool
}

func (r lyingReader) Size() int64 { return r.size }

func (r lyingReader) Read(p []byte) (int, error) {
	if r.stuck {
		return 0, nil
	}
	return r.ReadCloser.Read(p)
}

func (s lyingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return lyingReader{rc, s.size, s.stuck}, nil
}

func TestFetchDoesNotTrustTheReaderSize(t *testing.T) {
	ctx := context.Background()
	mem := offload.NewMemStore()
	data := bytes.Repeat([]byte("0123456789"), 100_000)
	for _, tc := range []struct {
		name    string
		store   lyingStore
		wantErr error
	}{
		{"reports fewer bytes", lyingStore{Store: mem, size: 10}, nil},
		{"reports more bytes", lyingStore{Store: mem, size: 1 << 40}, nil},
		{"reports a negative size", lyingStore{Store: mem, size: -5}, nil},
		{"never makes progress", lyingStore{Store: mem, size: 0, stuck: true}, io.ErrNoProgress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := offload.New(tc.store, &offload.Options{BaseURI: "mem://geodlq"})
			require.NoError(t, err)
			ref, err := o.Put(ctx, data, offload.ExtJSON)
			require.NoError(t, err)
			got, err := o.Fetch(ctx, ref)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, data, got)
		})
	}
}

// shapedStore hands out readers of every legal shape: the last bytes
// with io.EOF, one byte at a time, half reads, timeouts that are not.
type shapedStore struct {
	offload.Store
	shape func(io.Reader) io.Reader
}

func (s shapedStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{s.shape(rc), rc}, nil
}

func TestFetchReaderShapes(t *testing.T) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("abcdefghij"), 70_000)
	mem := offload.NewMemStore()
	for _, tc := range []struct {
		name  string
		shape func(io.Reader) io.Reader
	}{
		{"data with EOF", iotest.DataErrReader},
		{"one byte", iotest.OneByteReader},
		{"half", iotest.HalfReader},
		{"data with EOF, one byte", func(r io.Reader) io.Reader { return iotest.DataErrReader(iotest.OneByteReader(r)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := offload.New(shapedStore{mem, tc.shape}, &offload.Options{BaseURI: "mem://geodlq"})
			require.NoError(t, err)
			ref, err := o.Put(ctx, data, offload.ExtJSON)
			require.NoError(t, err)
			got, err := o.Fetch(ctx, ref)
			require.NoError(t, err)
			require.Equal(t, data, got)
			for _, c := range []struct {
				size    int64
				problem offload.Problem
			}{{ref.Size - 1, offload.ProblemExtended}, {ref.Size + 1, offload.ProblemTruncated}} {
				bad := ref
				bad.Size = c.size
				_, err := o.Fetch(ctx, bad)
				var ie *offload.IntegrityError
				require.ErrorAs(t, err, &ie)
				require.Equal(t, c.problem, ie.Problem)
			}
		})
	}
}

func TestFetchCanceled(t *testing.T) {
	o, err := offload.New(offload.NewMemStore(), nil)
	require.NoError(t, err)
	ref, err := o.Put(context.Background(), []byte("x"), offload.ExtJSON)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = o.Fetch(ctx, ref)
	require.ErrorIs(t, err, context.Canceled)
}

func TestKeyForHostileURIs(t *testing.T) {
	o, err := offload.New(offload.NewMemStore(), &offload.Options{BaseURI: "s3://dlq-geom", Prefix: "2026/dlq"})
	require.NoError(t, err)
	h := strings.Repeat("0123456789abcdef", 4)
	good := "s3://dlq-geom/2026/dlq/" + h + ".geojson"
	key, err := o.KeyFor(good)
	require.NoError(t, err)
	require.Equal(t, "2026/dlq/"+h+".geojson", key)
	key, err = o.KeyFor("s3://dlq-geom/2026/dlq/" + h + ".json")
	require.NoError(t, err)
	require.Equal(t, "2026/dlq/"+h+".json", key)

	hostile := []struct{ name, uri string }{
		{"empty", ""},
		{"other scheme", "gs://dlq-geom/2026/dlq/" + h + ".geojson"},
		{"file scheme", "file:///etc/passwd"},
		{"upper-case scheme", "S3://dlq-geom/2026/dlq/" + h + ".geojson"},
		{"other bucket", "s3://other-bucket/2026/dlq/" + h + ".geojson"},
		{"bucket prefix trick", "s3://dlq-geom-evil/2026/dlq/" + h + ".geojson"},
		{"userinfo host", "s3://dlq-geom@evil/2026/dlq/" + h + ".geojson"},
		{"other prefix", "s3://dlq-geom/2025/dlq/" + h + ".geojson"},
		{"no prefix", "s3://dlq-geom/" + h + ".geojson"},
		{"dot-dot", "s3://dlq-geom/2026/dlq/../../secrets/" + h + ".geojson"},
		{"dot-dot name", "s3://dlq-geom/2026/dlq/.."},
		{"dot segment", "s3://dlq-geom/2026/dlq/./" + h + ".geojson"},
		{"absolute path", "/etc/passwd"},
		{"absolute key", "/2026/dlq/" + h + ".geojson"},
		{"percent dot-dot", "s3://dlq-geom/2026/dlq/%2e%2e/%2e%2e/" + h + ".geojson"},
		{"percent slash", "s3://dlq-geom/2026/dlq%2f" + h + ".geojson"},
		{"percent-encoded hex", "s3://dlq-geom/2026/dlq/%30" + h[1:] + ".geojson"},
		{"double slash", "s3://dlq-geom//2026/dlq/" + h + ".geojson"},
		{"double slash in prefix", "s3://dlq-geom/2026//dlq/" + h + ".geojson"},
		{"backslash", `s3://dlq-geom/2026/dlq\` + h + ".geojson"},
		{"backslash traversal", `s3://dlq-geom/2026/dlq/..\..\` + h + ".geojson"},
		{"NUL", "s3://dlq-geom/2026/dlq/" + h + ".geojson\x00.txt"},
		{"newline", "s3://dlq-geom/2026/dlq/" + h + ".geojson\n"},
		{"query", good + "?versionId=1"},
		{"fragment", good + "#x"},
		{"sub directory", "s3://dlq-geom/2026/dlq/sub/" + h + ".geojson"},
		{"upper-case hex", "s3://dlq-geom/2026/dlq/" + strings.ToUpper(h) + ".geojson"},
		{"short hash", "s3://dlq-geom/2026/dlq/" + h[:63] + ".geojson"},
		{"long hash", "s3://dlq-geom/2026/dlq/" + h + "0.geojson"},
		{"other extension", "s3://dlq-geom/2026/dlq/" + h + ".exe"},
		{"double extension", "s3://dlq-geom/2026/dlq/" + h + ".geojson.json"},
		{"no extension", "s3://dlq-geom/2026/dlq/" + h},
		{"trailing slash", good + "/"},
		{"leading space", " " + good},
		{"unicode", "s3://dlq-geom/2026/dlq/" + h + ".geojsön"},
		{"huge", good + strings.Repeat("a", 1<<16)},
	}
	require.GreaterOrEqual(t, len(hostile), 15)
	for _, tc := range hostile {
		t.Run(tc.name, func(t *testing.T) {
			_, err := o.KeyFor(tc.uri)
			require.ErrorIs(t, err, offload.ErrForbiddenURI)
			var ue *offload.URIError
			require.ErrorAs(t, err, &ue)
			require.Equal(t, tc.uri, ue.URI)
			require.NotEmpty(t, ue.Reason)
			_, err = o.Fetch(context.Background(), offload.Ref{URI: tc.uri, Size: 1, SHA256: h})
			require.ErrorIs(t, err, offload.ErrForbiddenURI)
		})
	}
}

func TestDirStoreStaysInside(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(outside, 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600))
	s, err := offload.NewDirStore(filepath.Join(base, "store"))
	require.NoError(t, err)
	defer s.Close()
	// A symbolic link planted inside the store must not lead outside it.
	require.NoError(t, os.Symlink(outside, filepath.Join(base, "store", "link")))
	_, err = s.Get(ctx, "link/secret")
	require.Error(t, err)
	err = s.Put(ctx, "link/planted", bytes.NewReader([]byte("x")), 1)
	require.Error(t, err)
	_, err = os.Stat(filepath.Join(outside, "planted"))
	require.True(t, errors.Is(err, os.ErrNotExist), "nothing written outside the store")
	// Temporary files are cleaned up after a failed write.
	require.Error(t, s.Put(ctx, "t/obj", bytes.NewReader([]byte("abc")), 5))
	entries, err := os.ReadDir(filepath.Join(base, "store", "t"))
	require.NoError(t, err)
	require.Empty(t, entries)
	// A directory is not an object.
	ok, err := s.Exists(ctx, "t")
	require.NoError(t, err)
	require.False(t, ok)
	require.ErrorIs(t, s.Delete(ctx, "t"), offload.ErrNotFound)
}

func TestErrorsMessages(t *testing.T) {
	for _, e := range []error{
		&offload.IntegrityError{URI: "mem://x/y", Problem: offload.ProblemTruncated, WantSize: 10, GotSize: 3},
		&offload.IntegrityError{Problem: offload.ProblemExtended, WantSize: 10, GotSize: -1},
		&offload.IntegrityError{Problem: offload.ProblemHash, WantSHA256: "a", GotSHA256: "b"},
		&offload.URIError{URI: "x", Reason: "r"},
	} {
		require.NotEmpty(t, e.Error())
		require.True(t, errors.Is(e, offload.ErrIntegrity) || errors.Is(e, offload.ErrForbiddenURI))
	}
}

func TestMemStoreInspect(t *testing.T) {
	m := offload.NewMemStore()
	require.NoError(t, m.Put(context.Background(), "a/b", bytes.NewReader([]byte("x")), 1))
	require.Equal(t, 1, m.Len())
	require.Equal(t, []string{"a/b"}, m.Keys())
}

func TestMemStoreDoesNotTrustDeclaredSize(t *testing.T) {
	ctx := context.Background()
	m := offload.NewMemStore()
	for _, r := range []func() io.Reader{
		func() io.Reader { return bytes.NewReader([]byte("tiny")) },
		func() io.Reader { return io.LimitReader(strings.NewReader("tiny"), 4) },
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		require.ErrorIs(t, m.Put(ctx, "k", r(), 8<<30), offload.ErrSizeMismatch)
		runtime.ReadMemStats(&after)
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "Put allocated from the declared size")
	}
	require.Zero(t, m.Len())
	// A reader that yields more than declared is refused too.
	require.ErrorIs(t, m.Put(ctx, "k", io.LimitReader(strings.NewReader("toolong"), 7), 3), offload.ErrSizeMismatch)
	require.ErrorIs(t, m.Put(ctx, "k", bytes.NewReader([]byte("toolong")), 3), offload.ErrSizeMismatch)
	require.Zero(t, m.Len())
}
