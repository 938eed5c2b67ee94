package validity

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/paulmach/orb"
)

// Messages are GEOS 3.11's TopologyValidationError messages.
var messages = [...]string{
	codeHoleOutsideShell:  "Hole lies outside shell",
	codeNestedHoles:       "Holes are nested",
	codeDisconnected:      "Interior is disconnected",
	codeSelfIntersection:  "Self-intersection",
	codeRingSelfIntersect: "Ring Self-intersection",
	codeNestedShells:      "Nested shells",
	codeTooFewPoints:      "Too few points in geometry component",
	codeInvalidCoordinate: "Invalid Coordinate",
	codeRingNotClosed:     "Ring is not closed",
}

// Fault is why a geometry is invalid, as GEOS reports it: a message and a
// point.
type Fault struct {
	// Message is GEOS's message, such as "Self-intersection".
	Message string
	// Point is where GEOS places the fault.
	Point orb.Point
}

// Reason is the fault as GEOSisValidReason_r words it: the message and the
// point, each coordinate printed as C++ streams print a double at
// precision 15 ("Self-intersection[-65.790374874971 18.3107955487033]").
func (f *Fault) Reason() string {
	b := make([]byte, 0, len(f.Message)+48)
	b = append(b, f.Message...)
	b = append(b, '[')
	b = AppendCoordinate(b, f.Point[0])
	b = append(b, ' ')
	b = AppendCoordinate(b, f.Point[1])
	b = append(b, ']')
	return string(b)
}

// AppendCoordinate appends v as a C++ ostream prints a double at precision
// 15 with default flags (printf's %.15g): 15 significant digits, trailing
// zeros dropped, an exponent of at least two digits outside [1e-5, 1e15);
// "nan", "-nan", "inf" and "-inf" for the rest.
func AppendCoordinate(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		if math.Signbit(v) {
			return append(b, "-nan"...)
		}
		return append(b, "nan"...)
	case math.IsInf(v, 1):
		return append(b, "inf"...)
	case math.IsInf(v, -1):
		return append(b, "-inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', 15, 64)
}

// Validator checks geometries as GEOS 3.11's IsValidOp does. Its buffers are
// reused from one check to the next, so a Validator must not be used by
// two goroutines at once; [Check] keeps a pool of them.
type Validator struct {
	a    analyzer
	tree strTree
	buf  []int32
}

var pool = sync.Pool{New: func() any { return new(Validator) }}

// Options configures a check. The zero value and nil use the defaults.
type Options struct {
	// Workers is the most goroutines one check may use. A geometry of
	// thousands of monotone chains (hundreds of thousands of positions) is
	// then searched for intersections in parallel; the answer is the same
	// whatever the number. Default 1; at most 64.
	Workers int
}

// maxWorkers bounds Options.Workers.
const maxWorkers = 64

// Check is [Validator.Check] on a pooled Validator.
func Check(g orb.Geometry, opts *Options) (*Fault, error) {
	v := pool.Get().(*Validator)
	f, err := v.Check(g, opts)
	v.release()
	pool.Put(v)
	return f, err
}

// maxKept bounds the buffers a Validator keeps between checks (in
// elements of each buffer).
const maxKept = 1 << 16

// release drops references to the last geometry and large buffers.
func (v *Validator) release() {
	a := &v.a
	if cap(a.chains) > maxKept {
		a.chains = nil
	}
	if cap(a.tree.nodes) > maxKept {
		a.tree.nodes = nil
	}
	if cap(v.tree.nodes) > maxKept {
		v.tree.nodes = nil
	}
	if cap(a.dedup) > maxKept {
		a.dedup = nil
	}
	if cap(a.ss) > maxKept {
		a.ss = nil
	}
	if cap(a.rings) > maxKept {
		a.rings = nil
	}
	if len(a.pairs) > 0 {
		a.pairs = nil
	}
	for i := range a.judges {
		if cap(a.judges[i].touches) > maxKept {
			a.judges[i].touches = nil
		}
	}
	if cap(a.sweepBuf) > maxKept {
		a.sweepBuf, a.sweepKeys, a.sweepTmp = nil, nil, nil
	}
	if cap(a.tree.keys) > maxKept {
		a.tree.keys, a.tree.scratch = nil, nil
	}
	clear(a.ss[:cap(a.ss)])
	a.ss = a.ss[:0]
	clear(a.rings[:cap(a.rings)])
	a.rings = a.rings[:0]
	a.dedup = a.dedup[:0]
}

// Check returns GEOS 3.11's verdict on g (GEOSisValidReason_r): nil for a
// valid geometry, otherwise the fault GEOS reports, the same message at the
// same point. The error is non-nil only where GEOS itself would fail with
// an exception; it carries GEOS's message.
//
// g's positions are read, never copied, except for the rings of a polygon
// in which a position repeats the one before it (GEOS removes such
// repeats before it looks for intersections; so does Check, on a copy).
//
// Check is meant for geometries as geodlq's GeoJSON parser produces them,
// after its own checks (finite coordinates, closed rings of at least four
// positions, no one-position lines): GEOS cannot even build a geometry
// that fails those. It still answers for any other geometry without
// panicking, as GEOS's IsValidOp would for the same rings.
func (v *Validator) Check(g orb.Geometry, opts *Options) (*Fault, error) {
	v.a.workers = 1
	if opts != nil {
		v.a.workers = min(max(opts.Workers, 1), maxWorkers)
	}
	if isEmpty(g) {
		return nil, nil
	}
	return v.geometry(g)
}

func fault(code int, p orb.Point) *Fault {
	return &Fault{Message: messages[code], Point: p}
}

func finite(p orb.Point) bool {
	return !math.IsNaN(p[0]) && !math.IsInf(p[0], 0) && !math.IsNaN(p[1]) && !math.IsInf(p[1], 0)
}

// isEmpty is Geometry::isEmpty.
func isEmpty(g orb.Geometry) bool {
	switch g := g.(type) {
	case orb.Point:
		return false
	case orb.MultiPoint:
		return len(g) == 0
	case orb.LineString:
		return len(g) == 0
	case orb.Ring:
		return len(g) == 0
	case orb.MultiLineString:
		for _, l := range g {
			if len(l) > 0 {
				return false
			}
		}
		return true
	case orb.Polygon:
		return len(g) == 0 || len(g[0]) == 0
	case orb.MultiPolygon:
		for _, p := range g {
			if !isEmpty(p) {
				return false
			}
		}
		return true
	case orb.Collection:
		for _, m := range g {
			if !isEmpty(m) {
				return false
			}
		}
		return true
	}
	return true
}

// geometry is IsValidOp::isValidGeometry on a non-empty geometry.
func (v *Validator) geometry(g orb.Geometry) (*Fault, error) {
	switch g := g.(type) {
	case orb.Point:
		if !finite(g) {
			return fault(codeInvalidCoordinate, g), nil
		}
	case orb.MultiPoint:
		for _, p := range g {
			if !finite(p) {
				return fault(codeInvalidCoordinate, p), nil
			}
		}
	case orb.LineString:
		return lineString(g), nil
	case orb.Ring:
		return v.linearRing(g)
	case orb.MultiLineString:
		for _, l := range g {
			if len(l) == 0 {
				continue
			}
			if f := lineString(orb.LineString(l)); f != nil {
				return f, nil
			}
		}
	case orb.Polygon:
		return v.polygons([]orb.Polygon{g}, false)
	case orb.MultiPolygon:
		return v.polygons(g, true)
	case orb.Collection:
		for _, m := range g {
			if isEmpty(m) {
				continue
			}
			// Collections nest as deep as the parser allows (at most
			// geojson.CeilingMaxNesting); so does this recursion.
			if f, err := v.geometry(m); f != nil || err != nil {
				return f, err
			}
		}
	}
	return nil, nil
}

// checkCoordinates is checkCoordinatesValid.
func checkCoordinates(pts []orb.Point) *Fault {
	for _, p := range pts {
		if !finite(p) {
			return fault(codeInvalidCoordinate, p)
		}
	}
	return nil
}

// nonRepeatedAtLeast is isNonRepeatedSizeAtLeast.
func nonRepeatedAtLeast(pts []orb.Point, n int) bool {
	count := 0
	for i, p := range pts {
		if count >= n {
			return true
		}
		if i == 0 || p != pts[i-1] {
			count++
		}
	}
	return count >= n
}

func lineString(l orb.LineString) *Fault {
	if f := checkCoordinates(l); f != nil {
		return f
	}
	if !nonRepeatedAtLeast(l, 2) {
		return fault(codeTooFewPoints, l[0])
	}
	return nil
}

// ringClosed is checkRingClosed.
func ringClosed(r orb.Ring) *Fault {
	if len(r) == 0 || r[0] == r[len(r)-1] {
		return nil
	}
	return fault(codeRingNotClosed, r[0])
}

// ringSize is checkRingPointSize.
func ringSize(r orb.Ring) *Fault {
	if len(r) == 0 || nonRepeatedAtLeast(r, 4) {
		return nil
	}
	return fault(codeTooFewPoints, r[0])
}

// linearRing is isValid(const LinearRing*).
func (v *Validator) linearRing(r orb.Ring) (*Fault, error) {
	if f := checkCoordinates(r); f != nil {
		return f, nil
	}
	if f := ringClosed(r); f != nil {
		return f, nil
	}
	if f := ringSize(r); f != nil {
		return f, nil
	}
	a := &v.a
	a.reset()
	a.addSegString(r, -1)
	a.analyze()
	if a.invalidCode >= 0 {
		return fault(codeRingSelfIntersect, a.invalidLocation), nil
	}
	return nil, nil
}

// polygons is isValid(const Polygon*) for one polygon (multi false) and
// isValid(const MultiPolygon*) for several.
func (v *Validator) polygons(polys []orb.Polygon, multi bool) (*Fault, error) {
	if f := v.ringsFirstFault(polys); f != nil {
		return f, nil
	}
	a := &v.a
	a.reset()
	for _, p := range polys {
		if !isEmpty(p) {
			a.addPolygon(p)
		}
	}
	a.analyze()
	if a.invalidCode >= 0 {
		return fault(a.invalidCode, a.invalidLocation), nil
	}
	for _, p := range polys {
		if f, err := v.holesInShell(p); f != nil || err != nil {
			return f, err
		}
	}
	for _, p := range polys {
		if f, err := v.holesNotNested(p); f != nil || err != nil {
			return f, err
		}
	}
	if multi {
		if f, err := v.shellsNotNested(polys); f != nil || err != nil {
			return f, err
		}
	}
	if a.doubleTouch {
		return fault(codeDisconnected, a.doubleTouchPt), nil
	}
	if pt, ok := a.holeCycle(); ok {
		return fault(codeDisconnected, pt), nil
	}
	return nil, nil
}

// ringsFault is the first of polygon p's faults GEOS finds before it looks
// for intersections: a non-finite coordinate in any ring, then a ring not
// closed, then a ring of too few points.
func ringsFault(p orb.Polygon) *Fault {
	for _, r := range p {
		if f := checkCoordinates(r); f != nil {
			return f
		}
	}
	for _, r := range p {
		if f := ringClosed(r); f != nil {
			return f
		}
	}
	for _, r := range p {
		if f := ringSize(r); f != nil {
			return f
		}
	}
	return nil
}

// parallelMinPoints is the fewest positions of a MultiPolygon whose
// polygons' rings are checked, and cut into chains, on several goroutines.
var parallelMinPoints = 1 << 16

// ringsFirstFault is ringsFault of the first polygon that has one. The
// polygons are independent, so with workers a large MultiPolygon's are
// checked in parallel, in runs of consecutive polygons, and the fault of
// the first run that has one is returned.
func (v *Validator) ringsFirstFault(polys []orb.Polygon) *Fault {
	if w := v.a.workers; w > 1 && len(polys) > 1 {
		if runs := polygonRuns(polys, w); len(runs) > 2 {
			found := make([]*Fault, len(runs)-1)
			var wg sync.WaitGroup
			for k := range found {
				wg.Go(func() {
					for _, p := range polys[runs[k]:runs[k+1]] {
						if found[k] = ringsFault(p); found[k] != nil {
							return
						}
					}
				})
			}
			wg.Wait()
			for _, f := range found {
				if f != nil {
					return f
				}
			}
			return nil
		}
	}
	for _, p := range polys {
		if f := ringsFault(p); f != nil {
			return f
		}
	}
	return nil
}

// polygonRuns cuts polys into at most n runs of consecutive polygons of
// about as many positions each and returns their bounds (run k is
// polys[runs[k]:runs[k+1]]), or a single run when they hold fewer than
// parallelMinPoints positions.
func polygonRuns(polys []orb.Polygon, n int) []int {
	sizes := make([]int, len(polys))
	total := 0
	for i, p := range polys {
		for _, r := range p {
			sizes[i] += len(r)
		}
		total += sizes[i]
	}
	runs := make([]int, 1, n+1)
	if total < parallelMinPoints {
		return append(runs, len(polys))
	}
	sum := 0
	for i, s := range sizes {
		sum += s
		if len(runs) < n && i+1 < len(polys) && sum*n >= total*len(runs) {
			runs = append(runs, i+1)
		}
	}
	return append(runs, len(polys))
}

// ringEnv is a ring's envelope, or false for an empty ring.
func ringEnv(r []orb.Point) (env, bool) {
	if len(r) == 0 {
		return env{}, false
	}
	e := env{r[0][0], r[0][1], r[0][0], r[0][1]}
	for _, p := range r[1:] {
		if p[0] < e.minx {
			e.minx = p[0]
		}
		if p[0] > e.maxx {
			e.maxx = p[0]
		}
		if p[1] < e.miny {
			e.miny = p[1]
		}
		if p[1] > e.maxy {
			e.maxy = p[1]
		}
	}
	return e, true
}

// holesInShell is checkHolesInShell.
func (v *Validator) holesInShell(p orb.Polygon) (*Fault, error) {
	if len(p) <= 1 {
		return nil, nil
	}
	shell := p[0]
	shellEnv, nonEmpty := ringEnv(shell)
	loc := ringLoc{pts: shell}
	for _, hole := range p[1:] {
		if len(hole) == 0 {
			continue
		}
		if !nonEmpty {
			return fault(codeHoleOutsideShell, hole[0]), nil
		}
		holeEnv, _ := ringEnv(hole)
		if !shellEnv.covers(&holeEnv) {
			return fault(codeHoleOutsideShell, hole[0]), nil
		}
		nested, err := isRingNested(hole, &loc)
		if err != nil {
			return nil, err
		}
		if !nested {
			return fault(codeHoleOutsideShell, hole[0]), nil
		}
	}
	return nil, nil
}

// holesNotNested is checkHolesNotNested (IndexedNestedHoleTester). Which
// hole a nested hole is found inside does not change the fault (the
// nested hole's first point), so the candidates' order does not matter.
func (v *Validator) holesNotNested(p orb.Polygon) (*Fault, error) {
	if len(p) <= 2 {
		return nil, nil
	}
	holes := p[1:]
	t := &v.tree
	t.reset()
	t.reserve(len(holes))
	envs := make([]env, len(holes))
	for i, h := range holes {
		if e, ok := ringEnv(h); ok {
			envs[i] = e
			t.insert(e, int32(i))
		}
	}
	t.build()
	locs := make([]ringLoc, len(holes))
	for i, h := range holes {
		locs[i].pts = h
	}
	for i, hole := range holes {
		if len(hole) == 0 {
			continue
		}
		v.buf = t.query(&envs[i], v.buf[:0])
		for _, j := range v.buf {
			if int(j) == i || !envs[j].covers(&envs[i]) {
				continue
			}
			nested, err := isRingNested(hole, &locs[j])
			if err != nil {
				return nil, err
			}
			if nested {
				return fault(codeNestedHoles, hole[0]), nil
			}
		}
	}
	return nil, nil
}

// query appends the items whose envelopes meet e, in tree order.
func (t *strTree) query(e *env, buf []int32) []int32 {
	if t.root < 0 {
		return buf
	}
	root := &t.nodes[t.root]
	if !root.intersects(e) {
		return buf
	}
	if root.item >= 0 {
		return append(buf, root.item)
	}
	return t.queryNode(t.root, e, buf)
}

func (t *strTree) queryNode(node int32, e *env, buf []int32) []int32 {
	n := &t.nodes[node]
	for c := n.lo; c < n.hi; c++ {
		child := &t.nodes[c]
		if !child.intersects(e) {
			continue
		}
		if child.item >= 0 {
			buf = append(buf, child.item)
		} else {
			buf = t.queryNode(c, e, buf)
		}
	}
	return buf
}

// shellsNotNested is checkShellsNotNested (IndexedNestedPolygonTester).
// Here the candidates' order matters (the point reported depends on the
// enclosing polygon), so the index is GEOS's tree, queried in its order.
// The polygons are independent of each other (the fault is the first
// polygon's, in order, that lies inside another), so with workers a large
// MultiPolygon's polygons are tested in parallel.
func (v *Validator) shellsNotNested(polys []orb.Polygon) (*Fault, error) {
	if len(polys) <= 1 {
		return nil, nil
	}
	t := &v.tree
	t.reset()
	t.reserve(len(polys))
	// The shells' envelopes, a pass over every shell's points: on the
	// workers for a large MultiPolygon, in runs of polygons.
	envs := make([]env, len(polys))
	has := make([]bool, len(polys))
	shellEnvs := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if p := polys[i]; len(p) > 0 {
				envs[i], has[i] = ringEnv(p[0])
			}
		}
	}
	if runs := polygonRuns(polys, v.a.workers); len(runs) > 2 {
		var wg sync.WaitGroup
		for k := range len(runs) - 1 {
			wg.Go(func() { shellEnvs(runs[k], runs[k+1]) })
		}
		wg.Wait()
	} else {
		shellEnvs(0, len(polys))
	}
	for i := range polys {
		if has[i] {
			t.insert(envs[i], int32(i))
		}
	}
	t.build()
	n := shellTester{polys: polys, envs: envs, tree: t}
	if w := v.a.workers; w > 1 && len(polys) >= parallelMinPolygons {
		return n.parallel(w)
	}
	locs := make([]*polyLoc, len(polys))
	for i := range polys {
		var f *Fault
		var err error
		f, err, v.buf = n.test(i, locs, v.buf)
		if f != nil || err != nil {
			return f, err
		}
	}
	return nil, nil
}

// parallelMinPolygons is the fewest polygons tested in parallel.
var parallelMinPolygons = 256

// shellTester tests the shells of a MultiPolygon's polygons for nesting.
type shellTester struct {
	polys []orb.Polygon
	envs  []env
	tree  *strTree
}

// test tests polygon i's shell against the polygons whose envelopes
// cover it, with locators from (and added to) locs.
func (n *shellTester) test(i int, locs []*polyLoc, buf []int32) (*Fault, error, []int32) {
	p := n.polys[i]
	if isEmpty(p) {
		return nil, nil, buf
	}
	shell := p[0]
	buf = n.tree.query(&n.envs[i], buf[:0])
	for _, j := range buf {
		if int(j) == i || !n.envs[j].covers(&n.envs[i]) {
			continue
		}
		if locs[j] == nil {
			l := &polyLoc{rings: make([]ringLoc, len(n.polys[j]))}
			for k, r := range n.polys[j] {
				l.rings[k].pts = r
			}
			locs[j] = l
		}
		pt, nested, err := findNestedPoint(shell, n.polys[j], locs[j])
		if err != nil {
			return nil, err, buf
		}
		if nested {
			return fault(codeNestedShells, pt), nil, buf
		}
	}
	return nil, nil, buf
}

// parallel tests the polygons on w goroutines, each with locators of its
// own, and returns the first polygon's fault in order.
func (n *shellTester) parallel(w int) (*Fault, error) {
	const chunk = 16
	var next atomic.Int64
	var first atomic.Int64 // the lowest polygon found at fault so far
	first.Store(math.MaxInt64)
	faults := make([]*Fault, len(n.polys))
	errs := make([]error, len(n.polys))
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			locs := make([]*polyLoc, len(n.polys))
			var buf []int32
			for {
				c := int(next.Add(chunk)) - chunk
				if c >= len(n.polys) || int64(c) > first.Load() {
					return
				}
				for i := c; i < min(c+chunk, len(n.polys)); i++ {
					var f *Fault
					var err error
					f, err, buf = n.test(i, locs, buf)
					if f != nil || err != nil {
						faults[i], errs[i] = f, err
						for {
							cur := first.Load()
							if int64(i) >= cur || first.CompareAndSwap(cur, int64(i)) {
								break
							}
						}
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if i := first.Load(); i != math.MaxInt64 {
		return faults[i], errs[i]
	}
	return nil, nil
}

// findNestedPoint is IndexedNestedPolygonTester::findNestedPoint.
func findNestedPoint(shell orb.Ring, outer orb.Polygon, loc *polyLoc) (orb.Point, bool, error) {
	p0 := shell[0]
	switch loc.locate(p0) {
	case exterior:
		return orb.Point{}, false, nil
	case interior:
		return p0, true, nil
	}
	p1 := shell[1]
	switch loc.locate(p1) {
	case exterior:
		return orb.Point{}, false, nil
	case interior:
		return p1, true, nil
	}
	// Both on the boundary: findIncidentSegmentNestedPoint.
	if len(outer[0]) == 0 {
		return orb.Point{}, false, nil
	}
	nested, err := isRingNested(shell, &loc.rings[0])
	if err != nil || !nested {
		return orb.Point{}, false, err
	}
	shellEnv, _ := ringEnv(shell)
	for k := 1; k < len(outer); k++ {
		holeEnv, ok := ringEnv(outer[k])
		if !ok || !holeEnv.covers(&shellEnv) {
			continue
		}
		inHole, err := isRingNested(shell, &loc.rings[k])
		if err != nil {
			return orb.Point{}, false, err
		}
		if inHole {
			return orb.Point{}, false, nil
		}
	}
	return p0, true, nil
}
