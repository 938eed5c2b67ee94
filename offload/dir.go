package offload

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
)

// DirStore is a [Store] in a local directory: each key is a file path
// relative to the directory. All file operations go through an [os.Root],
// so no key (and no symbolic link planted in the directory) can reach
// outside it, on top of [ValidKey]'s checks.
//
// Put writes to a temporary file in the destination's directory (named
// with a leading '.', which no valid key has), syncs it, and renames it
// over the key: a reader sees the old file or the new one, never a partial
// write, and a crash leaves at worst a stray temporary file.
type DirStore struct {
	root *os.Root
	dir  string
}

var _ Store = (*DirStore)(nil)

// NewDirStore returns a store in dir, creating the directory (mode 0750)
// if it does not exist. Close the store to release the directory handle.
func NewDirStore(dir string) (*DirStore, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("offload: dir store %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, fmt.Errorf("offload: dir store: %w", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("offload: dir store: %w", err)
	}
	return &DirStore{root: root, dir: abs}, nil
}

// Dir returns the store's absolute directory.
func (s *DirStore) Dir() string { return s.dir }

// URI returns the directory as a file URI ("file:///var/lib/dlq"), the
// default base URI of an [Offloader] over a DirStore.
func (s *DirStore) URI() string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(s.dir)}).String()
}

// Close releases the directory handle. The store must not be used after.
func (s *DirStore) Close() error { return s.root.Close() }

// Put implements [Store.Put].
func (s *DirStore) Put(ctx context.Context, key string, r io.Reader, size int64) (err error) {
	if err := checkKey("put", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	dir := path.Dir(key)
	if dir != "." {
		if err := s.root.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("offload: put %q: %w", key, err)
		}
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(dir, ".tmp-"+path.Base(key)+"-"+hex.EncodeToString(rnd[:]))
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = s.root.Remove(tmp)
		}
	}()
	if err := copyExactly(&ctxWriter{ctx: ctx, w: f}, r, size); err != nil {
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	if err := s.root.Rename(tmp, key); err != nil {
		_ = s.root.Remove(tmp)
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	// Make the rename durable; failure here does not undo the write.
	if d, derr := s.root.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// ctxWriter fails a copy once ctx is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

// Write writes p unless the context is done.
func (c *ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

func mapNotExist(op, key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("offload: %s %q: %w", op, key, ErrNotFound)
	}
	return fmt.Errorf("offload: %s %q: %w", op, key, err)
}

// Get implements [Store.Get]. The file is opened once, so a concurrent
// replace (a rename) does not affect a reader already open.
func (s *DirStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey("get", key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("offload: get %q: %w", key, err)
	}
	f, err := s.root.Open(key)
	if err != nil {
		return nil, mapNotExist("get", key, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("offload: get %q: not a regular file: %w", key, ErrNotFound)
	}
	return f, nil
}

// Exists implements [Store.Exists].
func (s *DirStore) Exists(ctx context.Context, key string) (bool, error) {
	if err := checkKey("exists", key); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("offload: exists %q: %w", key, err)
	}
	st, err := s.root.Stat(key)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("offload: exists %q: %w", key, err)
	}
	return st.Mode().IsRegular(), nil
}

// Delete implements [Store.Delete].
func (s *DirStore) Delete(ctx context.Context, key string) error {
	if err := checkKey("delete", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("offload: delete %q: %w", key, err)
	}
	st, err := s.root.Lstat(key)
	if err != nil {
		return mapNotExist("delete", key, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("offload: delete %q: not a regular file: %w", key, ErrNotFound)
	}
	if err := s.root.Remove(key); err != nil {
		return mapNotExist("delete", key, err)
	}
	return nil
}
