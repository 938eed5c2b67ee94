package validity

import (
	"sync"

	"github.com/paulmach/orb"
)

// The segment intersection search of GEOS 3.11's PolygonTopologyAnalyzer:
// every ring becomes a segment string (its positions with consecutive
// repeats removed), every segment string is cut into monotone chains, the
// chains go into an STR tree, and each chain in turn queries the tree and
// tests the segments of every later chain whose envelope it meets
// (MCIndexNoder). PolygonIntersectionAnalyzer judges each pair of segments
// that intersect.
//
// GEOS stops when the analyzer is done (an invalid intersection, or two
// rings of a polygon touching twice), but not at once: the chain pair being
// tested is finished, and every later query still tests the first chain it
// meets. Each of those tests may find another fault and overwrite the
// location. That is reproduced here, because it decides which point GEOS
// reports.

// segString is a ring as the noder sees it.
type segString struct {
	pts  []orb.Point
	ring int32 // index into analyzer.rings, or -1 (a polygon without holes)
}

// chain is a monotone chain: pts[start..end] of a segment string, all of
// whose segments lie in one quadrant.
type chain struct {
	env
	ss         int32
	start, end int32
}

// quadrant is GEOS's Quadrant::quadrant of the segment p0→p1 (p0 ≠ p1).
func quadrant(p0, p1 orb.Point) int {
	if p1[0] >= p0[0] {
		if p1[1] >= p0[1] {
			return 0
		}
		return 3
	}
	if p1[1] >= p0[1] {
		return 1
	}
	return 2
}

// addChains appends the monotone chains of segment string ss, as
// MonotoneChainBuilder cuts them.
func (a *analyzer) addChains(ss int32) {
	a.chains = appendChains(a.chains, ss, a.ss[ss].pts)
}

// appendChains appends the monotone chains of pts, segment string ss.
func appendChains(chains []chain, ss int32, pts []orb.Point) []chain {
	n := len(pts)
	if n == 0 {
		return chains
	}
	start, quad := 0, -1
	for i := 1; i < n; i++ {
		if pts[i] == pts[i-1] {
			continue
		}
		q := quadrant(pts[i-1], pts[i])
		if quad < 0 {
			quad = q
		}
		if q != quad {
			chains = appendChain(chains, ss, pts, start, i-1)
			start = i - 1
			quad = q
		}
	}
	return appendChain(chains, ss, pts, start, n-1)
}

func appendChain(chains []chain, ss int32, pts []orb.Point, start, end int) []chain {
	e := segEnv(pts[start][0], pts[start][1], pts[end][0], pts[end][1])
	return append(chains, chain{env: e, ss: ss, start: int32(start), end: int32(end)})
}

// addAllChains cuts every segment string into chains, in order. A large
// geometry's segment strings are cut on the analyzer's workers, in runs of
// consecutive strings of about as many points each, and the runs' chains
// are joined in order: the same chains, in the same order.
func (a *analyzer) addAllChains(segs int) {
	if a.workers > 1 && len(a.ss) > 1 && segs >= parallelMinPoints {
		w := min(a.workers, len(a.ss))
		runs := make([]int, 1, w+1)
		sum := 0
		for i := range a.ss {
			sum += max(len(a.ss[i].pts)-1, 0)
			if len(runs) < w && i+1 < len(a.ss) && sum*w >= segs*len(runs) {
				runs = append(runs, i+1)
			}
		}
		runs = append(runs, len(a.ss))
		if len(runs) > 2 {
			parts := make([][]chain, len(runs)-1)
			var wg sync.WaitGroup
			for k := range parts {
				wg.Go(func() {
					var c []chain
					for i := runs[k]; i < runs[k+1]; i++ {
						c = appendChains(c, int32(i), a.ss[i].pts)
					}
					parts[k] = c
				})
			}
			wg.Wait()
			for _, c := range parts {
				a.chains = append(a.chains, c...)
			}
			return
		}
	}
	for i := range a.ss {
		a.addChains(int32(i))
	}
}

// intersectChains is MCIndexNoder::intersectChains.
func (a *analyzer) intersectChains() {
	t := &a.tree
	t.reset()
	t.reserve(len(a.chains))
	for i := range a.chains {
		t.insert(a.chains[i].env, int32(i))
	}
	t.build()
	a.intersectChainsBuilt()
}

// intersectChainsBuilt runs the queries over the built tree.
func (a *analyzer) intersectChainsBuilt() {
	t := &a.tree
	if t.root < 0 {
		return
	}
	for qi := range a.chains {
		q := &a.chains[qi]
		root := &t.nodes[t.root]
		if !root.intersects(&q.env) {
			continue
		}
		if root.item >= 0 {
			a.visit(int32(qi), root.item)
			continue
		}
		a.query(int32(qi), t.root)
	}
}

// query visits the chains under node whose envelopes meet chain qi's, in
// tree order; it reports false when the query was abandoned.
func (a *analyzer) query(qi, node int32) bool {
	t := &a.tree
	q := &a.chains[qi].env
	n := &t.nodes[node]
	for c := n.lo; c < n.hi; c++ {
		child := &t.nodes[c]
		if !child.intersects(q) {
			continue
		}
		if child.item >= 0 {
			if !a.visit(qi, child.item) {
				return false
			}
		} else if !a.query(qi, c) {
			return false
		}
	}
	return true
}

// visit tests chain qi against chain ti once (when ti comes after qi in
// chain order) and says whether the query goes on.
func (a *analyzer) visit(qi, ti int32) bool {
	if ti > qi {
		c0, c1 := &a.chains[qi], &a.chains[ti]
		a.judge.overlaps(c0, c0.start, c0.end, c1, c1.start, c1.end)
	}
	return !a.done()
}

// overlaps is MonotoneChain::computeOverlaps: it halves both chains while
// their parts' envelopes meet and hands every pair of single segments to
// the analyzer.
func (j *judge) overlaps(c0 *chain, s0, e0 int32, c1 *chain, s1, e1 int32) {
	if e0-s0 == 1 && e1-s1 == 1 {
		j.process(c0.ss, int(s0), c1.ss, int(s1))
		return
	}
	p := j.a.ss[c0.ss].pts
	q := j.a.ss[c1.ss].pts
	if !envIntersects(p[s0], p[e0], q[s1], q[e1]) {
		return
	}
	m0 := (s0 + e0) / 2
	m1 := (s1 + e1) / 2
	if s0 < m0 {
		if s1 < m1 {
			j.overlaps(c0, s0, m0, c1, s1, m1)
		}
		if m1 < e1 {
			j.overlaps(c0, s0, m0, c1, m1, e1)
		}
	}
	if m0 < e0 {
		if s1 < m1 {
			j.overlaps(c0, m0, e0, c1, s1, m1)
		}
		if m1 < e1 {
			j.overlaps(c0, m0, e0, c1, m1, e1)
		}
	}
}
