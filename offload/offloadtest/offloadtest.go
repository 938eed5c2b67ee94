// Package offloadtest is a conformance suite for [offload.Store]
// implementations, in the style of gocloud.dev's drivertest: a provider
// writes a Harness that makes fresh stores, and a ~30-line
// conformance_test.go that calls [RunConformanceTests].
//
// # Requirements
//
// Every store must meet each of these; the suite has a test for each.
//
// The Store contract (RoundTrip, Replace, GetMissing, Delete,
// InvalidKeys, SizeMismatch, FailedPutStoresNothing, CanceledContext,
// CanceledContextEverywhere, ConcurrentSameKey, ConcurrentDifferentKeys,
// ReadersSeeWholeObjects, LargeBlobStreamed):
//   - Get returns the exact bytes Put stored; Put replaces an object; a
//     missing key is [offload.ErrNotFound] for Get and Delete and false
//     for Exists; a key prefix ("directory") is not an object.
//   - Every key [offload.ValidKey] refuses ([BadKeys]) is refused by every
//     method with [offload.ErrInvalidKey], before storage is touched.
//   - Put of a reader yielding more or fewer bytes than declared fails
//     with [offload.ErrSizeMismatch]; a failed Put (size, reader error,
//     done context) stores nothing and leaves the previous object intact.
//   - Every method fails with the context's error when its context is
//     already done, and changes nothing.
//   - Concurrent Puts of one key and of many keys all succeed; a reader
//     racing a replacement sees the old or the new object, never a mix.
//   - A 40 MiB object is streamed both ways (skipped, saying so, for a
//     store declaring a smaller Capabilities.MaxObjectSize or in -short).
//
// Through an [offload.Offloader] over the store (OffloaderDedupe,
// OffloaderIntegrity, OffloaderRefusesForeignURIs):
//   - identical blobs are written once; a truncated, emptied, extended or
//     altered blob is an [*offload.IntegrityError] with the right Problem;
//     a deleted blob is [offload.ErrNotFound]; URIs outside the offloader's
//     base and prefix never reach the store.
//
// Hostile and faulty storage (ClaimedSizeDiffers, FetchBlockedRead,
// NotRegularFiles, SymlinkEscape):
//   - A reference claiming 1 GiB for a 1.5 KB blob fails as truncated
//     after allocating far less than the claim (under 64 MiB), whether or
//     not the store's reader reports the object's size; a claim one byte
//     short or long is extended or truncated; a claim past MaxSize is
//     [classify.ErrTooLarge] (and an IntegrityError) without a Get, and
//     Offloader.Put past MaxSize is ErrTooLarge.
//   - A Fetch whose read blocks returns when its context ends (deadline or
//     cancel) with the context's error, even when the store's reader
//     ignores the context. When the harness is a [Staller], the store's
//     own reader, stalled mid-object by the backend, must fail once its
//     context ends, and so must a Fetch through it.
//   - File-backed stores (the harness is a [FileHarness]; the tests are
//     skipped, saying so, for the others): a FIFO, a directory and a
//     symbolic link at a key are not objects. Get refuses each within 2 s
//     under a 5 s deadline (so a FIFO is never opened for a blocking
//     read) with [offload.ErrNotRegular] and ErrNotFound, Exists reports
//     false, Delete refuses and leaves it, List (when the store is an
//     [offload.Lister]) does not report it, and Put replaces a FIFO or a
//     link itself (never writing through it) but fails on a directory. An
//     Offloader's Fetch of a blob key holding a FIFO is ErrNotFound at
//     once, and offloading the same bytes heals the key.
//   - No read, write or removal goes through a symbolic link that leads
//     outside the store's directory: Get, Put, Delete (and Exists, when it
//     errs) fail with [offload.ErrOutsideStore] for a key under a
//     directory link leading outside, and a link at a key is
//     ErrNotRegular wherever it points; nothing outside is created,
//     changed or listed. A genuine blob (right name, size and hash) placed
//     outside and reached by linking the offloader's prefix directory
//     there is not fetched. Directory links that stay inside the store are
//     followed.
//
// It also offers helpers for tests of code that offloads: [CountingStore]
// counts writes, [GeometryEvent] generates a large deterministic payload.
package offloadtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/offload"
)

// Harness makes stores for one provider.
type Harness interface {
	// MakeStore returns a fresh, empty store. It is called once per test.
	MakeStore(ctx context.Context) (offload.Store, error)
	// Tamper replaces the bytes stored under key in store with
	// mutate(old), behind the store's back where the provider can (by
	// writing the file directly, say), the way corruption happens in real
	// life. A harness without a back door may call [TamperViaStore].
	Tamper(ctx context.Context, store offload.Store, key string, mutate func([]byte) []byte) error
	// Capabilities declares what the provider supports.
	Capabilities() Capabilities
	// Close releases the harness's resources.
	Close()
}

// Capabilities declares what a provider supports; the suite skips the
// tests a provider cannot pass by design.
type Capabilities struct {
	// MaxObjectSize is the largest object the store holds; 0 means no
	// limit. Below 40 MiB the large-blob test is skipped.
	MaxObjectSize int64
	// BaseURI is the offloader base URI to test with; "" lets
	// [offload.New] choose (it then needs a store with a URI method).
	BaseURI string
}

// HarnessMaker makes a Harness for one test.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// TamperViaStore rewrites an object through the store's own Get and Put,
// for harnesses without a back door.
func TamperViaStore(ctx context.Context, store offload.Store, key string, mutate func([]byte) []byte) error {
	rc, err := store.Get(ctx, key)
	if err != nil {
		return err
	}
	old, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		return err
	}
	b := mutate(old)
	return store.Put(ctx, key, bytes.NewReader(b), int64(len(b)))
}

// RunConformanceTests runs the suite against the stores newHarness makes.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness, s offload.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Replace", testReplace},
		{"GetMissing", testGetMissing},
		{"Delete", testDelete},
		{"InvalidKeys", testInvalidKeys},
		{"SizeMismatch", testSizeMismatch},
		{"FailedPutStoresNothing", testFailedPut},
		{"CanceledContext", testCanceled},
		{"ConcurrentSameKey", testConcurrentSameKey},
		{"ConcurrentDifferentKeys", testConcurrentDifferentKeys},
		{"ReadersSeeWholeObjects", testAtomicReplace},
		{"LargeBlobStreamed", testLarge},
		{"OffloaderDedupe", testDedupe},
		{"OffloaderIntegrity", testIntegrity},
		{"OffloaderRefusesForeignURIs", testForeignURIs},
		{"CanceledContextEverywhere", testCanceledEverywhere},
		{"ClaimedSizeDiffers", testClaimedSize},
		{"FetchBlockedRead", testFetchBlocked},
		{"NotRegularFiles", testNotRegular},
		{"SymlinkEscape", testSymlinkEscape},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			h, err := newHarness(ctx, t)
			require.NoError(t, err)
			defer h.Close()
			s, err := h.MakeStore(ctx)
			require.NoError(t, err)
			tc.fn(t, h, s)
		})
	}
}

func put(t *testing.T, s offload.Store, key string, b []byte) {
	t.Helper()
	require.NoError(t, s.Put(context.Background(), key, bytes.NewReader(b), int64(len(b))))
}

func get(t *testing.T, s offload.Store, key string) ([]byte, error) {
	t.Helper()
	rc, err := s.Get(context.Background(), key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func testRoundTrip(t *testing.T, _ Harness, s offload.Store) {
	ctx := context.Background()
	for _, tc := range []struct{ key, body string }{
		{"a", "x"},
		{"geodlq/obj.geojson", `{"type":"Point","coordinates":[1,2]}`},
		{"deep/er/pre-fix_1/obj.json", "\x00\xff binary \r\n"},
		{"empty", ""},
	} {
		ok, err := s.Exists(ctx, tc.key)
		require.NoError(t, err)
		require.False(t, ok, "fresh store must be empty")
		put(t, s, tc.key, []byte(tc.body))
		ok, err = s.Exists(ctx, tc.key)
		require.NoError(t, err)
		require.True(t, ok)
		got, err := get(t, s, tc.key)
		require.NoError(t, err)
		require.Equal(t, tc.body, string(got), "Get must return the exact bytes Put stored")
	}
}

func testReplace(t *testing.T, _ Harness, s offload.Store) {
	put(t, s, "k", []byte("first version, longer"))
	put(t, s, "k", []byte("second"))
	got, err := get(t, s, "k")
	require.NoError(t, err)
	require.Equal(t, "second", string(got), "Put must replace the object, not append or merge")
}

func testGetMissing(t *testing.T, _ Harness, s offload.Store) {
	ctx := context.Background()
	_, err := s.Get(ctx, "nope/missing.json")
	require.ErrorIs(t, err, offload.ErrNotFound, "Get of a missing key must wrap ErrNotFound")
	ok, err := s.Exists(ctx, "nope/missing.json")
	require.NoError(t, err, "Exists of a missing key is not an error")
	require.False(t, ok)
	require.ErrorIs(t, s.Delete(ctx, "nope/missing.json"), offload.ErrNotFound, "Delete of a missing key must wrap ErrNotFound")
	put(t, s, "dir/obj", []byte("x"))
	_, err = s.Get(ctx, "dir")
	require.ErrorIs(t, err, offload.ErrNotFound, "a key prefix is not an object")
}

func testDelete(t *testing.T, _ Harness, s offload.Store) {
	ctx := context.Background()
	put(t, s, "p/a", []byte("a"))
	put(t, s, "p/b", []byte("b"))
	require.NoError(t, s.Delete(ctx, "p/a"))
	_, err := s.Get(ctx, "p/a")
	require.ErrorIs(t, err, offload.ErrNotFound)
	ok, err := s.Exists(ctx, "p/a")
	require.NoError(t, err)
	require.False(t, ok)
	got, err := get(t, s, "p/b")
	require.NoError(t, err)
	require.Equal(t, "b", string(got), "Delete must remove only its key")
	require.ErrorIs(t, s.Delete(ctx, "p/a"), offload.ErrNotFound)
}

// BadKeys are keys every store must refuse: each could address something
// outside the store's namespace or be normalised differently by different
// backends.
var BadKeys = []string{
	"", "/", "/etc/passwd", "../x", "a/../../x", "a/./b", "./a", "a//b", "a/", ".hidden", "a/.tmp-x",
	`a\b`, `..\x`, "a b", "a\x00b", "a\nb", "a%2e%2e/b", "%2e%2e", "a?b", "a#b", "a:b", "é", "a\x7f",
	string(make([]byte, offload.MaxKeyLen+1)),
}

func testInvalidKeys(t *testing.T, _ Harness, s offload.Store) {
	ctx := context.Background()
	for _, key := range BadKeys {
		err := s.Put(ctx, key, bytes.NewReader([]byte("x")), 1)
		require.ErrorIs(t, err, offload.ErrInvalidKey, "Put(%q)", key)
		_, err = s.Get(ctx, key)
		require.ErrorIs(t, err, offload.ErrInvalidKey, "Get(%q)", key)
		_, err = s.Exists(ctx, key)
		require.ErrorIs(t, err, offload.ErrInvalidKey, "Exists(%q)", key)
		require.ErrorIs(t, s.Delete(ctx, key), offload.ErrInvalidKey, "Delete(%q)", key)
	}
}

func testSizeMismatch(t *testing.T, _ Harness, s offload.Store) {
	ctx := context.Background()
	for _, size := range []int64{0, 4, 6, 1 << 20} {
		err := s.Put(ctx, "sized", bytes.NewReader([]byte("hello")), size)
		require.ErrorIs(t, err, offload.ErrSizeMismatch, "declared %d for 5 bytes", size)
		ok, err := s.Exists(ctx, "sized")
		require.NoError(t, err)
		require.False(t, ok, "a failed Put must store nothing")
	}
}

type failingReader struct {
	data []byte
	err  error
}

// Read yields the data, then the error.
func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func testFailedPut(t *testing.T, _ Harness, s offload.Store) {
	ctx := context.Background()
	boom := errors.New("boom")
	put(t, s, "k", []byte("old"))
	err := s.Put(ctx, "k", &failingReader{data: bytes.Repeat([]byte("n"), 100_000), err: boom}, 200_000)
	require.Error(t, err)
	got, err := get(t, s, "k")
	require.NoError(t, err)
	require.Equal(t, "old", string(got), "a failed Put must leave the previous object intact")
	err = s.Put(ctx, "new", &failingReader{data: []byte("part"), err: boom}, 100)
	require.Error(t, err)
	ok, err := s.Exists(ctx, "new")
	require.NoError(t, err)
	require.False(t, ok, "a failed Put must not leave a partial object")
}

func testCanceled(t *testing.T, _ Harness, s offload.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Put(ctx, "c", bytes.NewReader([]byte("x")), 1), context.Canceled)
	ok, err := s.Exists(context.Background(), "c")
	require.NoError(t, err)
	require.False(t, ok)
}

func testConcurrentSameKey(t *testing.T, _ Harness, s offload.Store) {
	const writers = 16
	body := bytes.Repeat([]byte("same content "), 10_000)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			errs <- s.Put(context.Background(), "same/key", bytes.NewReader(body), int64(len(body)))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got, err := get(t, s, "same/key")
	require.NoError(t, err)
	require.Equal(t, body, got)
}

func testConcurrentDifferentKeys(t *testing.T, _ Harness, s offload.Store) {
	const writers = 32
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			b := bytes.Repeat([]byte(strconv.Itoa(i)), 1000+i)
			errs <- s.Put(context.Background(), "many/k"+strconv.Itoa(i), bytes.NewReader(b), int64(len(b)))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := range writers {
		got, err := get(t, s, "many/k"+strconv.Itoa(i))
		require.NoError(t, err)
		require.Equal(t, bytes.Repeat([]byte(strconv.Itoa(i)), 1000+i), got)
	}
}

func testAtomicReplace(t *testing.T, _ Harness, s offload.Store) {
	a := bytes.Repeat([]byte("a"), 256<<10)
	b := bytes.Repeat([]byte("b"), 128<<10)
	put(t, s, "flip", a)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var putErr error
	wg.Go(func() {
		defer stop.Store(true)
		for i := 0; i < 20; i++ {
			v := a
			if i%2 == 0 {
				v = b
			}
			if err := s.Put(context.Background(), "flip", bytes.NewReader(v), int64(len(v))); err != nil {
				putErr = err
				return
			}
		}
	})
	// Fail only after the writer is done, so no goroutine reports into a
	// finished test.
	var readErr error
	for reads := 0; !stop.Load() || reads == 0; reads++ {
		got, err := get(t, s, "flip")
		if err != nil {
			readErr = err
			break
		}
		if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
			readErr = fmt.Errorf("reader saw a partial or mixed object of %d bytes", len(got))
			break
		}
	}
	wg.Wait()
	require.NoError(t, putErr, "concurrent Put")
	require.NoError(t, readErr, "concurrent Get during replacement")
}

// genReader yields n deterministic pseudo-random bytes without holding
// them in memory.
type genReader struct {
	n, off int64
	x      uint64
}

// Read yields the next pseudo-random bytes.
func (g *genReader) Read(p []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	if rem := g.n - g.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	for i := range p {
		if g.off%8 == 0 {
			g.x ^= g.x << 13
			g.x ^= g.x >> 7
			g.x ^= g.x << 17
		}
		p[i] = byte(g.x >> (8 * (g.off % 8)))
		g.off++
	}
	return len(p), nil
}

// LargeBlobSize is the size of the streamed large blob: 40 MiB.
const LargeBlobSize = 40 << 20

func testLarge(t *testing.T, h Harness, s offload.Store) {
	if m := h.Capabilities().MaxObjectSize; m != 0 && m < LargeBlobSize {
		t.Skipf("store holds at most %d bytes", m)
	}
	if testing.Short() {
		t.Skip("40 MiB blob skipped in -short mode")
	}
	ctx := context.Background()
	want := sha256.New()
	_, err := io.Copy(want, &genReader{n: LargeBlobSize, x: 42})
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "large/blob.geojson", &genReader{n: LargeBlobSize, x: 42}, LargeBlobSize))
	rc, err := s.Get(ctx, "large/blob.geojson")
	require.NoError(t, err)
	defer rc.Close()
	got := sha256.New()
	n, err := io.Copy(got, rc)
	require.NoError(t, err)
	require.Equal(t, int64(LargeBlobSize), n)
	require.Equal(t, hex.EncodeToString(want.Sum(nil)), hex.EncodeToString(got.Sum(nil)))
}

func newOffloader(t *testing.T, h Harness, s offload.Store) *offload.Offloader {
	t.Helper()
	o, err := offload.New(s, &offload.Options{BaseURI: h.Capabilities().BaseURI, Prefix: "conformance/geom"})
	require.NoError(t, err)
	return o
}

func testDedupe(t *testing.T, h Harness, s offload.Store) {
	ctx := context.Background()
	cs := NewCountingStore(s)
	o := newOffloader(t, h, cs)
	geom := []byte(`{"type":"MultiPoint","coordinates":[[1,2],[3,4]]}`)
	r1, err := o.Put(ctx, geom, offload.ExtGeoJSON)
	require.NoError(t, err)
	r2, err := o.Put(ctx, bytes.Clone(geom), offload.ExtGeoJSON)
	require.NoError(t, err)
	require.Equal(t, r1, r2)
	require.Equal(t, int64(1), cs.Puts(), "identical geometries must be written once")
	sum := sha256.Sum256(geom)
	require.Equal(t, hex.EncodeToString(sum[:]), r1.SHA256)
	require.Equal(t, int64(len(geom)), r1.Size)
	got, err := o.Fetch(ctx, r1)
	require.NoError(t, err)
	require.Equal(t, geom, got)
	// A different geometry is a second object.
	_, err = o.Put(ctx, append(bytes.Clone(geom), ' '), offload.ExtGeoJSON)
	require.NoError(t, err)
	require.Equal(t, int64(2), cs.Puts())
}

func testIntegrity(t *testing.T, h Harness, s offload.Store) {
	ctx := context.Background()
	o := newOffloader(t, h, s)
	geom := bytes.Repeat([]byte(`[1.5,2.25],`), 1000)
	for _, tc := range []struct {
		name    string
		mutate  func([]byte) []byte
		problem offload.Problem
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)-7] }, offload.ProblemTruncated},
		{"emptied", func([]byte) []byte { return nil }, offload.ProblemTruncated},
		{"extended", func(b []byte) []byte { return append(b, '\n') }, offload.ProblemExtended},
		{"altered", func(b []byte) []byte { c := bytes.Clone(b); c[len(c)/2] ^= 1; return c }, offload.ProblemHash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref, err := o.Put(ctx, geom, offload.ExtGeoJSON)
			require.NoError(t, err)
			key, err := o.KeyFor(ref.URI)
			require.NoError(t, err)
			require.NoError(t, h.Tamper(ctx, s, key, tc.mutate))
			_, err = o.Fetch(ctx, ref)
			require.ErrorIs(t, err, offload.ErrIntegrity)
			var ie *offload.IntegrityError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, tc.problem, ie.Problem, "%v", err)
			require.NoError(t, s.Delete(ctx, key))
		})
	}
	ref, err := o.Put(ctx, geom, offload.ExtGeoJSON)
	require.NoError(t, err)
	key, err := o.KeyFor(ref.URI)
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, key))
	_, err = o.Fetch(ctx, ref)
	require.ErrorIs(t, err, offload.ErrNotFound)
}

func testForeignURIs(t *testing.T, h Harness, s offload.Store) {
	ctx := context.Background()
	o := newOffloader(t, h, s)
	// Plant an object outside the prefix; no URI may reach it.
	put(t, s, "secret/"+hex.EncodeToString(make([]byte, 32))+".geojson", []byte("secret"))
	geom := []byte(`{"type":"Point","coordinates":[0,0]}`)
	ref, err := o.Put(ctx, geom, offload.ExtGeoJSON)
	require.NoError(t, err)
	zero := hex.EncodeToString(make([]byte, 32))
	for _, uri := range []string{
		o.BaseURI() + "/secret/" + zero + ".geojson",
		o.BaseURI() + "/conformance/geom/../../secret/" + zero + ".geojson",
		o.BaseURI() + "/conformance/geom/%2e%2e/%2e%2e/secret/" + zero + ".geojson",
		o.BaseURI() + "/conformance//geom/" + ref.SHA256 + ".geojson",
		"other://host/conformance/geom/" + ref.SHA256 + ".geojson",
		ref.URI + "?x=1",
	} {
		bad := ref
		bad.URI = uri
		_, err := o.Fetch(ctx, bad)
		require.ErrorIs(t, err, offload.ErrForbiddenURI, uri)
	}
}

// CountingStore wraps a Store and counts the calls that reach it. It is
// safe for concurrent use.
type CountingStore struct {
	offload.Store
	puts, gets, exists, deletes atomic.Int64
}

// NewCountingStore wraps s.
func NewCountingStore(s offload.Store) *CountingStore { return &CountingStore{Store: s} }

// Put counts and forwards.
func (c *CountingStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	c.puts.Add(1)
	return c.Store.Put(ctx, key, r, size)
}

// Get counts and forwards.
func (c *CountingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

// Exists counts and forwards.
func (c *CountingStore) Exists(ctx context.Context, key string) (bool, error) {
	c.exists.Add(1)
	return c.Store.Exists(ctx, key)
}

// Delete counts and forwards.
func (c *CountingStore) Delete(ctx context.Context, key string) error {
	c.deletes.Add(1)
	return c.Store.Delete(ctx, key)
}

// URI forwards to the wrapped store's URI method, or returns "".
func (c *CountingStore) URI() string {
	if u, ok := c.Store.(interface{ URI() string }); ok {
		return u.URI()
	}
	return ""
}

// Puts returns the number of Put calls.
func (c *CountingStore) Puts() int64 { return c.puts.Load() }

// Gets returns the number of Get calls.
func (c *CountingStore) Gets() int64 { return c.gets.Load() }

// String summarises the counts.
func (c *CountingStore) String() string {
	return fmt.Sprintf("puts=%d gets=%d exists=%d deletes=%d", c.puts.Load(), c.gets.Load(), c.exists.Load(), c.deletes.Load())
}
