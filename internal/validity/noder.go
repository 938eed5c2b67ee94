package validity

import "github.com/paulmach/orb"

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
	pts := a.ss[ss].pts
	n := len(pts)
	if n == 0 {
		return
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
			a.addChain(ss, start, i-1)
			start = i - 1
			quad = q
		}
	}
	a.addChain(ss, start, n-1)
}

func (a *analyzer) addChain(ss int32, start, end int) {
	pts := a.ss[ss].pts
	e := segEnv(pts[start][0], pts[start][1], pts[end][0], pts[end][1])
	a.chains = append(a.chains, chain{env: e, ss: ss, start: int32(start), end: int32(end)})
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
