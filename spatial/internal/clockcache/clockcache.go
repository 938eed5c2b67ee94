// Package clockcache is a bounded map with CLOCK (second-chance)
// eviction, shared by package spatial (CRS resolutions) and spatial/proj
// (PROJ transformations).
package clockcache

import (
	"sync"
	"sync/atomic"
)

// Cache is a bounded map with CLOCK (second-chance) eviction. Hits take
// a read lock and set an atomic reference bit, so concurrent lookups of hot
// keys do not contend on a write lock as an LRU list would.
type Cache[K comparable, V any] struct {
	mu   sync.RWMutex
	idx  map[K]int
	ents []entry[K, V]
	hand int
	size int
}

type entry[K comparable, V any] struct {
	key K
	val V
	ref atomic.Bool
}

// New returns a cache of at most size entries (at least one).
func New[K comparable, V any](size int) *Cache[K, V] {
	return &Cache[K, V]{idx: make(map[K]int), size: max(size, 1)}
}

// Get returns the value cached for k.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	i, ok := c.idx[k]
	if !ok {
		var zero V
		return zero, false
	}
	e := &c.ents[i]
	if !e.ref.Load() {
		e.ref.Store(true)
	}
	return e.val, true
}

// Put caches v for k, evicting an entry not used since the hand last
// passed it when the cache is full.
func (c *Cache[K, V]) Put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := c.idx[k]; ok {
		c.ents[i].val = v
		return
	}
	if len(c.ents) < c.size {
		c.ents = append(c.ents, entry[K, V]{key: k, val: v})
		c.idx[k] = len(c.ents) - 1
		return
	}
	for c.ents[c.hand].ref.Load() {
		c.ents[c.hand].ref.Store(false)
		c.hand = (c.hand + 1) % len(c.ents)
	}
	e := &c.ents[c.hand]
	delete(c.idx, e.key)
	e.key, e.val = k, v
	e.ref.Store(false)
	c.idx[k] = c.hand
	c.hand = (c.hand + 1) % len(c.ents)
}

// Len returns the number of cached entries.
func (c *Cache[K, V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.ents)
}

// Clear drops every entry.
func (c *Cache[K, V]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.idx)
	c.ents, c.hand = nil, 0
}
