package offload

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
)

// MemStore is a [Store] in process memory, for tests and for pipelines
// whose dead-letter store is itself in memory. Objects are immutable:
// Put makes the store's one copy of the object, Get hands out a reader
// over it without copying.
type MemStore struct {
	mu      sync.RWMutex
	objects map[string]string
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore {
	return &MemStore{objects: make(map[string]string)}
}

// URI returns "mem://geodlq", the default base URI of an [Offloader] over a
// MemStore.
func (s *MemStore) URI() string { return "mem://geodlq" }

// Put implements [Store.Put]. The object is read into one allocation. Its
// size is taken from the reader when it can tell (a Len() int method, as
// *bytes.Reader, *bytes.Buffer and *strings.Reader have; a mismatch with
// the declared size fails at once), and never from the declared size
// alone: otherwise the allocation grows with the bytes that arrive.
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
	obj, err := readExactly(ctx, r, size)
	if err != nil {
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("offload: put %q: %w", key, err)
	}
	s.mu.Lock()
	s.objects[key] = obj
	s.mu.Unlock()
	return nil
}

// maxMemObject bounds a single in-memory object.
const maxMemObject = min(1<<34, math.MaxInt)

// memReader reads one stored object and reports its size.
type memReader struct{ *strings.Reader }

// Close does nothing.
func (memReader) Close() error { return nil }

// Get implements [Store.Get]. The reader never blocks.
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
	return memReader{strings.NewReader(b)}, nil
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

const (
	// copyChunk bounds one memmove, which cannot be preempted.
	copyChunk = 1 << 20
	// initialBuffer is the first allocation for an object whose reader
	// does not tell its length.
	initialBuffer = 64 << 10
)

// readExactly reads exactly size bytes from r into one new string. The
// allocation is the reader's own length when it tells it (and equals
// size), else it starts small and grows with the data: a declared size
// alone never decides an allocation. The copy is made in chunks, each a
// preemptible step, and stops once ctx is done.
func readExactly(ctx context.Context, r io.Reader, size int64) (string, error) {
	var b strings.Builder // grows without zeroing: the bytes are overwritten
	if l, ok := r.(interface{ Len() int }); ok {
		if n := int64(l.Len()); n != size {
			return "", fmt.Errorf("reader yielded %s bytes, declared %d: %w", countString(n, size, n > size), size, ErrSizeMismatch)
		}
		b.Grow(int(size))
		if wt, ok := r.(io.WriterTo); ok {
			// Straight from the reader's memory: one copy.
			n, err := wt.WriteTo(&chunkWriter{ctx: ctx, b: &b, limit: size})
			if err != nil {
				return "", fmt.Errorf("reading object: %w", err)
			}
			if n != size {
				return "", fmt.Errorf("reader yielded %d bytes, declared %d: %w", n, size, ErrSizeMismatch)
			}
			return b.String(), nil
		}
	} else {
		b.Grow(int(min(size, initialBuffer)))
	}
	if err := copyExactly(&chunkWriter{ctx: ctx, b: &b, limit: size + 1}, r, size); err != nil {
		return "", err
	}
	return b.String(), nil
}

// chunkWriter appends to a strings.Builder in chunks of at most copyChunk
// bytes, failing once ctx is done or more than limit bytes arrive.
type chunkWriter struct {
	ctx   context.Context
	b     *strings.Builder
	limit int64
}

// Write appends p.
func (w *chunkWriter) Write(p []byte) (int, error) {
	if int64(w.b.Len())+int64(len(p)) > w.limit {
		return 0, ErrSizeMismatch
	}
	n := 0
	for len(p) > 0 {
		if err := w.ctx.Err(); err != nil {
			return n, err
		}
		c := min(len(p), copyChunk)
		w.b.Write(p[:c])
		p, n = p[c:], n+c
	}
	return n, nil
}
