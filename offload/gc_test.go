package offload_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/offloadtest"
)

func hexOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// dirOffloader returns an offloader over a fresh DirStore and the store's
// Lister.
func dirOffloader(t *testing.T) (*offload.Offloader, *offload.DirStore, offload.Lister) {
	t.Helper()
	s, err := offload.NewDirStore(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	o, err := offload.New(s, nil)
	require.NoError(t, err)
	return o, s, offload.DirLister(s)
}

func putRaw(t *testing.T, s offload.Store, key, body string) {
	t.Helper()
	require.NoError(t, s.Put(context.Background(), key, bytes.NewReader([]byte(body)), int64(len(body))))
}

func exists(t *testing.T, s offload.Store, key string) bool {
	t.Helper()
	ok, err := s.Exists(context.Background(), key)
	require.NoError(t, err)
	return ok
}

func listKeys(t *testing.T, l offload.Lister, prefix string) []string {
	t.Helper()
	var keys []string
	require.NoError(t, l.List(context.Background(), prefix, func(o offload.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}))
	slices.Sort(keys)
	return keys
}

func at(now time.Time) func() time.Time { return func() time.Time { return now } }

func TestSweepNeedsALister(t *testing.T) {
	o, err := offload.New(offload.NewMemStore(), nil)
	require.NoError(t, err)
	_, err = o.Sweep(context.Background(), offload.LiveURIs(), nil)
	require.ErrorIs(t, err, offload.ErrNotListable)
	_, err = o.Sweep(context.Background(), nil, &offload.SweepOptions{Lister: offload.ListerFunc(
		func(context.Context, string, func(offload.ObjectInfo) error) error { return nil })})
	require.ErrorContains(t, err, "nil live set")
}

// TestSweepIncompleteLiveSetChangesNothing: a live set that fails half way
// would make referenced blobs look dead, so the sweep stops before
// changing anything.
func TestSweepIncompleteLiveSetChangesNothing(t *testing.T) {
	o, s, l := dirOffloader(t)
	ref, err := o.Put(context.Background(), []byte(`[1,2]`), offload.ExtGeoJSON)
	require.NoError(t, err)
	boom := errors.New("dead-letter store unavailable")
	live := func(yield func(string, error) bool) {
		if yield("mem://x/geodlq/"+ref.SHA256+".geojson", nil) {
			yield("", boom)
		}
	}
	rep, err := o.Sweep(context.Background(), live, &offload.SweepOptions{Lister: l, Now: at(time.Now().Add(48 * time.Hour))})
	require.ErrorIs(t, err, boom)
	require.Empty(t, rep.Quarantined)
	key, _ := o.KeyFor(ref.URI)
	require.True(t, exists(t, s, key))
}

// TestSweepTouchesOnlyItsBlobs: objects under the prefix that are not
// Prefix/<sha256>.<ext> (another offloader's nested prefix, stray files,
// malformed quarantine entries) are never touched, however old.
func TestSweepTouchesOnlyItsBlobs(t *testing.T) {
	o, s, l := dirOffloader(t)
	h := hexOf([]byte("x"))
	others := []string{
		"geodlq/README.txt",
		"geodlq/2026/" + h + ".geojson", // an offloader with prefix geodlq/2026
		"geodlq/" + h + ".txt",
		"geodlq/" + h[:63] + ".json",
		"geodlq/gc-trash/notanumber/" + h + ".json",
		"geodlq/gc-trash/123/README",
		"geodlqx/" + h + ".json", // outside the prefix
	}
	for _, k := range others {
		putRaw(t, s, k, "x")
	}
	rep, err := o.Sweep(context.Background(), offload.LiveURIs(), &offload.SweepOptions{Lister: l, Now: at(time.Now().Add(1000 * time.Hour))})
	require.NoError(t, err)
	require.Equal(t, len(others)-1, rep.Listed, "geodlqx/ is not under geodlq/")
	require.Equal(t, len(others)-1, rep.Ignored)
	require.Empty(t, rep.Quarantined)
	require.Empty(t, rep.Deleted)
	for _, k := range others {
		require.True(t, exists(t, s, k), k)
	}
}

// TestSweepReferences: references are matched by hash and extension; a
// URI under another base that ends in this prefix is honoured (keeping is
// the safe mistake); URIs of another prefix are not.
func TestSweepReferences(t *testing.T) {
	o, s, l := dirOffloader(t)
	ctx := context.Background()
	geo, err := o.Put(ctx, []byte(`{"type":"Point","coordinates":[1,2]}`), offload.ExtGeoJSON)
	require.NoError(t, err)
	js, err := o.Put(ctx, []byte(`{"event_id":"e"}`), offload.ExtJSON)
	require.NoError(t, err)
	same, err := o.Put(ctx, []byte(`{"type":"Point","coordinates":[1,2]}`), offload.ExtJSON) // same bytes, other ext
	require.NoError(t, err)
	gone, err := o.Put(ctx, []byte(`[0]`), offload.ExtGeoJSON)
	require.NoError(t, err)

	rep, err := o.Sweep(ctx, offload.LiveURIs(
		geo.URI,
		"s3://old-base/geodlq/"+js.SHA256+".json",     // foreign base, same prefix: honoured
		"s3://old-base/other/"+gone.SHA256+".geojson", // another prefix: ignored
		"not a uri", "",
	), &offload.SweepOptions{Lister: l, Now: at(time.Now().Add(48 * time.Hour))})
	require.NoError(t, err)
	require.Equal(t, 2, rep.LiveRefs)
	require.Equal(t, 1, rep.ForeignRefs)
	require.Equal(t, 2, rep.Referenced)
	keyOf := func(r offload.Ref) string { k, err := o.KeyFor(r.URI); require.NoError(t, err); return k }
	require.ElementsMatch(t, []string{keyOf(same), keyOf(gone)}, rep.Quarantined)
	require.True(t, exists(t, s, keyOf(geo)))
	require.True(t, exists(t, s, keyOf(js)))
	require.False(t, exists(t, s, keyOf(same)), "a reference to the .geojson does not keep the .json")
}

// TestSweepQuarantineKeepsBytes: on a store without a server-side copy
// (DirStore), quarantine streams the blob through Get and Put; restoring
// it gives back the same verified bytes.
func TestSweepQuarantineKeepsBytes(t *testing.T) {
	o, s, l := dirOffloader(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte(`[12.5,41.9],`), 50_000)
	ref, err := o.Put(ctx, data, offload.ExtGeoJSON)
	require.NoError(t, err)
	counting := offloadtest.NewCountingStore(s)
	oc, err := offload.New(counting, nil)
	require.NoError(t, err)
	now := time.Now().Add(2 * time.Hour)
	rep, err := oc.Sweep(ctx, offload.LiveURIs(), &offload.SweepOptions{MinAge: time.Hour, Lister: l, Now: at(now)})
	require.NoError(t, err)
	require.Len(t, rep.Quarantined, 1)
	require.Equal(t, int64(1), counting.Puts(), "copied through Put")
	trash := listKeys(t, l, "geodlq/gc-trash/")
	require.Equal(t, []string{fmt.Sprintf("geodlq/gc-trash/%d/%s.geojson", now.Unix(), ref.SHA256)}, trash)
	rc, err := s.Get(ctx, trash[0])
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	require.NoError(t, rc.Close())
	require.NoError(t, err)
	require.Equal(t, data, got)

	rep, err = oc.Sweep(ctx, offload.LiveURIs(ref.URI), &offload.SweepOptions{MinAge: time.Hour, Lister: l, Now: at(now)})
	require.NoError(t, err)
	require.Len(t, rep.Restored, 1)
	back, err := o.Fetch(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, data, back)
	require.Empty(t, listKeys(t, l, "geodlq/gc-trash/"))
}

// TestSweepUnknownModTimeIsKept: a blob whose write time the lister does
// not know is never judged old.
func TestSweepUnknownModTimeIsKept(t *testing.T) {
	o, s, l := dirOffloader(t)
	ref, err := o.Put(context.Background(), []byte(`[1]`), offload.ExtGeoJSON)
	require.NoError(t, err)
	noTimes := offload.ListerFunc(func(ctx context.Context, prefix string, fn func(offload.ObjectInfo) error) error {
		return l.List(ctx, prefix, func(info offload.ObjectInfo) error {
			info.ModTime = time.Time{}
			return fn(info)
		})
	})
	rep, err := o.Sweep(context.Background(), offload.LiveURIs(), &offload.SweepOptions{Lister: noTimes, Now: at(time.Now().Add(1000 * time.Hour))})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Young)
	key, _ := o.KeyFor(ref.URI)
	require.True(t, exists(t, s, key))
}

func TestSweepDefaultsAndCancel(t *testing.T) {
	o, _, l := dirOffloader(t)
	_, err := o.Put(context.Background(), []byte(`[1]`), offload.ExtGeoJSON)
	require.NoError(t, err)
	// Default MinAge is 24h: a blob 23h old is young.
	rep, err := o.Sweep(context.Background(), offload.LiveURIs(), &offload.SweepOptions{Lister: l, Now: at(time.Now().Add(23 * time.Hour))})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Young)
	require.Equal(t, offload.DefaultSweepMinAge, 24*time.Hour)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = o.Sweep(ctx, offload.LiveURIs("x"), &offload.SweepOptions{Lister: l, Now: at(time.Now().Add(48 * time.Hour))})
	require.ErrorIs(t, err, context.Canceled)
}

func TestDirLister(t *testing.T) {
	dir := t.TempDir()
	s, err := offload.NewDirStore(dir)
	require.NoError(t, err)
	defer s.Close()
	l := offload.DirLister(s)
	putRaw(t, s, "a/b/one", "1")
	putRaw(t, s, "a/bc/two", "22")
	putRaw(t, s, "a/three", "333")
	putRaw(t, s, "z", "4444")
	// A store's temporary file, a symbolic link and a directory are not objects.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", ".tmp-three-0123"), []byte("partial"), 0o640))
	require.NoError(t, os.Symlink(filepath.Join(dir, "z"), filepath.Join(dir, "a", "link")))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "empty"), 0o750))

	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a/b/one", "a/bc/two", "a/three", "z"}},
		{"a/", []string{"a/b/one", "a/bc/two", "a/three"}},
		{"a/b", []string{"a/b/one", "a/bc/two"}},
		{"a/b/", []string{"a/b/one"}},
		{"a/t", []string{"a/three"}},
		{"missing/", nil},
		{"z", []string{"z"}},
	} {
		require.Equal(t, tc.want, listKeys(t, l, tc.prefix), "prefix %q", tc.prefix)
	}
	var info offload.ObjectInfo
	require.NoError(t, l.List(context.Background(), "a/three", func(o offload.ObjectInfo) error { info = o; return nil }))
	require.Equal(t, int64(3), info.Size)
	require.WithinDuration(t, time.Now(), info.ModTime, time.Minute)

	stop := errors.New("stop")
	require.ErrorIs(t, l.List(context.Background(), "", func(offload.ObjectInfo) error { return stop }), stop)
	require.ErrorIs(t, l.List(context.Background(), "../x/", func(offload.ObjectInfo) error { return nil }), offload.ErrInvalidKey)
}

func TestLiveURIsStopsEarly(t *testing.T) {
	var got []string
	var seq iter.Seq2[string, error] = offload.LiveURIs("a", "b", "c")
	for u := range seq {
		got = append(got, u)
		if len(got) == 2 {
			break
		}
	}
	require.Equal(t, []string{"a", "b"}, got)
}

// ExampleOffloader_Sweep collects the blobs no envelope refers to any more:
// first into quarantine, then, a grace period later, for good.
func ExampleOffloader_Sweep() {
	dir, _ := os.MkdirTemp("", "sweep-example")
	defer os.RemoveAll(dir)
	store, _ := offload.NewDirStore(dir)
	defer store.Close()
	off, _ := offload.New(store, &offload.Options{BaseURI: "file:///var/lib/dlq"})
	ctx := context.Background()
	kept, _ := off.Put(ctx, []byte(`{"type":"Point","coordinates":[1,2]}`), offload.ExtGeoJSON)
	_, _ = off.Put(ctx, []byte(`{"type":"Point","coordinates":[3,4]}`), offload.ExtGeoJSON) // its envelope was purged

	// The live set: every offload URI of every kept envelope (see package
	// offload/gcref). Pretend a day and a half has passed.
	live := offload.LiveURIs(kept.URI)
	opts := &offload.SweepOptions{Lister: offload.DirLister(store), Now: func() time.Time { return time.Now().Add(36 * time.Hour) }}
	rep, err := off.Sweep(ctx, live, opts)
	fmt.Println(err, rep.Referenced, len(rep.Quarantined), len(rep.Deleted))

	opts.Now = func() time.Time { return time.Now().Add(72 * time.Hour) }
	rep, err = off.Sweep(ctx, offload.LiveURIs(kept.URI), opts)
	fmt.Println(err, rep.Referenced, len(rep.Quarantined), len(rep.Deleted))
	// Output:
	// <nil> 1 1 0
	// <nil> 1 0 1
}
