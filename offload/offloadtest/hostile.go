package offloadtest

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
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/offload"
)

// FileHarness is implemented by the harness of a provider whose stores
// keep objects as files in a directory (offload.DirStore, blobstore over
// file://). The suite then plants special files and symbolic links next
// to the objects, as a hostile or careless neighbour of the directory
// would, and checks that the store refuses them.
type FileHarness interface {
	Harness
	// Path returns the file-system path at which store keeps the object
	// of key. The directory holding it may not exist yet.
	Path(store offload.Store, key string) string
}

// Staller is implemented by the harness of a provider that can make a
// store's own reads stall, as a stalled network stream does (an S3
// server that sends the headers and part of the body, then nothing).
type Staller interface {
	Harness
	// Stall makes every later Get of key in store deliver at most n bytes
	// of the object, then block until the Get's context ends or release
	// is called. The suite calls release before the test ends.
	Stall(ctx context.Context, store offload.Store, key string, n int) (release func(), err error)
}

// Time limits of the hostile-input tests.
const (
	// hostileDeadline is the context deadline given to an operation on a
	// hostile key: a store must not need it.
	hostileDeadline = 5 * time.Second
	// refusalBound is how long a store may take to refuse a special file.
	refusalBound = 2 * time.Second
	// blockedDeadline is the deadline of a Fetch whose read blocks.
	blockedDeadline = 300 * time.Millisecond
	// blockedBound is how long that Fetch may take to return in all.
	blockedBound = 3 * time.Second
)

// within runs fn on another goroutine and fails the test unless it
// returns within d; cleanup, if not nil, is then called to unblock it. fn
// checks with package assert (safe on any goroutine); the test stops
// after fn if one of its checks failed.
func within(t *testing.T, d time.Duration, what string, cleanup func(), fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		if cleanup != nil {
			cleanup()
		}
		<-done
		require.FailNow(t, what+" did not return in time", "bound %v", d)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// mustFile returns h as a FileHarness or skips the test, saying why.
func mustFile(t *testing.T, h Harness) FileHarness {
	t.Helper()
	fh, ok := h.(FileHarness)
	if !ok {
		t.Skip("not a file-backed store (the harness is no FileHarness): no special file or symbolic link can exist at a key")
	}
	return fh
}

func testCanceledEverywhere(t *testing.T, _ Harness, s offload.Store) {
	put(t, s, "c/obj", []byte("x"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Get(ctx, "c/obj")
	require.ErrorIs(t, err, context.Canceled, "Get with a done context")
	_, err = s.Exists(ctx, "c/obj")
	require.ErrorIs(t, err, context.Canceled, "Exists with a done context")
	require.ErrorIs(t, s.Delete(ctx, "c/obj"), context.Canceled, "Delete with a done context")
	got, err := get(t, s, "c/obj")
	require.NoError(t, err)
	require.Equal(t, "x", string(got), "a Delete with a done context removes nothing")
}

// listKeys returns every key the store's Lister reports under prefix, or
// nil when the store is no Lister.
func listKeys(t *testing.T, s offload.Store, prefix string) (keys []string, ok bool) {
	t.Helper()
	l, ok := s.(offload.Lister)
	if !ok {
		return nil, false
	}
	require.NoError(t, l.List(context.Background(), prefix, func(o offload.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}))
	return keys, true
}

// specialKind is a non-regular file planted at a key.
type specialKind struct {
	name, key   string
	replaceable bool // Put replaces it with an object
}

func testNotRegular(t *testing.T, h Harness, s offload.Store) {
	fh := mustFile(t, h)
	ctx := context.Background()
	put(t, s, "special/target.geojson", []byte("target bytes"))
	put(t, s, "special/dir/inside", []byte("x"))
	linkPath := fh.Path(s, "special/link.geojson")
	require.NoError(t, os.Symlink(filepath.Base(fh.Path(s, "special/target.geojson")), linkPath))
	kinds := []specialKind{
		{"directory", "special/dir", false},
		{"symbolic link to an object", "special/link.geojson", true},
	}
	fifoPath := fh.Path(s, "special/fifo.geojson")
	fifos := true
	switch err := mkfifo(fifoPath); {
	case errors.Is(err, errors.ErrUnsupported):
		fifos = false
		t.Log("no FIFOs on this system")
	default:
		require.NoError(t, err)
		t.Cleanup(func() { unblockFIFO(fifoPath) })
		kinds = append(kinds, specialKind{"FIFO", "special/fifo.geojson", true})
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			path := fh.Path(s, k.key)
			unblock := func() { unblockFIFO(path) }
			hctx, cancel := context.WithTimeout(ctx, hostileDeadline)
			defer cancel()
			within(t, refusalBound, "Get of a "+k.name, unblock, func() {
				rc, err := s.Get(hctx, k.key)
				if err == nil {
					_ = rc.Close()
				}
				assert.ErrorIs(t, err, offload.ErrNotRegular, "Get must refuse a %s at a key", k.name)
				assert.ErrorIs(t, err, offload.ErrNotFound, "a %s is not an object", k.name)
			})
			within(t, refusalBound, "Exists of a "+k.name, unblock, func() {
				ok, err := s.Exists(hctx, k.key)
				assert.NoError(t, err)
				assert.False(t, ok, "a %s is not an object", k.name)
			})
			within(t, refusalBound, "Delete of a "+k.name, unblock, func() {
				err := s.Delete(hctx, k.key)
				assert.ErrorIs(t, err, offload.ErrNotRegular, "Delete must refuse a %s", k.name)
				assert.ErrorIs(t, err, offload.ErrNotFound)
			})
			_, err := os.Lstat(path)
			require.NoError(t, err, "Delete must leave a %s alone", k.name)
			if keys, ok := listKeys(t, s, "special/"); ok {
				require.NotContains(t, keys, k.key, "List must report regular files only")
			}
			if !k.replaceable {
				require.Error(t, s.Put(hctx, k.key, bytes.NewReader([]byte("new")), 3), "Put over a %s", k.name)
				return
			}
			within(t, refusalBound, "Put over a "+k.name, unblock, func() {
				assert.NoError(t, s.Put(hctx, k.key, bytes.NewReader([]byte("new")), 3), "Put replaces a %s", k.name)
			})
			got, err := get(t, s, k.key)
			require.NoError(t, err)
			require.Equal(t, "new", string(got))
			st, err := os.Lstat(path)
			require.NoError(t, err)
			require.True(t, st.Mode().IsRegular(), "Put must replace the %s itself, not write through it", k.name)
		})
	}
	got, err := get(t, s, "special/target.geojson")
	require.NoError(t, err)
	require.Equal(t, "target bytes", string(got), "nothing is written through a symbolic link at a key")

	// A FIFO at the key of an offloaded blob: Fetch reports it missing at
	// once, whatever its deadline.
	if fifos {
		o := newOffloader(t, h, s)
		geom := []byte(`{"type":"Point","coordinates":[1,2]}`)
		sum := sha256.Sum256(geom)
		ref := offload.Ref{URI: o.URI(o.Key(hex.EncodeToString(sum[:]), offload.ExtGeoJSON)), Size: int64(len(geom)), SHA256: hex.EncodeToString(sum[:])}
		key, err := o.KeyFor(ref.URI)
		require.NoError(t, err)
		p := fh.Path(s, key)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o750))
		require.NoError(t, mkfifo(p))
		t.Cleanup(func() { unblockFIFO(p) })
		hctx, cancel := context.WithTimeout(ctx, hostileDeadline)
		defer cancel()
		within(t, refusalBound, "Offloader.Fetch of a FIFO blob", func() { unblockFIFO(p) }, func() {
			_, err := o.Fetch(hctx, ref)
			assert.ErrorIs(t, err, offload.ErrNotFound)
			assert.ErrorIs(t, err, offload.ErrNotRegular)
		})
		// Offloading the same geometry heals the key.
		within(t, refusalBound, "Offloader.Put over a FIFO blob", func() { unblockFIFO(p) }, func() {
			_, err := o.Put(hctx, geom, offload.ExtGeoJSON)
			assert.NoError(t, err)
		})
		got, err := o.Fetch(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, geom, got)
	}
}

func testSymlinkEscape(t *testing.T, h Harness, s offload.Store) {
	fh := mustFile(t, h)
	ctx := context.Background()
	outside := t.TempDir()
	secret := []byte("outside the store")
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.geojson"), secret, 0o600))
	put(t, s, "anchor", []byte("a")) // the store's directory exists
	require.NoError(t, os.Symlink(outside, fh.Path(s, "esc")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret.geojson"), fh.Path(s, "leak.geojson")))

	_, err := s.Get(ctx, "esc/secret.geojson")
	require.ErrorIs(t, err, offload.ErrOutsideStore, "Get through a directory link leading outside")
	require.ErrorIs(t, err, offload.ErrNotFound)
	_, err = s.Get(ctx, "leak.geojson")
	require.ErrorIs(t, err, offload.ErrNotRegular, "Get of a link at a key (leading outside)")
	require.ErrorIs(t, err, offload.ErrNotFound)
	ok, err := s.Exists(ctx, "esc/secret.geojson")
	require.False(t, ok, "Exists through a link leading outside")
	if err != nil {
		require.ErrorIs(t, err, offload.ErrOutsideStore)
	}
	ok, err = s.Exists(ctx, "leak.geojson")
	require.NoError(t, err)
	require.False(t, ok)

	for _, key := range []string{"esc/planted.geojson", "esc/sub/planted.geojson"} {
		err = s.Put(ctx, key, bytes.NewReader([]byte("planted")), 7)
		require.ErrorIs(t, err, offload.ErrOutsideStore, "Put(%q) through a link leading outside", key)
	}
	err = s.Delete(ctx, "esc/secret.geojson")
	require.ErrorIs(t, err, offload.ErrOutsideStore, "Delete through a link leading outside")
	require.ErrorIs(t, s.Delete(ctx, "leak.geojson"), offload.ErrNotRegular)
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing written outside the store")
	b, err := os.ReadFile(filepath.Join(outside, "secret.geojson"))
	require.NoError(t, err)
	require.Equal(t, secret, b, "nothing removed or changed outside the store")
	if keys, ok := listKeys(t, s, ""); ok {
		require.Equal(t, []string{"anchor"}, keys, "List must not report what lies behind links")
	}

	// The attack through an Offloader: a valid blob (right name, right
	// bytes, right hash) outside the store, reached by linking the
	// offloader's prefix directory there. Fetch must not return it.
	o := newOffloader(t, h, s)
	sum := sha256.Sum256(secret)
	ref := offload.Ref{URI: o.URI(o.Key(hex.EncodeToString(sum[:]), offload.ExtGeoJSON)), Size: int64(len(secret)), SHA256: hex.EncodeToString(sum[:])}
	key, err := o.KeyFor(ref.URI)
	require.NoError(t, err)
	top, _, _ := strings.Cut(key, "/")
	lure := filepath.Join(outside, "lure")
	require.NoError(t, os.MkdirAll(filepath.Join(lure, filepath.FromSlash(filepath.Dir(key[len(top)+1:]))), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(lure, filepath.FromSlash(key[len(top)+1:])), secret, 0o600))
	require.NoError(t, os.Symlink(lure, fh.Path(s, top)))
	_, err = o.Fetch(ctx, ref)
	require.ErrorIs(t, err, offload.ErrNotFound, "Fetch through a prefix linked outside")
	require.ErrorIs(t, err, offload.ErrOutsideStore)
	_, err = o.Put(ctx, []byte("geometry"), offload.ExtGeoJSON)
	require.ErrorIs(t, err, offload.ErrOutsideStore, "Offloader.Put through a prefix linked outside")
	entries, err = os.ReadDir(filepath.Join(lure, filepath.FromSlash(filepath.Dir(key[len(top)+1:]))))
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing written outside the store")

	// Links that stay inside the store are followed for directories.
	put(t, s, "real/x.geojson", []byte("inside"))
	require.NoError(t, os.Symlink("real", fh.Path(s, "alias")))
	got, err := get(t, s, "alias/x.geojson")
	require.NoError(t, err, "a directory link inside the store is followed")
	require.Equal(t, "inside", string(got))
	put(t, s, "alias/y.geojson", []byte("via alias"))
	got, err = get(t, s, "real/y.geojson")
	require.NoError(t, err)
	require.Equal(t, "via alias", string(got))
}

// sizeHidingStore hides the size the wrapped store's readers report, so
// that Fetch must grow its buffer with the data.
type sizeHidingStore struct{ offload.Store }

// Get returns the wrapped reader without its Size or Stat method.
func (s sizeHidingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return struct{ io.ReadCloser }{rc}, nil
}

// URI forwards to the wrapped store.
func (s sizeHidingStore) URI() string { return uriOf(s.Store) }

// uriOf returns the store's URI, or "" when it has no URI method.
func uriOf(s offload.Store) string {
	if u, ok := s.(interface{ URI() string }); ok {
		return u.URI()
	}
	return ""
}

// allocated returns how many bytes fn allocated on the heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func testClaimedSize(t *testing.T, h Harness, s offload.Store) {
	ctx := context.Background()
	geom := bytes.Repeat([]byte(`[12.5,-3.25],`), 120) // 1.5 KB
	const claim = 1 << 30
	const allocBound = 64 << 20
	for _, tc := range []struct {
		name  string
		store offload.Store
	}{
		{"reader reports its size", s},
		{"reader hides its size", sizeHidingStore{s}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := NewCountingStore(tc.store)
			o, err := offload.New(cs, &offload.Options{BaseURI: h.Capabilities().BaseURI, Prefix: "conformance/geom", MaxSize: 2 << 30})
			require.NoError(t, err)
			ref, err := o.Put(ctx, geom, offload.ExtGeoJSON)
			require.NoError(t, err)

			// A forged reference claiming 1 GiB for a 1.5 KB blob.
			forged := ref
			forged.Size = claim
			var ferr error
			n := allocated(func() { _, ferr = o.Fetch(ctx, forged) })
			var ie *offload.IntegrityError
			require.ErrorAs(t, ferr, &ie)
			require.Equal(t, offload.ProblemTruncated, ie.Problem, "%v", ferr)
			require.Equal(t, int64(len(geom)), ie.GotSize)
			require.Less(t, n, uint64(allocBound), "Fetch allocated %d bytes for a blob of %d claiming %d", n, len(geom), claim)

			for _, c := range []struct {
				size    int64
				problem offload.Problem
			}{
				{ref.Size - 1, offload.ProblemExtended},
				{ref.Size + 1, offload.ProblemTruncated},
				{0, offload.ProblemExtended},
			} {
				bad := ref
				bad.Size = c.size
				_, err := o.Fetch(ctx, bad)
				require.ErrorAs(t, err, &ie, "claimed %d for %d", c.size, ref.Size)
				require.Equal(t, c.problem, ie.Problem, "claimed %d for %d", c.size, ref.Size)
			}

			// Past the cap: refused before the store is read.
			gets := cs.Gets()
			bad := ref
			bad.Size = 2<<30 + 1
			_, err = o.Fetch(ctx, bad)
			require.ErrorIs(t, err, classify.ErrTooLarge)
			require.ErrorIs(t, err, offload.ErrIntegrity)
			require.Equal(t, gets, cs.Gets(), "a size past MaxSize must not reach the store")

			got, err := o.Fetch(ctx, ref)
			require.NoError(t, err)
			require.Equal(t, geom, got)
		})
	}
	small, err := offload.New(s, &offload.Options{BaseURI: h.Capabilities().BaseURI, Prefix: "conformance/geom", MaxSize: 1024})
	require.NoError(t, err)
	_, err = small.Put(ctx, geom, offload.ExtGeoJSON)
	require.ErrorIs(t, err, classify.ErrTooLarge, "Offloader.Put past MaxSize")
}

// stallingStore wraps a store: its readers deliver the first n bytes of
// the object, then block in Read, ignoring every context, until release
// is closed. It is the worst store a Fetch can meet.
type stallingStore struct {
	offload.Store
	n       int
	release chan struct{}
}

// Get returns a stalling reader over the wrapped store's object.
func (s *stallingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return &stallingReader{rc: rc, left: s.n, release: s.release}, nil
}

// URI forwards to the wrapped store.
func (s *stallingStore) URI() string { return uriOf(s.Store) }

type stallingReader struct {
	rc      io.ReadCloser
	left    int
	release chan struct{}
}

// Read delivers up to left bytes, then blocks until release.
func (r *stallingReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		<-r.release
		return 0, errors.New("offloadtest: stalled read released")
	}
	n, err := r.rc.Read(p[:min(len(p), r.left)])
	r.left -= n
	return n, err
}

// Close closes the wrapped reader.
func (r *stallingReader) Close() error { return r.rc.Close() }

func testFetchBlocked(t *testing.T, h Harness, s offload.Store) {
	ctx := context.Background()
	geom := bytes.Repeat([]byte(`[1.25,2.5],`), 10_000)
	o := newOffloader(t, h, s)
	ref, err := o.Put(ctx, geom, offload.ExtGeoJSON)
	require.NoError(t, err)

	t.Run("reader ignoring its context", func(t *testing.T) {
		release := make(chan struct{})
		var once sync.Once
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		stalled := &stallingStore{Store: s, n: 1024, release: release}
		so, err := offload.New(stalled, &offload.Options{BaseURI: h.Capabilities().BaseURI, Prefix: "conformance/geom"})
		require.NoError(t, err)
		for _, end := range []string{"deadline", "cancel"} {
			var fctx context.Context
			var cancel context.CancelFunc
			want := context.DeadlineExceeded
			if end == "deadline" {
				fctx, cancel = context.WithTimeout(ctx, blockedDeadline)
			} else {
				fctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(blockedDeadline, cancel)
				want = context.Canceled
			}
			start := time.Now()
			within(t, blockedBound, "Fetch with a blocked read ("+end+")", func() { once.Do(func() { close(release) }) }, func() {
				_, err := so.Fetch(fctx, ref)
				assert.ErrorIs(t, err, want, "Fetch must return when its context ends")
			})
			cancel()
			require.GreaterOrEqual(t, time.Since(start), blockedDeadline/2, "Fetch returned before the context ended: was the read blocked?")
		}
	})

	st, ok := h.(Staller)
	if !ok {
		return
	}
	t.Run("store's own stalled read", func(t *testing.T) {
		key, err := o.KeyFor(ref.URI)
		require.NoError(t, err)
		release, err := st.Stall(ctx, s, key, 1024)
		require.NoError(t, err)
		t.Cleanup(release)
		// The store's reader itself must give up when its context ends.
		gctx, cancel := context.WithTimeout(ctx, blockedDeadline)
		defer cancel()
		within(t, blockedBound, "Read of a stalled object", release, func() {
			rc, err := s.Get(gctx, key)
			if err != nil {
				assert.Error(t, gctx.Err(), "Get failed before its context ended: %v", err)
				return
			}
			defer rc.Close()
			n, err := io.Copy(io.Discard, rc)
			assert.Error(t, err, "a stalled read must fail when its context ends")
			assert.Less(t, n, int64(len(geom)))
		})
		fctx, cancel := context.WithTimeout(ctx, blockedDeadline)
		defer cancel()
		within(t, blockedBound, "Fetch of a stalled object", release, func() {
			_, err := o.Fetch(fctx, ref)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
		})
	})
}
