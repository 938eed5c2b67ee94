package validity

import (
	"math"
	"slices"
)

// A static R-tree built as GEOS 3.11's TemplateSTRtree builds it (Sort-Tile-
// Recursive, ten children a node) and queried in the same order. The order
// in which a query meets the items decides which of several faults GEOS
// finds first, so the build reproduces TemplateSTRtree step by step,
// including its sorts: std::sort is not stable, and nodes whose centres tie
// end up in the order libstdc++'s introsort leaves them (sortNodes).

// nodeCapacity is TemplateSTRtree's default node capacity.
const nodeCapacity = 10

// env is an envelope: min x, min y, max x, max y.
type env struct{ minx, miny, maxx, maxy float64 }

// intersects is Envelope::intersects.
func (e *env) intersects(o *env) bool {
	return o.minx <= e.maxx && o.maxx >= e.minx && o.miny <= e.maxy && o.maxy >= e.miny
}

// covers is Envelope::covers.
func (e *env) covers(o *env) bool {
	return o.minx >= e.minx && o.maxx <= e.maxx && o.miny >= e.miny && o.maxy <= e.maxy
}

// expand is Envelope::expandToInclude(const Envelope*), for non-null
// envelopes.
func (e *env) expand(o *env) {
	if o.minx < e.minx {
		e.minx = o.minx
	}
	if o.maxx > e.maxx {
		e.maxx = o.maxx
	}
	if o.miny < e.miny {
		e.miny = o.miny
	}
	if o.maxy > e.maxy {
		e.maxy = o.maxy
	}
}

// segEnv is Envelope(a, b).
func segEnv(ax, ay, bx, by float64) env {
	var e env
	if ax < bx {
		e.minx, e.maxx = ax, bx
	} else {
		e.minx, e.maxx = bx, ax
	}
	if ay < by {
		e.miny, e.maxy = ay, by
	} else {
		e.miny, e.maxy = by, ay
	}
	return e
}

// strNode is a leaf (item >= 0, an index the caller gave) or a branch whose
// children are nodes[lo:hi].
type strNode struct {
	env
	item   int32
	lo, hi int32
}

// strTree is the tree; nodes holds leaves first, then each level of
// branches, the root last, as TemplateSTRtree lays them out.
type strTree struct {
	nodes []strNode
	root  int32 // -1 when empty
	// Scratch for sorting.
	keys    []sortKey
	scratch []strNode
}

// reset empties the tree, keeping its memory.
func (t *strTree) reset() {
	t.nodes = t.nodes[:0]
	t.root = -1
}

// reserve makes room for a tree of n leaves, so that neither inserting
// them nor building over them grows the node slice (each growth copies it
// and leaves the old one to the collector: with hundreds of thousands of
// leaves, the peak memory of a check).
func (t *strTree) reserve(n int) {
	if size := treeSize(len(t.nodes) + n); cap(t.nodes) < size {
		grown := make([]strNode, len(t.nodes), size)
		copy(grown, t.nodes)
		t.nodes = grown
	}
}

// insert adds an item; GEOS skips null envelopes, which callers here never
// have.
func (t *strTree) insert(e env, item int32) {
	t.nodes = append(t.nodes, strNode{env: e, item: item, lo: -1, hi: -1})
}

// sliceCount and sliceCapacity are TemplateSTRtree's, in floating point as
// there.
func sliceCount(n int) int {
	minLeafCount := math.Ceil(float64(n) / float64(nodeCapacity))
	return int(math.Ceil(math.Sqrt(minLeafCount)))
}

func sliceCapacity(n, slices int) int {
	return int(math.Ceil(float64(n) / float64(slices)))
}

// treeSize is the number of nodes a tree of n leaves has.
func treeSize(n int) int {
	total, level := n, n
	for level > 1 {
		slices := sliceCount(level)
		per := sliceCapacity(level, slices)
		parents := 0
		for range slices {
			inSlice := min(level, per)
			level -= inSlice
			parents += int(math.Ceil(float64(inSlice) / float64(nodeCapacity)))
		}
		total += parents
		level = parents
	}
	return total
}

// build builds the tree over the inserted items.
func (t *strTree) build() {
	t.root = -1
	if len(t.nodes) == 0 {
		return
	}
	if size := treeSize(len(t.nodes)); cap(t.nodes) < size {
		grown := make([]strNode, len(t.nodes), size)
		copy(grown, t.nodes)
		t.nodes = grown
	}
	begin, number := 0, len(t.nodes)
	for number > 1 {
		t.parents(begin, number)
		begin += number
		number = len(t.nodes) - begin
	}
	t.root = int32(len(t.nodes) - 1)
}

// parents adds the parent level of nodes[begin:begin+number].
func (t *strTree) parents(begin, number int) {
	slices := sliceCount(number)
	per := sliceCapacity(number, slices)
	end := begin + number
	t.sortNodes(t.nodes[begin:end], keyX)
	start := begin
	for range slices {
		inSlice := min(end-start, per)
		sliceEnd := start + inSlice
		t.slice(start, sliceEnd)
		start = sliceEnd
	}
}

// slice adds the branches of one vertical slice.
func (t *strTree) slice(begin, end int) {
	t.sortNodes(t.nodes[begin:end], keyY)
	for first := begin; first != end; {
		n := min(nodeCapacity, end-first)
		b := strNode{env: t.nodes[first].env, item: -1, lo: int32(first), hi: int32(first + n)}
		for i := first + 1; i < first+n; i++ {
			b.expand(&t.nodes[i].env)
		}
		t.nodes = append(t.nodes, b)
		first += n
	}
}

// Sort keys: TemplateSTRtree compares minX+maxX (or minY+maxY).
const (
	keyX = 0
	keyY = 1
)

func nodeKey(n *strNode, axis int) float64 {
	if axis == keyX {
		return n.minx + n.maxx
	}
	return n.miny + n.maxy
}

// sortNodes sorts s by key as libstdc++'s std::sort (GCC 12) does:
// introsort with a median-of-three pivot, heapsort past a depth limit, and
// a final insertion sort, so that equal keys end in the same order. The
// algorithm runs on (key, index) pairs, whose moves are cheap, and the
// nodes are permuted once at the end: the comparisons, and so the
// permutation, are those std::sort makes on the nodes.
func (t *strTree) sortNodes(s []strNode, axis int) {
	n := len(s)
	if n < 2 {
		return
	}
	ks := slices.Grow(t.keys[:0], n)
	for i := range s {
		ks = append(ks, sortKey{nodeKey(&s[i], axis), int32(i)})
	}
	t.keys = ks
	sortKeys(ks)
	tmp := append(slices.Grow(t.scratch[:0], n), s...)
	t.scratch = tmp
	for i, k := range ks {
		s[i] = tmp[k.i]
	}
}

// sortKey is a node's sort key and its index before the sort.
type sortKey struct {
	k float64
	i int32
}

// sortKeys is std::sort on keys.
func sortKeys(s []sortKey) {
	n := len(s)
	if n < 2 {
		return
	}
	introsortLoop(s, 0, n, 2*lg(n))
	finalInsertionSort(s, 0, n)
}

// lg is std::__lg: the index of the highest set bit.
func lg(n int) int {
	k := 0
	for n > 1 {
		n >>= 1
		k++
	}
	return k
}

// sortThreshold is libstdc++'s _S_threshold.
const sortThreshold = 16

func introsortLoop(s []sortKey, first, last, depth int) {
	for last-first > sortThreshold {
		if depth == 0 {
			heapSort(s, first, last)
			return
		}
		depth--
		cut := partitionPivot(s, first, last)
		introsortLoop(s, cut, last, depth)
		last = cut
	}
}

func partitionPivot(s []sortKey, first, last int) int {
	mid := first + (last-first)/2
	moveMedianToFirst(s, first, first+1, mid, last-1)
	return unguardedPartition(s, first+1, last, first)
}

func moveMedianToFirst(s []sortKey, result, a, b, c int) {
	if s[a].k < s[b].k {
		switch {
		case s[b].k < s[c].k:
			s[result], s[b] = s[b], s[result]
		case s[a].k < s[c].k:
			s[result], s[c] = s[c], s[result]
		default:
			s[result], s[a] = s[a], s[result]
		}
	} else {
		switch {
		case s[a].k < s[c].k:
			s[result], s[a] = s[a], s[result]
		case s[b].k < s[c].k:
			s[result], s[c] = s[c], s[result]
		default:
			s[result], s[b] = s[b], s[result]
		}
	}
}

func unguardedPartition(s []sortKey, first, last, pivot int) int {
	pk := s[pivot].k
	for {
		for s[first].k < pk {
			first++
		}
		last--
		for pk < s[last].k {
			last--
		}
		if first >= last {
			return first
		}
		s[first], s[last] = s[last], s[first]
		first++
	}
}

func finalInsertionSort(s []sortKey, first, last int) {
	if last-first > sortThreshold {
		insertionSort(s, first, first+sortThreshold)
		for i := first + sortThreshold; i < last; i++ {
			unguardedLinearInsert(s, i)
		}
		return
	}
	insertionSort(s, first, last)
}

func insertionSort(s []sortKey, first, last int) {
	if first == last {
		return
	}
	for i := first + 1; i < last; i++ {
		if s[i].k < s[first].k {
			v := s[i]
			copy(s[first+1:i+1], s[first:i])
			s[first] = v
		} else {
			unguardedLinearInsert(s, i)
		}
	}
}

func unguardedLinearInsert(s []sortKey, last int) {
	v := s[last]
	next := last - 1
	for v.k < s[next].k {
		s[last] = s[next]
		last = next
		next--
	}
	s[last] = v
}

// heapSort is std::partial_sort(first, last, last): make_heap, then
// sort_heap.
func heapSort(s []sortKey, first, last int) {
	h := s[first:last]
	n := len(h)
	if n >= 2 {
		for parent := (n - 2) / 2; ; parent-- {
			adjustHeap(h, parent, n, h[parent])
			if parent == 0 {
				break
			}
		}
	}
	for end := n; end > 1; {
		end--
		v := h[end]
		h[end] = h[0]
		adjustHeap(h, 0, end, v)
	}
}

func adjustHeap(h []sortKey, hole, n int, v sortKey) {
	top := hole
	second := hole
	for second < (n-1)/2 {
		second = 2 * (second + 1)
		if h[second].k < h[second-1].k {
			second--
		}
		h[hole] = h[second]
		hole = second
	}
	if n&1 == 0 && second == (n-2)/2 {
		second = 2 * (second + 1)
		h[hole] = h[second-1]
		hole = second - 1
	}
	// push_heap
	parent := (hole - 1) / 2
	for hole > top && h[parent].k < v.k {
		h[hole] = h[parent]
		hole = parent
		parent = (hole - 1) / 2
	}
	h[hole] = v
}
