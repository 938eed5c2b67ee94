package validity

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/paulmach/orb"
)

// The fast path of the intersection search. Which fault GEOS reports
// depends on the order in which its STR tree meets the chains; whether
// there is any fault does not: GEOS tests every pair of chains whose
// envelopes meet (each once, the earlier chain first) until it finds one,
// and each pair's verdict depends only on the pair. So the search first
// meets the same pairs in the cheapest order it can (a sweep along one
// axis over the chains sorted by their envelopes), judging each pair
// exactly as GEOS would. When no pair is at fault and no two rings touch
// twice (the valid case, by far the common one), that is the answer, and
// the touches it recorded are GEOS's (each pair of rings touches at one
// point, recorded in the same place whichever order finds it). Otherwise,
// or when the sweep's work runs past its budget (a comb of chains that
// all overlap along the sweep's axis), the search starts again in GEOS's
// order (intersectChains).
//
// One detail keeps the answer exact: a touch's point is the first of equal
// points found, and equal points may differ in the sign of a zero
// coordinate, which GEOS prints ("-0"). A touch at a zero coordinate
// sends the search to GEOS's order too.

// sweepEntry is a chain's extent along the sweep axis (from a lower
// bound of its low end) and across it.
type sweepEntry struct {
	lo, hi   float64 // along the axis
	olo, ohi float64 // across it
	chain    int32
}

// orderedBelow returns a float32 no greater than v, as a uint32 whose
// unsigned order is the numbers' order.
func orderedBelow(v float64) uint32 {
	f := float32(v)
	if float64(f) > v {
		f = math.Nextafter32(f, float32(math.Inf(-1)))
	}
	b := math.Float32bits(f)
	if b&(1<<31) != 0 {
		return ^b
	}
	return b | 1<<31
}

// unordered inverts orderedBelow's mapping.
func unordered(b uint32) float32 {
	if b&(1<<31) != 0 {
		return math.Float32frombits(b &^ (1 << 31))
	}
	return math.Float32frombits(^b)
}

// radixSort sorts keys by their high 32 bits (stably: ties keep their
// order; three passes of 11 bits), using tmp as scratch, and returns the sorted slice (keys or
// *tmp).
func radixSort(keys []uint64, tmp *[]uint64) []uint64 {
	if len(keys) < 256 {
		slices.Sort(keys)
		return keys
	}
	if cap(*tmp) < len(keys) {
		*tmp = make([]uint64, len(keys))
	}
	src, dst := keys, (*tmp)[:len(keys)]
	var count [1 << 11]int32
	for shift := uint(32); shift < 64; shift += 11 {
		clear(count[:])
		for _, k := range src {
			count[(k>>shift)&(1<<11-1)]++
		}
		sum := int32(0)
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for _, k := range src {
			d := (k >> shift) & (1<<11 - 1)
			dst[count[d]] = k
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		*tmp = keys
	}
	return src
}

// sweepBudget is the most overlap tests the sweep makes for n chains.
func sweepBudget(n int) int { return 48*n + 4096 }

// sweep runs the fast path and reports whether its answer stands.
func (a *analyzer) sweep() bool {
	n := len(a.chains)
	if n < 2 {
		return true
	}
	// Sweep along the axis on which chains overlap least: the one whose
	// chains' total extent is smallest relative to the whole.
	var sumX, sumY float64
	all := a.chains[0].env
	for i := range a.chains {
		e := &a.chains[i].env
		sumX += e.maxx - e.minx
		sumY += e.maxy - e.miny
		all.expand(e)
	}
	alongX := sumX*(all.maxy-all.miny) <= sumY*(all.maxx-all.minx)
	// Sort by a float32 lower bound of each chain's low end, packed with
	// its index into a uint64 and radix-sorted. The sweep stops on the
	// same bounds, which keeps it complete: a chain whose bound is past a
	// chain's high end starts past it too.
	keys := slices.Grow(a.sweepKeys[:0], n)
	for i := range a.chains {
		e := &a.chains[i].env
		lo := e.minx
		if !alongX {
			lo = e.miny
		}
		keys = append(keys, uint64(orderedBelow(lo))<<32|uint64(i))
	}
	keys = radixSort(keys, &a.sweepTmp)
	a.sweepKeys = keys
	s := slices.Grow(a.sweepBuf[:0], n)
	for _, k := range keys {
		i := int32(uint32(k))
		e := &a.chains[i].env
		bound := float64(unordered(uint32(k >> 32)))
		if alongX {
			s = append(s, sweepEntry{bound, e.maxx, e.miny, e.maxy, i})
		} else {
			s = append(s, sweepEntry{bound, e.maxy, e.minx, e.maxx, i})
		}
	}
	a.sweepBuf = s
	if a.workers > 1 && n >= parallelMinChains {
		if !a.scanParallel(s) {
			return false
		}
	} else if !a.scan(s) {
		return false
	}
	for k := range a.rings {
		for _, t := range a.rings[k].touches {
			if t.pt[0] == 0 || t.pt[1] == 0 {
				return false
			}
		}
	}
	return true
}

// scan is the sweep proper, on one goroutine: it reports false when it
// finds a fault or a double touch, or runs out of budget.
func (a *analyzer) scan(s []sweepEntry) bool {
	budget := sweepBudget(len(s))
	for k := range s {
		e := &s[k]
		for m := k + 1; m < len(s) && s[m].lo <= e.hi; m++ {
			budget--
			if budget < 0 {
				return false
			}
			f := &s[m]
			if f.olo > e.ohi || f.ohi < e.olo {
				continue
			}
			i, j := e.chain, f.chain
			if j < i {
				i, j = j, i
			}
			a.judge.overlapsClean(&a.chains[i], &a.chains[j])
			if a.done() {
				return false
			}
		}
	}
	return true
}

// parallelMinChains is the fewest chains worth a parallel sweep (a
// variable so that tests can sweep small geometries in parallel), and
// sweepChunk the entries a worker takes at a time.
var parallelMinChains = 8192

var sweepChunkSize = 512

// scanParallel is scan on a.workers goroutines, each taking chunks of
// entries and judging their pairs with a judge of its own that records
// touches; the touches are added (and double touches found) once all are
// done. Which worker meets which pair does not matter: without a fault
// or a double touch, the pairs' verdicts and the touches are the same in
// any order.
func (a *analyzer) scanParallel(s []sweepEntry) bool {
	w := a.workers
	for len(a.judges) < w {
		a.judges = append(a.judges, judge{})
	}
	var next atomic.Int64
	var stop atomic.Bool
	var budget atomic.Int64
	budget.Store(int64(sweepBudget(len(s))))
	var wg sync.WaitGroup
	for g := range w {
		j := &a.judges[g]
		*j = judge{a: a, invalidCode: codeNone, deferTouches: true, touches: j.touches[:0]}
		wg.Go(func() {
			for !stop.Load() {
				c := int(next.Add(int64(sweepChunkSize))) - sweepChunkSize
				if c >= len(s) {
					return
				}
				used := 0
				for k := c; k < min(c+sweepChunkSize, len(s)); k++ {
					e := &s[k]
					for m := k + 1; m < len(s) && s[m].lo <= e.hi; m++ {
						used++
						f := &s[m]
						if f.olo > e.ohi || f.ohi < e.olo {
							continue
						}
						ci, cj := e.chain, f.chain
						if cj < ci {
							ci, cj = cj, ci
						}
						j.overlapsClean(&a.chains[ci], &a.chains[cj])
						if j.done() {
							stop.Store(true)
							return
						}
					}
				}
				if budget.Add(-int64(used)) < 0 {
					stop.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	if stop.Load() {
		return false
	}
	for g := range w {
		for _, t := range a.judges[g].touches {
			if a.addTouch(t.r0, t.r1, t.pt) {
				return false
			}
		}
	}
	return true
}

// restart forgets what a sweep found, for the search in GEOS's order.
func (a *analyzer) restart() {
	a.invalidCode = codeNone
	a.doubleTouch = false
	clear(a.pairs)
	for k := range a.rings {
		a.rings[k].touches = a.rings[k].touches[:0]
	}
}

// overlapsClean hands the analyzer every pair of segments of chains c0 and
// c1 whose envelopes meet (the pairs whose verdict can be anything but "no
// intersection"), without GEOS's recursive halving: the segments of a
// monotone chain that meet a box are a contiguous run, found by binary
// search, and the runs are usually a segment or two.
func (j *judge) overlapsClean(c0, c1 *chain) {
	p := j.a.ss[c0.ss].pts
	q := j.a.ss[c1.ss].pts
	s0, e0, ok := runIn(p, c0.start, c0.end, &c1.env)
	if !ok {
		return
	}
	s1, e1, ok := runIn(q, c1.start, c1.end, &c0.env)
	if !ok {
		return
	}
	if (e0-s0+1)*(e1-s1+1) > 64 {
		j.overlaps(c0, s0, e0+1, c1, s1, e1+1)
		return
	}
	for i := s0; i <= e0; i++ {
		a0, a1 := p[i], p[i+1]
		for k := s1; k <= e1; k++ {
			if envIntersects(a0, a1, q[k], q[k+1]) {
				j.process(c0.ss, int(i), c1.ss, int(k))
				if j.done() {
					return
				}
			}
		}
	}
}

// runIn returns the first and last segment of the monotone chain
// pts[start..end] whose envelopes meet b.
func runIn(pts []orb.Point, start, end int32, b *env) (int32, int32, bool) {
	lo, hi := start, end-1
	// Along each axis a chain's coordinate never decreases or never
	// increases. Segment k spans [c_k, c_k+1] (or [c_k+1, c_k]): it meets
	// [bmin, bmax] from the first k whose far end reaches bmin (bmax) to
	// the last whose near end does not pass bmax (bmin).
	for axis := range 2 {
		bmin, bmax := b.minx, b.maxx
		if axis == 1 {
			bmin, bmax = b.miny, b.maxy
		}
		if pts[end][axis] >= pts[start][axis] {
			lo = max(lo, firstAtLeast(pts, axis, lo, hi, bmin))
			hi = min(hi, lastAtMost(pts, axis, lo, hi, bmax))
		} else {
			lo = max(lo, firstAtMost(pts, axis, lo, hi, bmax))
			hi = min(hi, lastAtLeast(pts, axis, lo, hi, bmin))
		}
		if lo > hi {
			return lo, hi, false
		}
	}
	return lo, hi, true
}

// firstAtLeast returns the least k in [lo, hi] with pts[k+1][axis] >= v
// (coordinates not decreasing), or hi+1.
func firstAtLeast(pts []orb.Point, axis int, lo, hi int32, v float64) int32 {
	for lo <= hi {
		m := int32(uint32(lo+hi) >> 1)
		if pts[m+1][axis] >= v {
			hi = m - 1
		} else {
			lo = m + 1
		}
	}
	return lo
}

// lastAtMost returns the greatest k in [lo, hi] with pts[k][axis] <= v
// (coordinates not decreasing), or lo-1.
func lastAtMost(pts []orb.Point, axis int, lo, hi int32, v float64) int32 {
	for lo <= hi {
		m := int32(uint32(lo+hi) >> 1)
		if pts[m][axis] <= v {
			lo = m + 1
		} else {
			hi = m - 1
		}
	}
	return hi
}

// firstAtMost returns the least k in [lo, hi] with pts[k+1][axis] <= v
// (coordinates not increasing), or hi+1.
func firstAtMost(pts []orb.Point, axis int, lo, hi int32, v float64) int32 {
	for lo <= hi {
		m := int32(uint32(lo+hi) >> 1)
		if pts[m+1][axis] <= v {
			hi = m - 1
		} else {
			lo = m + 1
		}
	}
	return lo
}

// lastAtLeast returns the greatest k in [lo, hi] with pts[k][axis] >= v
// (coordinates not increasing), or lo-1.
func lastAtLeast(pts []orb.Point, axis int, lo, hi int32, v float64) int32 {
	for lo <= hi {
		m := int32(uint32(lo+hi) >> 1)
		if pts[m][axis] >= v {
			lo = m + 1
		} else {
			hi = m - 1
		}
	}
	return hi
}
