package blobstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/fileblob"

	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/blobstore"
)

// TestFileBucketPrefix: a file:// URL's prefix parameter puts objects
// under that directory, through Open and through New.
func TestFileBucketPrefix(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := blobstore.Open(ctx, "file://"+filepath.ToSlash(dir)+"?prefix=dlq/geom/", nil)
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, "file://"+filepath.ToSlash(dir)+"/dlq/geom", s.URI())
	require.NoError(t, s.Put(ctx, "a/b.geojson", strings.NewReader("x"), 1))
	b, err := os.ReadFile(filepath.Join(dir, "dlq", "geom", "a", "b.geojson"))
	require.NoError(t, err)
	require.Equal(t, "x", string(b))
	var keys []string
	require.NoError(t, s.List(ctx, "", func(o offload.ObjectInfo) error { keys = append(keys, o.Key); return nil }))
	require.Equal(t, []string{"a/b.geojson"}, keys)

	// The same directory handed to New as a fileblob bucket.
	bucket, err := fileblob.OpenBucket(dir, nil)
	require.NoError(t, err)
	defer bucket.Close()
	for _, tc := range []struct {
		uri, wantFile string
	}{
		{"file://" + filepath.ToSlash(dir), filepath.Join(dir, "a", "b.geojson")},
		{"file://" + filepath.ToSlash(dir) + "/dlq/geom", filepath.Join(dir, "dlq", "geom", "a", "b.geojson")},
		{"file://" + filepath.ToSlash(dir) + "/not/yet/made", filepath.Join(dir, "not", "yet", "made", "a", "b.geojson")},
	} {
		n, err := blobstore.New(bucket, tc.uri, nil)
		require.NoError(t, err, tc.uri)
		require.NoError(t, n.Put(ctx, "a/b.geojson", strings.NewReader("y"), 1))
		b, err := os.ReadFile(tc.wantFile)
		require.NoError(t, err, tc.uri)
		require.Equal(t, "y", string(b))
		require.NoError(t, n.Close())
	}
	ok, err := bucket.IsAccessible(ctx)
	require.NoError(t, err)
	require.True(t, ok, "Close of a store made by New leaves the bucket open")
	for _, bad := range []string{"s3://bucket", "file://" + filepath.ToSlash(t.TempDir())} {
		_, err := blobstore.New(bucket, bad, nil)
		require.Error(t, err, "a file bucket with uri %q", bad)
	}
}

// TestFileBucketSidecars: keys ending in .attrs are refused (fileblob's
// sidecars), an old sidecar goes with its object, and List skips them.
func TestFileBucketSidecars(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// An object written by fileblob with metadata sidecars.
	fb, err := fileblob.OpenBucket(dir, nil)
	require.NoError(t, err)
	require.NoError(t, fb.WriteAll(ctx, "old/obj.json", []byte("{}"), nil))
	require.NoError(t, fb.Close())
	_, err = os.Stat(filepath.Join(dir, "old", "obj.json.attrs"))
	require.NoError(t, err, "fileblob wrote a sidecar")

	s, err := blobstore.Open(ctx, "file://"+filepath.ToSlash(dir)+"?metadata=", nil)
	require.NoError(t, err)
	defer s.Close()
	require.ErrorIs(t, s.Put(ctx, "x.geojson.attrs", strings.NewReader("x"), 1), offload.ErrInvalidKey)
	_, err = s.Get(ctx, "old/obj.json.attrs")
	require.ErrorIs(t, err, offload.ErrInvalidKey)
	require.NoError(t, s.Put(ctx, "new/obj.json", strings.NewReader("{}"), 2))
	_, err = os.Stat(filepath.Join(dir, "new", "obj.json.attrs"))
	require.ErrorIs(t, err, os.ErrNotExist, "no sidecar is written, whatever the URL says")
	var keys []string
	require.NoError(t, s.List(ctx, "", func(o offload.ObjectInfo) error { keys = append(keys, o.Key); return nil }))
	require.ElementsMatch(t, []string{"old/obj.json", "new/obj.json"}, keys)
	require.NoError(t, s.Delete(ctx, "old/obj.json"))
	entries, err := os.ReadDir(filepath.Join(dir, "old"))
	require.NoError(t, err)
	require.Empty(t, entries, "the sidecar goes with its object")
}

// TestFileBucketSHA256Metadata: with SHA256Metadata, bytes that do not
// hash to the key's name are refused before the file is committed.
func TestFileBucketSHA256Metadata(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := blobstore.Open(ctx, "file://"+filepath.ToSlash(dir), &blobstore.Options{SHA256Metadata: true})
	require.NoError(t, err)
	defer s.Close()
	body := []byte(`{"type":"Point","coordinates":[1,2]}`)
	sum := sha256.Sum256(body)
	good := "geodlq/" + hex.EncodeToString(sum[:]) + ".geojson"
	require.NoError(t, s.Put(ctx, good, bytes.NewReader(body), int64(len(body))))
	bad := "geodlq/" + strings.Repeat("0", 64) + ".geojson"
	err = s.Put(ctx, bad, bytes.NewReader(body), int64(len(body)))
	var ie *offload.IntegrityError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, offload.ProblemHash, ie.Problem)
	ok, err := s.Exists(ctx, bad)
	require.NoError(t, err)
	require.False(t, ok, "a write that failed verification stores nothing")
	entries, err := os.ReadDir(filepath.Join(dir, "geodlq"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left behind")
}

// TestFileBucketCopy: Copy goes through the directory store: it copies
// regular files and refuses what lies behind a link.
func TestFileBucketCopy(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := blobstore.Open(ctx, "file://"+filepath.ToSlash(dir), nil)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Put(ctx, "a/src.json", strings.NewReader("payload"), 7))
	require.NoError(t, s.Copy(ctx, "b/dst.json", "a/src.json"))
	rc, err := s.Get(ctx, "b/dst.json")
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = buf.ReadFrom(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, "payload", buf.String())
	require.ErrorIs(t, s.Copy(ctx, "b/x.json", "a/missing.json"), offload.ErrNotFound)

	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.json"), []byte("secret"), 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "esc")))
	require.ErrorIs(t, s.Copy(ctx, "b/stolen.json", "esc/secret.json"), offload.ErrOutsideStore)
	require.ErrorIs(t, s.Copy(ctx, "esc/planted.json", "a/src.json"), offload.ErrOutsideStore)
	_, err = os.Stat(filepath.Join(outside, "planted.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
