// Package blobstore is an [offload.Store] over a gocloud.dev [*blob.Bucket]:
// dead-letter blobs on Amazon S3 (and S3-compatible stores), Google Cloud
// Storage, Azure Blob Storage, a local directory or memory, opened by URL.
//
//	store, err := blobstore.Open(ctx, "s3://dlq-geom?region=eu-west-1", nil)
//	off, err := offload.New(store, nil) // BaseURI "s3://dlq-geom", from store.URI()
//
// # Schemes
//
// This package registers (by importing their drivers) the schemes
//
//   - s3:// (gocloud.dev/blob/s3blob, AWS SDK for Go v2; see its URLOpener for
//     region, endpoint, use_path_style, ssetype and the other parameters),
//   - file:// (gocloud.dev/blob/fileblob to open the bucket; the
//     directory must exist unless create_dir=1 is given; objects are then
//     read and written by this package, see File buckets),
//   - mem:// (gocloud.dev/blob/memblob; nothing survives the process).
//
// gs:// and azblob:// are opened by the same [Open] once the program
// imports their drivers itself:
//
//	import _ "gocloud.dev/blob/gcsblob"
//	import _ "gocloud.dev/blob/azureblob"
//
// They are not imported here because they pull the Google Cloud Storage and
// Azure Storage SDKs into every user's build; this module does not even
// require them. Any *blob.Bucket, however opened, can be wrapped with
// [New].
//
// # URIs
//
// [Store.URI] is the base URI an [offload.Offloader] over the store writes
// into envelopes when its Options.BaseURI is empty: the URL's scheme and
// host (the bucket or container), the directory for file:// URLs, and the
// prefix query parameter, without any other query parameter — so an
// endpoint override for a local S3 does not leak into envelopes:
//
//	s3://dlq-geom?region=eu-west-1&prefix=prod/   → s3://dlq-geom/prod
//	file:///var/lib/dlq?create_dir=1              → file:///var/lib/dlq
//	mem://                                        → mem://geodlq
//
// # Semantics
//
// Put streams the reader into a [blob.Writer] and commits on Close; when
// the reader yields more or fewer bytes than declared, fails, or ctx is
// done, the write is aborted by cancelling its context before Close, which
// every gocloud driver honours, so nothing is stored and a previous object
// under the key stays intact. S3 and GCS writes are atomic on the service;
// memblob swaps a slice; file buckets are described below. Objects carry
// Content-Type application/geo+json (.geojson keys), application/json
// (.json) or application/octet-stream, and, with Options.SHA256Metadata,
// a "sha256" metadata entry checked while streaming. Content-MD5 is not
// sent: the MD5 must be known before a streamed write starts, and s3blob
// no longer supports it; the AWS SDK's default request checksums (CRC32)
// protect each upload in transit, and [offload.Offloader.Fetch] verifies
// size and SHA-256 on every read.
//
// On S3, objects above 16 MiB are uploaded in parts (the AWS transfer
// manager: 8 MiB parts, 5 at a time, unless Options.PartSize and
// Options.Concurrency say otherwise), holding up to about 16 MiB plus
// PartSize × Concurrency in memory. A multipart upload aborted by a
// failure may leave parts behind that no read ever sees; give the bucket
// an AbortIncompleteMultipartUpload lifecycle rule.
//
// Get returns a streaming reader: S3 GetObject's body, an open file, a
// slice. The reader reports the object's size (Size), so that
// [offload.Offloader.Fetch] allocates once. On S3 it is tied to Get's
// context: a Read stalled by the service fails once ctx is done. Exists
// uses the driver's Attributes (S3 HeadObject). Delete of a missing key is
// [offload.ErrNotFound], which on S3 costs a HeadObject first
// (DeleteObject itself succeeds for missing keys). Every "not found" is
// recognised with gcerrors.Code(err) == gcerrors.NotFound and wrapped
// with [offload.ErrNotFound]; the driver's error stays in the chain for
// [Store.ErrorAs].
//
// The store also implements [offload.Lister] (List, with each object's
// size and modification time) and [offload.Copier] (server-side Copy), so
// [offload.Offloader.Sweep] can collect unreferenced blobs.
//
// # File buckets
//
// fileblob opens files by path: it follows a symbolic link planted in the
// bucket directory wherever it leads, opens a FIFO at a key (or at a
// key's ".attrs" sidecar) for a read that blocks until a writer comes,
// and rewrites sidecar files in place, so that a Get racing a Put of the
// same key can fail to decode one. A Store over a file bucket (opened by
// [Open] or given to [New]) therefore uses fileblob only to open the
// bucket, and does every object operation itself, through an
// [offload.DirStore] on the bucket's directory (an [os.Root]), with the
// bucket's prefix parameter prepended to keys. It has the DirStore's
// rules: objects are regular files; a FIFO, socket, device, directory or
// symbolic link at a key is not an object ([offload.ErrNotRegular], never
// opened for reading); nothing is read, written, listed or removed
// through a symbolic link leading outside the directory
// ([offload.ErrOutsideStore]), while directory links that stay inside are
// followed; Put writes a temporary file (mode 0640, name starting with
// '.') next to the object and renames it over the key.
//
// No sidecar files are written, whatever the URL's metadata parameter
// says, so file buckets keep no Content-Type or sha256 metadata (with
// Options.SHA256Metadata the bytes are still verified while streaming);
// Delete removes a sidecar left by an earlier fileblob write, keys ending
// in ".attrs" are refused as fileblob refuses them, and List skips
// sidecars. [New] finds the bucket's directory from its uri, which must
// be file:// and name the directory (or, with a prefix, a path below it).
//
// # As
//
// [Store.As] and [Store.ErrorAs] forward to the bucket: with s3blob, As
// gives the *s3.Client and ErrorAs a smithy.APIError; see each driver's
// package documentation.
//
// # Testing
//
// The package passes offload/offloadtest's conformance suite against
// mem://, file:// (including its special-file and symbolic-link tests)
// and Amazon S3's protocol as served in process by
// github.com/johannesboyne/gofakes3 (memory backend) through the real AWS
// SDK v2 S3 client (path-style addressing, static credentials, region
// us-east-1), with a server that can stall a GetObject mid-body. It has
// not been run against AWS itself, Google Cloud Storage or Azure Blob
// Storage.
package blobstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file://
	_ "gocloud.dev/blob/memblob"  // mem://
	_ "gocloud.dev/blob/s3blob"   // s3://
	"gocloud.dev/gcerrors"

	"github.com/geodlq/geodlq/offload"
)

// Content types written by [Store.Put] when Options.ContentType is empty.
const (
	ContentTypeGeoJSON = "application/geo+json"
	ContentTypeJSON    = "application/json"
	ContentTypeOther   = "application/octet-stream"
)

// MetadataSHA256 is the metadata key Put writes with Options.SHA256Metadata
// (on S3: x-amz-meta-sha256).
const MetadataSHA256 = "sha256"

// DefaultMemHost is the host of the URI of a mem:// bucket opened without
// one.
const DefaultMemHost = "geodlq"

// Options configures a [Store]. The zero value and nil use the defaults.
type Options struct {
	// ContentType is the Content-Type of every object Put writes. Default:
	// by the key's extension, application/geo+json for .geojson,
	// application/json for .json, application/octet-stream otherwise.
	ContentType string
	// PartSize is the size in bytes of the parts of a multipart upload
	// (blob.WriterOptions.BufferSize; on S3 the transfer manager's
	// PartSizeBytes, at least 5 MiB). Default 0: the driver's (S3 8 MiB).
	PartSize int
	// Concurrency is how many parts are uploaded at once
	// (blob.WriterOptions.MaxConcurrency). Default 0: the driver's (S3 5).
	Concurrency int
	// SHA256Metadata makes Put record, for a key whose last segment is
	// <64 lowercase hex>.<ext> (the form offload.Offloader writes), that
	// hex as the object's "sha256" metadata, and verify while streaming
	// that the bytes hash to it: a mismatch aborts the write with an
	// *offload.IntegrityError. Keys of other forms are written as without
	// it. Default false: a Store accepts any bytes under any valid key.
	SHA256Metadata bool
}

// Store is an [offload.Store] over a *blob.Bucket. It is safe for
// concurrent use (as *blob.Bucket is).
type Store struct {
	bucket *blob.Bucket
	uri    string
	opts   Options
	owned  bool // Close closes the bucket
	// files is set for a file bucket: every object operation goes through
	// it (an os.Root on the bucket's directory) instead of fileblob.
	files      *offload.DirStore
	filePrefix string // the bucket's prefix, prepended to keys in files
}

var (
	_ offload.Store  = (*Store)(nil)
	_ offload.Lister = (*Store)(nil)
	_ offload.Copier = (*Store)(nil)
)

// Open opens the bucket at urlstr with gocloud.dev's blob.OpenBucket (so
// any scheme whose driver the program imports works; this package imports
// s3, file and mem) and returns a store over it whose URI is
// [URIFromURL](urlstr). A file:// URL without a metadata parameter is
// opened with metadata=skip, so that writes through [Store.Bucket] keep no
// sidecars either (see File buckets in the package documentation). Close
// the store to close the bucket.
func Open(ctx context.Context, urlstr string, opts *Options) (*Store, error) {
	uri, err := URIFromURL(urlstr)
	if err != nil {
		return nil, err
	}
	b, err := blob.OpenBucket(ctx, withFileDefaults(urlstr))
	if err != nil {
		return nil, fmt.Errorf("blobstore: open %s: %w", redact(urlstr), err)
	}
	s, err := New(b, uri, opts)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// New returns a store over bucket, which the caller keeps owning (Close
// does not close it). uri is the store's base URI (see [Store.URI]),
// required: scheme "://" location, the form offload.Options.BaseURI
// accepts, such as "s3://dlq-geom" or "gs://dlq-geom/prod".
func New(bucket *blob.Bucket, uri string, opts *Options) (*Store, error) {
	if bucket == nil {
		return nil, errors.New("blobstore: New: nil bucket")
	}
	s := &Store{bucket: bucket, uri: strings.TrimRight(uri, "/")}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.PartSize < 0 || s.opts.Concurrency < 0 {
		return nil, errors.New("blobstore: New: negative PartSize or Concurrency")
	}
	if uri == "" {
		return nil, errors.New("blobstore: New: uri is required")
	}
	if _, err := offload.New(s, nil); err != nil {
		return nil, fmt.Errorf("blobstore: New: uri %q cannot be an offload base URI: %w", uri, err)
	}
	var fi os.FileInfo
	if bucket.As(&fi) {
		dir, prefix, err := fileDirFromURI(bucket, s.uri)
		if err != nil {
			return nil, fmt.Errorf("blobstore: New: %w", err)
		}
		if err := s.openFiles(dir, prefix); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// URIFromURL returns the base URI of the bucket a blob URL opens: scheme
// "://" host (the bucket or container; "geodlq" for a mem:// URL without
// one), or for file:// the absolute directory; then "/" and the prefix
// query parameter without its trailing slash, when present. Other query
// parameters are dropped. It refuses a URL without a scheme, a prefix that
// does not end with "/" or is not a valid key, the key parameter (a
// single-key bucket cannot hold a store), and for schemes other than file a
// path (the bucket is the host; use ?prefix=).
func URIFromURL(urlstr string) (string, error) {
	fail := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("blobstore: URL %s: "+format, append([]any{redact(urlstr)}, args...)...)
	}
	u, err := url.Parse(urlstr)
	if err != nil {
		return fail("%v", err)
	}
	if u.Scheme == "" || u.Opaque != "" {
		return fail("want scheme://bucket")
	}
	q := u.Query()
	if q.Has("key") {
		return fail("the key parameter (a single-key bucket) cannot back a store")
	}
	var base string
	switch scheme := strings.ToLower(u.Scheme); scheme {
	case "file":
		abs, err := fileDirOf(u)
		if err != nil {
			return fail("%v", err)
		}
		base = (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	default:
		if u.Path != "" && u.Path != "/" {
			return fail("the path %q is ignored by the %s driver; the bucket is the host, use ?prefix=dir/ for a key prefix", u.Path, scheme)
		}
		host := u.Host
		if host == "" {
			if scheme != "mem" {
				return fail("no bucket (host)")
			}
			host = DefaultMemHost
		}
		base = scheme + "://" + host
	}
	if p := q.Get("prefix"); p != "" {
		if !strings.HasSuffix(p, "/") || !offload.ValidKey(strings.TrimSuffix(p, "/")) {
			return fail("prefix %q must be a valid key followed by '/'", p)
		}
		base += "/" + strings.TrimSuffix(p, "/")
	}
	return strings.TrimRight(base, "/"), nil
}

// withFileDefaults adds metadata=skip to a file:// URL that does not choose
// a metadata mode: fileblob's sidecar files are rewritten in place, so a
// reader racing a writer of the same key can fail decoding one. (The
// store's own operations never use fileblob for objects.)
func withFileDefaults(urlstr string) string {
	u, err := url.Parse(urlstr)
	if err != nil || !strings.EqualFold(u.Scheme, "file") {
		return urlstr
	}
	q := u.Query()
	if q.Has("metadata") {
		return urlstr
	}
	q.Set("metadata", "skip")
	u.RawQuery = q.Encode()
	return u.String()
}

// redact hides the query of a URL (it may carry credentials) in errors.
func redact(urlstr string) string {
	if i := strings.IndexByte(urlstr, '?'); i >= 0 {
		return urlstr[:i] + "?…"
	}
	return urlstr
}

// URI returns the store's base URI, the default BaseURI of an
// [offload.Offloader] over it.
func (s *Store) URI() string { return s.uri }

// Bucket returns the underlying bucket.
func (s *Store) Bucket() *blob.Bucket { return s.bucket }

// As forwards to [blob.Bucket.As]: it exposes the driver's client (for
// s3blob, **s3.Client).
func (s *Store) As(i any) bool { return s.bucket.As(i) }

// ErrorAs forwards to [blob.Bucket.ErrorAs]: it exposes the driver's error
// type (for s3blob, smithy.APIError) of an error this store returned.
func (s *Store) ErrorAs(err error, i any) bool { return s.bucket.ErrorAs(err, i) }

// Close closes the bucket if [Open] opened it; a store made by [New] leaves
// the bucket to its owner. The store must not be used after Close.
func (s *Store) Close() error {
	var err error
	if s.files != nil {
		err = s.files.Close()
	}
	if s.owned {
		err = errors.Join(s.bucket.Close(), err)
	}
	return err
}

func checkKey(op, key string) error {
	if !offload.ValidKey(key) {
		k := key
		if len(k) > 80 {
			k = k[:80] + "…"
		}
		return fmt.Errorf("blobstore: %s %q: %w", op, k, offload.ErrInvalidKey)
	}
	return nil
}

// wrap maps a driver error: NotFound wraps offload.ErrNotFound too.
func wrap(op, key string, err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("blobstore: %s %q: %w: %w", op, key, offload.ErrNotFound, err)
	}
	return fmt.Errorf("blobstore: %s %q: %w", op, key, err)
}

func (s *Store) contentType(key string) string {
	switch {
	case s.opts.ContentType != "":
		return s.opts.ContentType
	case strings.HasSuffix(key, "."+offload.ExtGeoJSON):
		return ContentTypeGeoJSON
	case strings.HasSuffix(key, "."+offload.ExtJSON):
		return ContentTypeJSON
	}
	return ContentTypeOther
}

// keySHA256 returns the hex SHA-256 a content-addressed key names.
func keySHA256(key string) (string, bool) {
	hexsum, ext, ok := strings.Cut(path.Base(key), ".")
	if !ok || (ext != offload.ExtGeoJSON && ext != offload.ExtJSON) || len(hexsum) != 64 {
		return "", false
	}
	for i := 0; i < len(hexsum); i++ {
		if c := hexsum[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return hexsum, true
}

// Put implements [offload.Store.Put]; see the package documentation.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := checkKey("put", key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("blobstore: put %q: negative size %d: %w", key, size, offload.ErrSizeMismatch)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("blobstore: put %q: %w", key, err)
	}
	if s.files != nil {
		return s.putFile(ctx, key, r, size)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wopts := &blob.WriterOptions{
		ContentType:    s.contentType(key),
		BufferSize:     s.opts.PartSize,
		MaxConcurrency: s.opts.Concurrency,
	}
	var h hash.Hash
	want, verify := "", false
	if s.opts.SHA256Metadata {
		if want, verify = keySHA256(key); verify {
			wopts.Metadata = map[string]string{MetadataSHA256: want}
			h = sha256.New()
		}
	}
	w, err := s.bucket.NewWriter(wctx, key, wopts)
	if err != nil {
		return wrap("put", key, err)
	}
	// abort cancels the write before closing it: the driver then stores
	// nothing.
	abort := func(err error) error {
		cancel()
		_ = w.Close()
		return err
	}
	src := io.Reader(&ctxReader{ctx: ctx, r: io.LimitReader(r, size+1)})
	if verify {
		src = io.TeeReader(src, h)
	}
	// Hide the writer's ReadFrom, which allocates a 1 MiB buffer per call:
	// io.Copy's 32 KiB buffer streams as well.
	n, err := io.Copy(struct{ io.Writer }{w}, src)
	switch {
	case err != nil && ctx.Err() != nil:
		return abort(fmt.Errorf("blobstore: put %q: %w", key, ctx.Err()))
	case err != nil:
		return abort(fmt.Errorf("blobstore: put %q: %w", key, err))
	case n != size:
		got := fmt.Sprint(n)
		if n > size {
			got = "more than " + fmt.Sprint(size)
		}
		return abort(fmt.Errorf("blobstore: put %q: reader yielded %s bytes, declared %d: %w", key, got, size, offload.ErrSizeMismatch))
	}
	if verify {
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return abort(&offload.IntegrityError{URI: s.uri + "/" + key, Problem: offload.ProblemHash,
				WantSize: size, GotSize: n, WantSHA256: want, GotSHA256: got})
		}
	}
	if err := ctx.Err(); err != nil {
		return abort(fmt.Errorf("blobstore: put %q: %w", key, err))
	}
	if err := w.Close(); err != nil {
		return wrap("put", key, err)
	}
	return nil
}

// ctxReader fails a copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

// Read reads unless the context is done.
func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Get implements [offload.Store.Get]. The reader streams from the service;
// close it.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey("get", key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("blobstore: get %q: %w", key, err)
	}
	if s.files != nil {
		return s.getFile(ctx, key)
	}
	r, err := s.bucket.NewReader(ctx, key, nil)
	if err != nil {
		return nil, wrap("get", key, err)
	}
	return r, nil
}

// Exists implements [offload.Store.Exists] with the bucket's Attributes.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := checkKey("exists", key); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("blobstore: exists %q: %w", key, err)
	}
	if s.files != nil {
		return s.existsFile(ctx, key)
	}
	_, err := s.bucket.Attributes(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return false, nil
	}
	if err != nil {
		return false, wrap("exists", key, err)
	}
	return true, nil
}

// Delete implements [offload.Store.Delete].
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey("delete", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("blobstore: delete %q: %w", key, err)
	}
	if s.files != nil {
		return s.deleteFile(ctx, key)
	}
	if err := s.bucket.Delete(ctx, key); err != nil {
		return wrap("delete", key, err)
	}
	return nil
}

// List implements [offload.Lister] with the bucket's List. Keys that
// offload.ValidKey refuses are skipped.
func (s *Store) List(ctx context.Context, prefix string, fn func(offload.ObjectInfo) error) error {
	if s.files != nil {
		return s.listFiles(ctx, prefix, fn)
	}
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return wrap("list", prefix, err)
		}
		if obj.IsDir || !offload.ValidKey(obj.Key) {
			continue
		}
		if err := fn(offload.ObjectInfo{Key: obj.Key, Size: obj.Size, ModTime: obj.ModTime}); err != nil {
			return err
		}
	}
}

// Copy implements [offload.Copier] with the bucket's server-side Copy (S3
// CopyObject).
func (s *Store) Copy(ctx context.Context, dstKey, srcKey string) error {
	if err := checkKey("copy", dstKey); err != nil {
		return err
	}
	if err := checkKey("copy", srcKey); err != nil {
		return err
	}
	if s.files != nil {
		return s.copyFile(ctx, dstKey, srcKey)
	}
	if err := s.bucket.Copy(ctx, dstKey, srcKey, nil); err != nil {
		return wrap("copy", srcKey, err)
	}
	return nil
}
