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
// Objects are regular files. A symbolic link, FIFO, socket, device or
// directory at a key is not an object: Get and Delete refuse it with an
// error wrapping [ErrNotRegular] and [ErrNotFound] (Get never opens it, so
// a FIFO cannot block), Exists reports false, and Put replaces it (a
// directory makes Put fail). Directories on the way to a key may be
// symbolic links that stay inside the store's directory; a path that
// leaves it is refused by every method with an error wrapping
// [ErrOutsideStore], and nothing is read, written or removed there.
//
// Put writes to a temporary file in the destination's directory (named
// with a leading '.', which no valid key has), syncs it, and renames it
// over the key: a reader sees the old file or the new one, never a partial
// write, and a crash leaves at worst a stray temporary file. Files are
// created with mode 0640 and directories with 0750 (before the umask).
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
			return fmt.Errorf("offload: put %q: %w", key, s.pathError(key, err, false))
		}
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(dir, ".tmp-"+path.Base(key)+"-"+hex.EncodeToString(rnd[:]))
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("offload: put %q: %w", key, s.pathError(key, err, false))
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
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	if err := s.root.Rename(tmp, key); err != nil {
		_ = s.root.Remove(tmp)
		if st, lerr := s.root.Lstat(key); lerr == nil && st.IsDir() {
			err = fmt.Errorf("%w (a directory): %w", ErrNotRegular, err)
		}
		return fmt.Errorf("offload: put %q: %w", key, s.pathError(key, err, false))
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

// pathError classifies the error of a file operation on key (or on a
// path on the way to it): a missing file wraps ErrNotFound, a path
// through a symbolic link leading outside the root wraps ErrOutsideStore
// (and ErrNotFound too for a read or a removal: no object is there).
func (s *DirStore) pathError(key string, err error, reading bool) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case !s.escapes(key):
		return err
	case reading:
		return fmt.Errorf("%w: %w: %w", ErrOutsideStore, ErrNotFound, err)
	}
	return fmt.Errorf("%w: %w", ErrOutsideStore, err)
}

// escapes reports whether a directory on the way to key is a symbolic
// link that the root cannot resolve inside itself. It is only asked after
// an operation failed, to say why.
func (s *DirStore) escapes(key string) bool {
	for i := 0; i < len(key); i++ {
		if key[i] != '/' {
			continue
		}
		dir := key[:i]
		st, err := s.root.Lstat(dir)
		if err != nil {
			return !errors.Is(err, fs.ErrNotExist)
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			if _, err := s.root.Stat(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return true
			}
		}
	}
	return false
}

// notRegular is the error for a key naming something other than a
// regular file.
func notRegular(mode fs.FileMode) error {
	kind := "a " + mode.Type().String()
	switch {
	case mode&fs.ModeSymlink != 0:
		kind = "a symbolic link"
	case mode&fs.ModeNamedPipe != 0:
		kind = "a FIFO"
	case mode&fs.ModeSocket != 0:
		kind = "a socket"
	case mode&fs.ModeDevice != 0:
		kind = "a device"
	case mode.IsDir():
		kind = "a directory"
	}
	return fmt.Errorf("%w (%s): %w", ErrNotRegular, kind, ErrNotFound)
}

// open opens the regular file at key for reading. It never follows a
// symbolic link at key, and never opens a FIFO, socket or device: the
// entry is checked with Lstat first, opened without blocking, and must be
// the same regular file once open (else it was replaced meanwhile, and
// the check is repeated).
func (s *DirStore) open(key string) (*os.File, int64, error) {
	for attempt := 0; ; attempt++ {
		lst, err := s.root.Lstat(key)
		if err != nil {
			return nil, 0, s.pathError(key, err, true)
		}
		if !lst.Mode().IsRegular() {
			return nil, 0, notRegular(lst.Mode())
		}
		f, err := s.root.OpenFile(key, os.O_RDONLY|openNonblock, 0)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && attempt < 3 {
				continue // replaced between Lstat and open
			}
			return nil, 0, s.pathError(key, err, true)
		}
		st, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, 0, err
		}
		if st.Mode().IsRegular() && os.SameFile(lst, st) {
			return f, st.Size(), nil
		}
		_ = f.Close()
		if attempt >= 3 {
			return nil, 0, notRegular(st.Mode())
		}
	}
}

// fileReader is the reader DirStore.Get returns: the open file, failing
// once ctx is done, and reporting its size.
type fileReader struct {
	ctx  context.Context
	f    *os.File
	size int64
}

// Read reads from the file unless the context is done.
func (r *fileReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.f.Read(p)
}

// Size returns the file's size when it was opened.
func (r *fileReader) Size() int64 { return r.size }

// Close closes the file.
func (r *fileReader) Close() error { return r.f.Close() }

// Get implements [Store.Get]. The file is opened once, so a concurrent
// replace (a rename) does not affect a reader already open. The reader
// fails once ctx is done.
func (s *DirStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey("get", key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("offload: get %q: %w", key, err)
	}
	f, size, err := s.open(key)
	if err != nil {
		return nil, fmt.Errorf("offload: get %q: %w", key, err)
	}
	return &fileReader{ctx: ctx, f: f, size: size}, nil
}

// Exists implements [Store.Exists]: true for a regular file, false for a
// missing key or anything else at it. A path leading outside the
// directory is an error wrapping [ErrOutsideStore].
func (s *DirStore) Exists(ctx context.Context, key string) (bool, error) {
	if err := checkKey("exists", key); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("offload: exists %q: %w", key, err)
	}
	st, err := s.root.Lstat(key)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("offload: exists %q: %w", key, s.pathError(key, err, false))
	}
	return st.Mode().IsRegular(), nil
}

// Delete implements [Store.Delete]. Only a regular file is removed.
func (s *DirStore) Delete(ctx context.Context, key string) error {
	if err := checkKey("delete", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("offload: delete %q: %w", key, err)
	}
	st, err := s.root.Lstat(key)
	if err != nil {
		return fmt.Errorf("offload: delete %q: %w", key, s.pathError(key, err, true))
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("offload: delete %q: %w", key, notRegular(st.Mode()))
	}
	if err := s.root.Remove(key); err != nil {
		return fmt.Errorf("offload: delete %q: %w", key, s.pathError(key, err, true))
	}
	return nil
}
