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
	"slices"
	"strings"

	"github.com/geodlq/geodlq/offload"
)

// attrsExt is the suffix of fileblob's sidecar files; fileblob refuses
// keys ending in it, and so does a Store over a file bucket.
const attrsExt = ".attrs"

// fileDirOf returns the absolute directory a file:// URL names.
func fileDirOf(u *url.URL) (string, error) {
	p := u.Path
	if u.Host == "." {
		p = strings.TrimPrefix(p, "/")
	} else if u.Host != "" && u.Host != "localhost" {
		return "", errors.New("file URLs take no host")
	}
	return filepath.Abs(filepath.FromSlash(p))
}

// openFiles opens the directory of a file bucket for the store's own
// file access, with prefix (the bucket's prefix parameter, "" or ending
// in "/") prepended to every key.
func (s *Store) openFiles(dir, prefix string) error {
	if prefix != "" && (!strings.HasSuffix(prefix, "/") || !offload.ValidKey(strings.TrimSuffix(prefix, "/"))) {
		return fmt.Errorf("blobstore: file bucket prefix %q must be a valid key followed by '/'", prefix)
	}
	d, err := offload.NewDirStore(dir)
	if err != nil {
		return fmt.Errorf("blobstore: %w", err)
	}
	s.files, s.filePrefix = d, prefix
	return nil
}

// fileDirFromURI finds the directory of the file bucket b from the
// store's URI: the URI's path, or the nearest of its parents, that is the
// bucket's directory; what lies below it is the bucket's prefix.
func fileDirFromURI(b interface{ As(any) bool }, uri string) (dir, prefix string, err error) {
	var fi os.FileInfo
	if !b.As(&fi) {
		return "", "", errors.New("not a file bucket")
	}
	u, err := url.Parse(uri)
	if err != nil || !strings.EqualFold(u.Scheme, "file") {
		return "", "", fmt.Errorf("a file bucket needs a file:// uri naming its directory, not %q", uri)
	}
	p, err := fileDirOf(u)
	if err != nil {
		return "", "", fmt.Errorf("uri %q: %w", uri, err)
	}
	var rest []string
	for {
		if st, err := os.Stat(p); err == nil && os.SameFile(st, fi) {
			if len(rest) == 0 {
				return p, "", nil
			}
			slices.Reverse(rest)
			return p, strings.Join(rest, "/") + "/", nil
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", "", fmt.Errorf("uri %q names no directory of the bucket", uri)
		}
		rest = append(rest, filepath.Base(p))
		p = parent
	}
}

// fileKey checks key for a file bucket and returns the key of its file
// under the store's directory.
func (s *Store) fileKey(op, key string) (string, error) {
	if err := checkKey(op, key); err != nil {
		return "", err
	}
	if strings.HasSuffix(key, attrsExt) {
		return "", fmt.Errorf("blobstore: %s %q: keys ending in %q name fileblob's sidecar files: %w", op, key, attrsExt, offload.ErrInvalidKey)
	}
	return s.filePrefix + key, nil
}

// fileErr prefixes an error of the directory store.
func fileErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("blobstore: %w", err)
}

// putFile implements Put on a file bucket.
func (s *Store) putFile(ctx context.Context, key string, r io.Reader, size int64) error {
	fk, err := s.fileKey("put", key)
	if err != nil {
		return err
	}
	if s.opts.SHA256Metadata {
		if want, ok := keySHA256(key); ok {
			r = &verifyingReader{r: r, h: sha256.New(), want: want, size: size, uri: s.uri + "/" + key}
		}
	}
	return fileErr(s.files.Put(ctx, fk, r, size))
}

// verifyingReader hashes what it reads and, at the end of exactly size
// bytes, fails instead of reporting io.EOF when the hash is not want: the
// write is then aborted before it is committed.
type verifyingReader struct {
	r    io.Reader
	h    hash.Hash
	want string
	size int64
	n    int64
	uri  string
}

// Read reads and hashes.
func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if err == io.EOF && v.n == v.size {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
			return n, &offload.IntegrityError{URI: v.uri, Problem: offload.ProblemHash,
				WantSize: v.size, GotSize: v.n, WantSHA256: v.want, GotSHA256: got}
		}
	}
	return n, err
}

// getFile implements Get on a file bucket.
func (s *Store) getFile(ctx context.Context, key string) (io.ReadCloser, error) {
	fk, err := s.fileKey("get", key)
	if err != nil {
		return nil, err
	}
	rc, err := s.files.Get(ctx, fk)
	return rc, fileErr(err)
}

// existsFile implements Exists on a file bucket.
func (s *Store) existsFile(ctx context.Context, key string) (bool, error) {
	fk, err := s.fileKey("exists", key)
	if err != nil {
		return false, err
	}
	ok, err := s.files.Exists(ctx, fk)
	return ok, fileErr(err)
}

// deleteFile implements Delete on a file bucket; a sidecar file left by
// an earlier fileblob write goes with the object.
func (s *Store) deleteFile(ctx context.Context, key string) error {
	fk, err := s.fileKey("delete", key)
	if err != nil {
		return err
	}
	if err := s.files.Delete(ctx, fk); err != nil {
		return fileErr(err)
	}
	if err := s.files.Delete(ctx, fk+attrsExt); err != nil && !errors.Is(err, offload.ErrNotFound) {
		return fileErr(err)
	}
	return nil
}

// copyFile implements Copy on a file bucket: the source is read through
// the directory store and written as Put writes.
func (s *Store) copyFile(ctx context.Context, dstKey, srcKey string) error {
	dst, err := s.fileKey("copy", dstKey)
	if err != nil {
		return err
	}
	src, err := s.fileKey("copy", srcKey)
	if err != nil {
		return err
	}
	rc, err := s.files.Get(ctx, src)
	if err != nil {
		return fileErr(err)
	}
	defer rc.Close()
	sized, ok := rc.(interface{ Size() int64 })
	if !ok {
		return fmt.Errorf("blobstore: copy %q: the directory store's reader reports no size", srcKey)
	}
	return fileErr(s.files.Put(ctx, dst, rc, sized.Size()))
}

// listFiles implements List on a file bucket: a walk of the directory
// through the directory store, reporting regular files only (no link,
// FIFO or sidecar file) and never leaving the directory.
func (s *Store) listFiles(ctx context.Context, prefix string, fn func(offload.ObjectInfo) error) error {
	err := offload.DirLister(s.files).List(ctx, s.filePrefix+prefix, func(o offload.ObjectInfo) error {
		key, ok := strings.CutPrefix(o.Key, s.filePrefix)
		if !ok || strings.HasSuffix(key, attrsExt) || !offload.ValidKey(key) || path.Clean(key) != key {
			return nil
		}
		o.Key = key
		return fn(o)
	})
	return fileErr(err)
}
