package blobstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob/memblob"

	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/blobstore"
)

func TestURIFromURL(t *testing.T) {
	cwd, err := os.Getwd()
	require.NoError(t, err)
	for _, tc := range []struct {
		url, want, err string
	}{
		{url: "s3://dlq-geom", want: "s3://dlq-geom"},
		{url: "s3://dlq-geom/", want: "s3://dlq-geom"},
		{url: "s3://dlq-geom?region=eu-west-1&endpoint=http://127.0.0.1:9000&use_path_style=true", want: "s3://dlq-geom"},
		{url: "s3://dlq-geom?prefix=prod/2026/", want: "s3://dlq-geom/prod/2026"},
		{url: "gs://dlq-geom?prefix=a/", want: "gs://dlq-geom/a"},
		{url: "azblob://container", want: "azblob://container"},
		{url: "mem://", want: "mem://geodlq"},
		{url: "mem://scratch", want: "mem://scratch"},
		{url: "file:///var/lib/dlq", want: "file:///var/lib/dlq"},
		{url: "file://localhost/var/lib/dlq?create_dir=1&no_tmp_dir=1", want: "file:///var/lib/dlq"},
		{url: "file:///var/lib/dlq%20geom", want: "file:///var/lib/dlq%20geom"},
		{url: "file://./rel/dir", want: (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(cwd, "rel/dir"))}).String()},
		{url: "s3://dlq-geom/some/path", err: "the bucket is the host"},
		{url: "s3://", err: "no bucket"},
		{url: "dlq-geom", err: "want scheme://bucket"},
		{url: "s3://dlq-geom?prefix=prod", err: "must be a valid key followed by '/'"},
		{url: "s3://dlq-geom?prefix=../x/", err: "must be a valid key followed by '/'"},
		{url: "s3://dlq-geom?key=one.json", err: "single-key"},
		{url: "file://otherhost/x", err: "no host"},
		{url: "s3://dlq-geom?secret=hunter2&prefix=x", err: "s3://dlq-geom?…"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			got, err := blobstore.URIFromURL(tc.url)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.NotContains(t, err.Error(), "hunter2", "the query may hold credentials")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestNewValidates(t *testing.T) {
	b := memblob.OpenBucket(nil)
	defer b.Close()
	_, err := blobstore.New(nil, "mem://x", nil)
	require.ErrorContains(t, err, "nil bucket")
	_, err = blobstore.New(b, "", nil)
	require.ErrorContains(t, err, "uri is required")
	for _, bad := range []string{"mem://x?y=1", "mem://x/../y", "no-scheme", "mem://x y"} {
		_, err = blobstore.New(b, bad, nil)
		require.ErrorContains(t, err, "cannot be an offload base URI", bad)
	}
	_, err = blobstore.New(b, "mem://x", &blobstore.Options{PartSize: -1})
	require.Error(t, err)
	s, err := blobstore.New(b, "gs://bucket/prefix/", nil)
	require.NoError(t, err)
	require.Equal(t, "gs://bucket/prefix", s.URI())
	require.NoError(t, s.Close(), "Close of a store made by New leaves the bucket open")
	ok, err := b.IsAccessible(context.Background())
	require.NoError(t, err)
	require.True(t, ok)
}

// TestOpenS3URL opens the gofakes3 bucket by URL, as a user pointing at an
// S3-compatible endpoint would, and checks that the prefix parameter lands
// keys under it and shows in the URI, and that query parameters do not.
func TestOpenS3URL(t *testing.T) {
	f := newFakeS3(t)
	bucket := f.newBucket(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDGEODLQTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "geodlq-test-secret")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	ctx := context.Background()
	u := "s3://" + bucket + "?region=us-east-1&use_path_style=true&endpoint=" + url.QueryEscape(f.srv.URL) + "&prefix=dlq/"
	s, err := blobstore.Open(ctx, u, nil)
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, "s3://"+bucket+"/dlq", s.URI())

	o, err := offload.New(s, nil)
	require.NoError(t, err)
	require.Equal(t, "s3://"+bucket+"/dlq", o.BaseURI(), "the offloader's BaseURI defaults to the store's URI")
	geom := []byte(`{"type":"Point","coordinates":[12.5,41.9]}`)
	ref, err := o.Put(ctx, geom, offload.ExtGeoJSON)
	require.NoError(t, err)
	require.Equal(t, "s3://"+bucket+"/dlq/geodlq/"+ref.SHA256+".geojson", ref.URI)
	got, err := o.Fetch(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, geom, got)

	head, err := f.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("dlq/geodlq/" + ref.SHA256 + ".geojson")})
	require.NoError(t, err, "the object is under the URL's prefix in the bucket")
	require.Equal(t, blobstore.ContentTypeGeoJSON, aws.ToString(head.ContentType))
	require.Equal(t, int64(len(geom)), aws.ToInt64(head.ContentLength))

	var client *s3.Client
	require.True(t, s.As(&client), "As exposes the S3 client")
	require.NotNil(t, client)
}

func TestS3ContentTypesAndSHA256Metadata(t *testing.T) {
	f := newFakeS3(t)
	s, bucket := f.store(t, &blobstore.Options{SHA256Metadata: true})
	ctx := context.Background()
	body := []byte(`{"type":"Point","coordinates":[1,2]}`)
	sum := sha256.Sum256(body)
	hexsum := hex.EncodeToString(sum[:])
	for _, tc := range []struct {
		key, contentType, sha string
	}{
		{"geodlq/" + hexsum + ".geojson", blobstore.ContentTypeGeoJSON, hexsum},
		{"geodlq/" + hexsum + ".json", blobstore.ContentTypeJSON, hexsum},
		{"other/blob.bin", blobstore.ContentTypeOther, ""},
	} {
		require.NoError(t, s.Put(ctx, tc.key, bytes.NewReader(body), int64(len(body))))
		head, err := f.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(tc.key)})
		require.NoError(t, err)
		require.Equal(t, tc.contentType, aws.ToString(head.ContentType), tc.key)
		require.Equal(t, tc.sha, head.Metadata[blobstore.MetadataSHA256], tc.key)
	}

	// Bytes that do not hash to the key's name are refused and not stored.
	bad := "geodlq/" + strings.Repeat("0", 64) + ".geojson"
	err := s.Put(ctx, bad, bytes.NewReader(body), int64(len(body)))
	var ie *offload.IntegrityError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, offload.ProblemHash, ie.Problem)
	require.Equal(t, hexsum, ie.GotSHA256)
	ok, err := s.Exists(ctx, bad)
	require.NoError(t, err)
	require.False(t, ok, "a write that failed verification stores nothing")
}

func TestS3ErrorsKeepTheDriverError(t *testing.T) {
	f := newFakeS3(t)
	s, _ := f.store(t, nil)
	ctx := context.Background()
	_, err := s.Get(ctx, "missing/key.json")
	require.ErrorIs(t, err, offload.ErrNotFound)
	var apiErr smithy.APIError
	require.True(t, s.ErrorAs(err, &apiErr), "ErrorAs exposes the service error: %v", err)
	require.Equal(t, "NoSuchKey", apiErr.ErrorCode())
	require.ErrorIs(t, s.Copy(ctx, "a/b", "missing/key.json"), offload.ErrNotFound)
	require.ErrorIs(t, s.Copy(ctx, "a/../b", "x"), offload.ErrInvalidKey)
}

// TestEnvelopeOffloadToS3 builds a dead-letter envelope for a 3 MB
// multipolygon with the offloader over the S3 store: the geometry goes to
// the bucket under its SHA-256 and the envelope restores byte for byte.
func TestEnvelopeOffloadToS3(t *testing.T) {
	f := newFakeS3(t)
	s, bucket := f.store(t, nil)
	ctx := context.Background()
	off, err := offload.New(s, nil)
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	payload := corpus.LargeEvent(3 << 20)
	env, _, err := b.Build(ctx, envelope.Input{Payload: payload, Err: errors.New("boom")})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(env.Geometry.OffloadURI, "s3://"+bucket+"/geodlq/"), env.Geometry.OffloadURI)
	restored, err := env.Restore(ctx, off)
	require.NoError(t, err)
	require.Equal(t, payload, restored)

	key, err := off.KeyFor(env.Geometry.OffloadURI)
	require.NoError(t, err)
	out, err := f.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	require.NoError(t, err)
	defer out.Body.Close()
	h := sha256.New()
	_, err = io.Copy(h, out.Body)
	require.NoError(t, err)
	require.Equal(t, env.Geometry.ContentSHA256, hex.EncodeToString(h.Sum(nil)))
}

func TestFileOpenDefaultsToNoSidecars(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := blobstore.Open(ctx, "file://"+filepath.ToSlash(dir), nil)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Put(ctx, "a/b.geojson", strings.NewReader("x"), 1))
	entries, err := os.ReadDir(filepath.Join(dir, "a"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no .attrs sidecar next to the object")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "emptydir"), 0o750))
	require.ErrorIs(t, s.Delete(ctx, "emptydir"), offload.ErrNotFound, "a directory is not an object")
	_, err = os.Stat(filepath.Join(dir, "emptydir"))
	require.NoError(t, err, "Delete must not remove a directory")
}

// zeroReader yields n zero bytes without holding them.
type zeroReader struct{ n int64 }

func (z *zeroReader) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), z.n)]
	clear(p)
	z.n -= int64(len(p))
	return len(p), nil
}

// TestPutStreams writes 40 MiB to a file bucket and checks that Put itself
// allocates a small fraction of that: the object is streamed, not held.
func TestPutStreams(t *testing.T) {
	ctx := context.Background()
	s, err := blobstore.Open(ctx, "file://"+filepath.ToSlash(t.TempDir())+"?no_tmp_dir=1", nil)
	require.NoError(t, err)
	defer s.Close()
	const size = 40 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	require.NoError(t, s.Put(ctx, "large/blob.geojson", &zeroReader{n: size}, size))
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	require.Less(t, allocated, uint64(4<<20), "Put allocated %d bytes for a %d-byte object", allocated, size)
	ok, err := s.Exists(ctx, "large/blob.geojson")
	require.NoError(t, err)
	require.True(t, ok)
}
