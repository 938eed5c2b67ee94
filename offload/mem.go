package offload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// MemStore is a [Store] in process memory, for tests and for pipelines
// whose dead-letter store is itself in memory. Objects are immutable byte
// slices: Get hands out a reader over the stored slice without copying,
// and Put stores a fresh slice (the store's one copy of the object).
type MemStore struct {
	mu      sync.RWMutex
	objects map[string][]byte
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore {
	return &MemStore{objects: make(map[string][]byte)}
}

// URI returns "mem://geodlq", the default base URI of an [Offloader] over a
// MemStore.
func (s *MemStore) URI() string { return "mem://geodlq" }

// Put implements [Store.Put]. The object is read into one allocation of
// exactly size bytes.
func (s *MemStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := checkKey("put", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	if size < 0 || size > maxMemObject {
		return fmt.Errorf("offload: put %q: size %d: %w", key, size, ErrSizeMismatch)
	}
	buf, err := readExactly(r, size)
	if err != nil {
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	s.mu.Lock()
	s.objects[key] = buf
	s.mu.Unlock()
	return nil
}

// maxMemObject bounds a single in-memory object (it also keeps a bogus
// size from turning into a huge allocation).
const maxMemObject = 1 << 34

// Get implements [Store.Get].
func (s *MemStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey("get", key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("offload: get %q: %w", key, err)
	}
	s.mu.RLock()
	b, ok := s.objects[key]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("offload: get %q: %w", key, ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Exists implements [Store.Exists].
func (s *MemStore) Exists(ctx context.Context, key string) (bool, error) {
	if err := checkKey("exists", key); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("offload: exists %q: %w", key, err)
	}
	s.mu.RLock()
	_, ok := s.objects[key]
	s.mu.RUnlock()
	return ok, nil
}

// Delete implements [Store.Delete].
func (s *MemStore) Delete(ctx context.Context, key string) error {
	if err := checkKey("delete", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("offload: delete %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[key]; !ok {
		return fmt.Errorf("offload: delete %q: %w", key, ErrNotFound)
	}
	delete(s.objects, key)
	return nil
}

// Len returns the number of objects stored.
func (s *MemStore) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.objects)
}

// Keys returns the stored keys, in no particular order.
func (s *MemStore) Keys() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := make([]string, 0, len(s.objects))
	for k := range s.objects {
		keys = append(keys, k)
	}
	return keys
}

// readExactly reads exactly size bytes from r into one new slice. A reader
// that can write itself out (bytes.Reader, bytes.Buffer, …) is copied
// straight into it.
func readExactly(r io.Reader, size int64) ([]byte, error) {
	if wt, ok := r.(io.WriterTo); ok {
		w := &appendWriter{limit: size}
		if _, err := wt.WriteTo(w); err != nil && !errors.Is(err, errTooMuch) {
			return nil, fmt.Errorf("reading object: %w", err)
		}
		if w.over || int64(len(w.buf)) != size {
			return nil, fmt.Errorf("reader yielded %s bytes, declared %d: %w", countString(int64(len(w.buf)), size, w.over), size, ErrSizeMismatch)
		}
		if w.buf == nil {
			w.buf = []byte{}
		}
		return w.buf, nil
	}
	// Grow with the data rather than trusting size for the allocation.
	b := bytes.NewBuffer(make([]byte, 0, min(size, initialBuffer)))
	if err := copyExactly(b, r, size); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

const (
	copyChunk     = 1 << 20
	initialBuffer = 1 << 26
)

var errTooMuch = errors.New("more bytes than declared")

// appendWriter collects at most limit bytes.
type appendWriter struct {
	buf   []byte
	limit int64
	over  bool
}

// Write appends p, failing once more than limit bytes arrive.
func (w *appendWriter) Write(p []byte) (int, error) {
	if int64(len(w.buf))+int64(len(p)) > w.limit {
		w.over = true
		return 0, errTooMuch
	}
	if w.buf == nil {
		// Exactly the object when it arrives at once; otherwise grow with
		// the data rather than trusting the declared size.
		w.buf = make([]byte, 0, max(int64(len(p)), min(w.limit, initialBuffer)))
	}
	// Copy in chunks: one huge memmove cannot be preempted.
	for q := p; len(q) > 0; {
		n := min(len(q), copyChunk)
		w.buf = append(w.buf, q[:n]...)
		q = q[n:]
	}
	return len(p), nil
}
