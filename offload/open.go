package offload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/geodlq/geodlq/internal/urlreg"
)

// Opening blob stores by URL: the same pattern as broker.OpenStore for
// dead-letter stores and gocloud.dev's blob.OpenBucket. This package
// registers file:// (a [DirStore]); package offload/blobstore registers
// s3://, gs://, azblob:// and mem:// (gocloud.dev buckets) when a program
// imports it.

// OpenOptions shape how [OpenStore] opens a blob store. The zero value
// (and nil) opens an existing store read-write.
type OpenOptions struct {
	// ReadOnly refuses Put and Delete with an error wrapping [ErrReadOnly]
	// before the store is touched, and creates nothing: what read-only
	// commands (show, render, export, verify) pass.
	ReadOnly bool
	// Create allows the opener to create the store when it does not exist
	// (a directory). Without it a missing store is an error wrapping
	// [ErrNoStore], so that a mistyped path is not an empty store.
	Create bool
	// ConnectTimeout bounds opening the store, including the check that
	// it is there (for a bucket, a request to the service). Default 10s.
	ConnectTimeout time.Duration
}

// StoreCloser is a [Store] that holds resources (a directory handle, a
// client) until it is closed: what [OpenStore] returns.
type StoreCloser interface {
	Store
	io.Closer
}

// BlobOpener opens the blob store u names. raw is the URL as given. An
// opener must honour ctx and opts (ReadOnly may be left to [OpenStore],
// which wraps the store), and return an error wrapping [ErrNoStore] when
// the target does not exist or is not a blob store.
type BlobOpener func(ctx context.Context, u *url.URL, raw string, opts OpenOptions) (StoreCloser, error)

// Errors of [OpenStore].
var (
	// ErrUnknownScheme is wrapped for a URL whose scheme no blob store
	// registered (import the package that registers it). It is not
	// broker.ErrUnknownScheme, which stands for a dead-letter store URL
	// (docs/api.md).
	ErrUnknownScheme = errors.New("offload: unknown blob store URL scheme")
	// ErrNoStore is wrapped when the URL names nothing (a missing
	// directory or bucket, without OpenOptions.Create) or something that
	// cannot hold blobs (a regular file).
	ErrNoStore = errors.New("offload: no blob store here")
	// ErrReadOnly is wrapped by Put and Delete of a store opened with
	// OpenOptions.ReadOnly.
	ErrReadOnly = errors.New("offload: store opened read-only")
)

// The blob scheme registry is filled by init functions (this package's
// and offload/blobstore's) and read-only afterwards.
var blobOpeners urlreg.Registry[BlobOpener]

func init() { RegisterStore("file", openDir) }

// RegisterStore makes a blob store scheme available to [OpenStore].
// Packages call it from an init function, so that importing them for
// their side effect registers their schemes. It panics if scheme is not a
// valid lower-case URL scheme, o is nil, or the scheme is already
// registered.
func RegisterStore(scheme string, o BlobOpener) {
	if o == nil {
		panic(fmt.Sprintf("offload: RegisterStore(%q): nil opener", scheme))
	}
	blobOpeners.Register("offload: RegisterStore", scheme, o)
}

// StoreSchemes returns the registered blob store schemes, sorted.
func StoreSchemes() []string { return blobOpeners.Schemes() }

// OpenStore opens the blob store a URL names: file:///var/lib/geodlq/blobs
// (or file://./blobs, relative) here, and s3://bucket?region=…,
// gs://bucket, azblob://container and mem:// once offload/blobstore is
// imported. Close the store when done. An unknown scheme fails with an
// error wrapping [ErrUnknownScheme] that suggests the closest known one;
// nil opts opens an existing store read-write.
func OpenStore(ctx context.Context, rawURL string, opts *OpenOptions) (StoreCloser, error) {
	var o OpenOptions
	if opts != nil {
		o = *opts
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	u, ok := urlreg.Parse(rawURL)
	if !ok {
		return nil, fmt.Errorf("blobs %q is not a URL (want scheme://…, e.g. file:///var/lib/geodlq/blobs): %w", urlreg.Redact(rawURL), ErrUnknownScheme)
	}
	op, found := blobOpeners.Lookup(u.Scheme)
	if !found {
		return nil, fmt.Errorf("blobs %s: %w", urlreg.Redact(rawURL), urlreg.UnknownScheme(u.Scheme, StoreSchemes(), ErrUnknownScheme))
	}
	octx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	defer cancel()
	s, err := op(octx, u, rawURL, o)
	if err != nil {
		if octx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within the connect timeout %v: %w", o.ConnectTimeout, err)
		}
		return nil, fmt.Errorf("blobs %s: %w", urlreg.Redact(rawURL), err)
	}
	if o.ReadOnly {
		return readOnly(s), nil
	}
	return s, nil
}

// openDir opens file://DIR: file:///abs/dir, or file://./rel/dir relative
// to the working directory. The only parameter is create_dir=1 (as
// offload/blobstore's file buckets take it), which is OpenOptions.Create.
func openDir(_ context.Context, u *url.URL, _ string, opts OpenOptions) (StoreCloser, error) {
	if u.Opaque != "" {
		return nil, fmt.Errorf("file: cannot parse the path %q (want file:///abs/dir or file://./dir)", u.Opaque)
	}
	p := u.Path
	switch u.Host {
	case "", "localhost":
	case ".":
		p = strings.TrimPrefix(p, "/")
	default:
		return nil, fmt.Errorf("file: a file URL takes no host (%q): want file:///abs/dir or file://./dir", u.Host)
	}
	if p == "" {
		return nil, errors.New("file: empty directory (want file:///abs/dir or file://./dir)")
	}
	q := u.Query()
	for k := range q {
		if k != "create_dir" {
			return nil, fmt.Errorf("file: unknown parameter %q (the only one is create_dir=1)", k)
		}
	}
	create := opts.Create && !opts.ReadOnly
	if v := q.Get("create_dir"); v == "1" || v == "true" {
		create = create || !opts.ReadOnly
	}
	dir := filepath.FromSlash(p)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !create:
		return nil, fmt.Errorf("file: directory %s does not exist: %w", dir, errors.Join(ErrNoStore, err))
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("file: %w", err)
	case err == nil && !fi.IsDir():
		return nil, fmt.Errorf("file: %s is not a directory: %w", dir, ErrNoStore)
	}
	d, err := NewDirStore(dir)
	if err != nil {
		return nil, err
	}
	return &listedDir{DirStore: d, lister: DirLister(d)}, nil
}

// listedDir is a DirStore that lists its objects, so that
// [Offloader.Sweep] can collect garbage in a store [OpenStore] opened.
type listedDir struct {
	*DirStore
	lister Lister
}

// List implements [Lister] with [DirLister].
func (d *listedDir) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	return d.lister.List(ctx, prefix, fn)
}

// readOnly wraps s so that writes fail with ErrReadOnly; reads, URI and
// List go to s.
func readOnly(s StoreCloser) StoreCloser { return &roStore{s: s} }

type roStore struct{ s StoreCloser }

func (r *roStore) Put(_ context.Context, key string, _ io.Reader, _ int64) error {
	if err := checkKey("put", key); err != nil {
		return err
	}
	return fmt.Errorf("offload: put %q: %w", key, ErrReadOnly)
}

func (r *roStore) Delete(_ context.Context, key string) error {
	if err := checkKey("delete", key); err != nil {
		return err
	}
	return fmt.Errorf("offload: delete %q: %w", key, ErrReadOnly)
}

func (r *roStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return r.s.Get(ctx, key)
}

func (r *roStore) Exists(ctx context.Context, key string) (bool, error) {
	return r.s.Exists(ctx, key)
}

func (r *roStore) Close() error { return r.s.Close() }

// URI returns the wrapped store's URI, or "".
func (r *roStore) URI() string {
	if u, ok := r.s.(interface{ URI() string }); ok {
		return u.URI()
	}
	return ""
}

// List lists the wrapped store when it can ([ErrNotListable] otherwise).
func (r *roStore) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if l, ok := r.s.(Lister); ok {
		return l.List(ctx, prefix, fn)
	}
	return ErrNotListable
}
