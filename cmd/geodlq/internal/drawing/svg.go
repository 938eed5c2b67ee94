// Package drawing draws a geometry as SVG, in pure Go, with the faults of
// a validity failure marked and a caption under it: what `geodlq render`
// writes, so that an operator looks at a bowtie instead of reading its
// coordinates.
//
// The drawing is fitted to the geometry's extent (and the fault's
// location), aspect ratio kept, with a scale bar and the coordinates of
// the extent's corners. Coordinates are mapped to pixels here (y up) and
// written with two decimals, so the output is deterministic, needs no
// viewBox scaling, and draws the same in browsers, rsvg-convert and QGIS.
// Rings are drawn exactly as written: an unclosed ring shows its gap.
// Positions that are not finite (NaN, ±Infinity) cannot be drawn; they
// break the line they are in.
//
// The faults drawn in red (see [Mark]):
//
//   - every segment through a self-intersection's location (both
//     crossing segments of a bowtie), with their vertex numbers;
//   - an unclosed ring's missing closing segment, dashed, from its last
//     position back to its first;
//   - a NaN or infinite vertex: a dashed bridge between its finite
//     neighbours with a cross where it would be, labelled with its index;
//   - positions outside the CRS's valid area (Mark.Range, drawn dashed):
//     each one squared;
//   - the offending vertex circled, or segment thickened, and the error
//     location crossed.
//
// Caption lines are wrapped to the drawing's width, never cut.
package drawing

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
)

// Options shape the drawing.
type Options struct {
	// Width is the drawing area's width in pixels. Default 640.
	Width int
	// Height is the drawing area's height in pixels, caption excluded.
	// Default 0: from the extent's aspect ratio, between Width/3 and
	// Width*1.5, so that a long thin geometry is not a thin bar in a
	// large empty square.
	Height int
	// Title is the SVG document's title (shown by viewers); optional.
	Title string
	// Caption lines are written under the drawing, wrapped.
	Caption []string
	// Unit names the coordinates' unit for the scale bar ("°", "m");
	// empty: "units".
	Unit string
}

// Mark is what to highlight.
type Mark struct {
	// Location is the offending point, in the geometry's coordinates.
	Location *orb.Point
	// Fault is the offending vertex, or the segment from Fault.Vertex to
	// Fault.Vertex+1 when OnSegment is set.
	Fault *classify.Fault
	// Kind is the fault's reason kind: self_intersection and
	// ring_self_intersection mark every segment through Location;
	// ring_not_closed the missing closing segment of Fault's ring;
	// invalid_coordinate the non-finite vertex at Fault; out_of_range
	// every position outside Range.
	Kind classify.ReasonKind
	// Range is the valid area of the geometry's CRS (for EPSG:4326,
	// -180..180, -90..90), drawn and checked for out_of_range; nil when
	// unknown.
	Range *orb.Bound
}

const (
	pad         = 28.0
	band        = 22.0 // under the drawing: the extent's corners and the scale bar
	captionLine = 18.0
	charWidth   = 7.9 // of the 13px monospace caption font
	// decimateAbove is the number of positions in a component above which
	// positions closer than half a pixel to the previous one are dropped.
	decimateAbove = 5000
	// dotsUpTo is the most positions in a geometry for which every vertex
	// gets a dot.
	dotsUpTo = 400
	// thinAbove is the number of positions above which outlines are drawn
	// thin, so that many small polygons do not merge into a solid band.
	thinAbove = 5000
	// maxMarks bounds the markers of one kind (segments, squares).
	maxMarks = 64
	red      = "#d7191c"
)

type canvas struct {
	b          strings.Builder
	minX, maxY float64
	scale      float64
	offX, offY float64
	w, h       float64
	// large is set for a geometry of more than thinAbove positions: thin
	// outlines, every run thinned to half a pixel, and each pixel drawn at
	// most once by points (seen), so that the document's size is bounded by
	// the drawing's pixels, not by the geometry's positions.
	large bool
	seen  map[[2]int32]struct{}
	// labels are placed once every mark is drawn (see placeLabels).
	labels []label
}

// label is a text to write by a point of the drawing.
type label struct {
	x, y  float64
	text  string
	color string
}

// firstAt reports whether nothing was drawn yet at the pixel (x, y), and
// marks it; only for large geometries (always true otherwise).
func (c *canvas) firstAt(x, y float64) bool {
	if !c.large {
		return true
	}
	if c.seen == nil {
		c.seen = map[[2]int32]struct{}{}
	}
	k := [2]int32{int32(math.Round(x)), int32(math.Round(y))}
	if _, ok := c.seen[k]; ok {
		return false
	}
	c.seen[k] = struct{}{}
	return true
}

func (c *canvas) px(p orb.Point) (float64, float64) {
	return c.offX + (p[0]-c.minX)*c.scale, c.offY + (c.maxY-p[1])*c.scale
}

func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" || s == "" {
		return "0"
	}
	return s
}

func finite(p orb.Point) bool {
	return !math.IsNaN(p[0]) && !math.IsNaN(p[1]) && !math.IsInf(p[0], 0) && !math.IsInf(p[1], 0)
}

// SVG writes g as an SVG document to w, with m marked.
func SVG(w io.Writer, g orb.Geometry, m Mark, opts Options) error {
	width := float64(opts.Width)
	if width <= 0 {
		width = 640
	}
	c := &canvas{w: width}
	bound, ok := finiteBound(g, m.Location)
	var dx, dy float64
	if ok {
		dx, dy = bound.Max[0]-bound.Min[0], bound.Max[1]-bound.Min[1]
	}
	height := float64(opts.Height)
	if height <= 0 {
		height = width * 0.75
		if ok && dx > 0 && dy > 0 {
			height = math.Min(width*1.5, math.Max(width/3, (width-2*pad)*dy/dx+2*pad+band))
		}
		height = math.Round(height)
	}
	c.h = height
	var notes []string
	if ok {
		sx, sy := (width-2*pad)/dx, (height-2*pad-band)/dy
		c.scale = math.Min(sx, sy)
		switch {
		case dx == 0 && dy == 0 || math.IsInf(c.scale, 0) || math.IsNaN(c.scale) || c.scale == 0:
			c.scale = 1
		case dx == 0:
			c.scale = sy
		case dy == 0:
			c.scale = sx
		}
		c.minX, c.maxY = bound.Min[0], bound.Max[1]
		c.offX = (width - dx*c.scale) / 2
		c.offY = (height - band - dy*c.scale) / 2
	} else {
		notes = append(notes, "(no finite coordinates to draw)")
	}
	total := 0
	geojson.Components(g, func(cp geojson.Component) bool { total += len(cp.Points); return true })

	var marks strings.Builder
	var markLabels []label
	if ok {
		c2 := *c
		c2.b, c2.labels = strings.Builder{}, nil
		notes = append(notes, c2.mark(g, m)...)
		marks.WriteString(c2.b.String())
		markLabels = c2.labels
	}
	var lines []string
	for _, l := range append(append([]string(nil), opts.Caption...), notes...) {
		lines = append(lines, wrap(l, int((width-16)/charWidth))...)
	}
	full := height + captionLine*float64(len(lines)) + 8
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s">`+"\n",
		num(width), num(full), num(width), num(full))
	if opts.Title != "" {
		fmt.Fprintf(&c.b, "<title>%s</title>\n", esc(opts.Title))
	}
	fmt.Fprintf(&c.b, `<rect x="0" y="0" width="%s" height="%s" fill="#ffffff"/>`+"\n", num(width), num(full))
	fmt.Fprintf(&c.b, `<rect x="0.5" y="0.5" width="%s" height="%s" fill="none" stroke="#d0d0d0"/>`+"\n", num(width-1), num(height-1))
	if ok {
		if m.Range != nil && m.Kind == classify.KindOutOfRange {
			c.rangeBox(*m.Range)
		}
		c.large = total > thinAbove
		c.geometry(g, c.large)
		if total <= dotsUpTo {
			c.b.WriteString(`<g fill="#2b6cb0">` + "\n")
			geojson.Components(g, func(cp geojson.Component) bool {
				for _, p := range cp.Points {
					if finite(p) {
						x, y := c.px(p)
						fmt.Fprintf(&c.b, `<circle cx="%s" cy="%s" r="2.5"/>`+"\n", num(x), num(y))
					}
				}
				return true
			})
			c.b.WriteString("</g>\n")
		}
		c.b.WriteString(marks.String())
		c.b.WriteString(placeLabels(markLabels, c.w, c.h-band))
		c.frame(bound, opts.Unit)
	}
	for i, l := range lines {
		fmt.Fprintf(&c.b, `<text x="8" y="%s" font-family="monospace" font-size="13" fill="#1a1a1a">%s</text>`+"\n",
			num(height+captionLine*float64(i+1)), esc(l))
	}
	c.b.WriteString("</svg>\n")
	_, err := io.WriteString(w, c.b.String())
	return err
}

// wrap breaks s into lines of at most n runes, at spaces where it can.
func wrap(s string, n int) []string {
	s = strings.Join(strings.Fields(s), " ")
	if n < 16 {
		n = 16
	}
	var out []string
	for utf8.RuneCountInString(s) > n {
		r := []rune(s)
		cut := -1
		for i := n; i > n/2; i-- {
			if r[i] == ' ' {
				cut = i
				break
			}
		}
		if cut < 0 {
			out = append(out, string(r[:n]))
			s = string(r[n:])
			continue
		}
		out = append(out, string(r[:cut]))
		s = string(r[cut+1:])
	}
	return append(out, s)
}

func finiteBound(g orb.Geometry, loc *orb.Point) (orb.Bound, bool) {
	var b orb.Bound
	ok := false
	add := func(p orb.Point) {
		if !finite(p) {
			return
		}
		if !ok {
			b, ok = orb.Bound{Min: p, Max: p}, true
			return
		}
		b = b.Extend(p)
	}
	geojson.Components(g, func(cp geojson.Component) bool {
		for _, p := range cp.Points {
			add(p)
		}
		return true
	})
	if loc != nil {
		add(*loc)
	}
	return b, ok
}

// frame writes, in the band under the drawing, the drawn extent's
// corners and a scale bar.
func (c *canvas) frame(b orb.Bound, unit string) {
	const gray = "#6b6b6b"
	y := c.h - 8
	fmt.Fprintf(&c.b, `<line x1="0" y1="%s" x2="%s" y2="%s" stroke="#e4e4e4"/>`+"\n", num(c.h-band), num(c.w), num(c.h-band))
	fmt.Fprintf(&c.b, `<text x="8" y="%s" font-family="monospace" font-size="11" fill="%s">%s</text>`+"\n", num(y), gray,
		esc("x "+coord(b.Min[0])+" … "+coord(b.Max[0])+", y "+coord(b.Min[1])+" … "+coord(b.Max[1])))
	if c.scale <= 0 || math.IsInf(c.scale, 0) {
		return
	}
	// A bar of a round length near a fifth of the width.
	target := c.w / 5 / c.scale
	if target <= 0 || math.IsInf(target, 0) || math.IsNaN(target) {
		return
	}
	p := math.Pow(10, math.Floor(math.Log10(target)))
	step := p
	for _, f := range []float64{2, 5, 10} {
		if p*f <= target {
			step = p * f
		}
	}
	barPx := step * c.scale
	if unit == "" {
		unit = "units"
	}
	label := strconv.FormatFloat(step, 'g', 6, 64) + " " + unit
	bx := c.w - 12 - barPx
	fmt.Fprintf(&c.b, `<path d="M%s %s v-5 h%s v5" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n",
		num(bx), num(y-2), num(barPx), gray)
	fmt.Fprintf(&c.b, `<text x="%s" y="%s" font-family="monospace" font-size="11" fill="%s" text-anchor="end">%s</text>`+"\n",
		num(bx-6), num(y), gray, esc(label))
}

// coord formats a coordinate for the frame: 6 significant digits.
func coord(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// geometry draws g: polygons filled (holes by the even-odd rule), lines
// stroked, points as dots. GeometryCollections are walked with an explicit
// stack in document order, not by recursion: a geometry is drawn however
// deeply its collections nest, in memory proportional to the nesting, and
// never exhausts the goroutine's stack.
func (c *canvas) geometry(g orb.Geometry, thin bool) {
	type frame struct {
		col  orb.Collection
		next int
	}
	var open []frame // the collections being drawn, innermost last
	for {
		if col, ok := g.(orb.Collection); ok {
			open = append(open, frame{col: col})
		} else {
			c.leaf(g, thin)
		}
		for {
			if len(open) == 0 {
				return
			}
			top := &open[len(open)-1]
			if top.next < len(top.col) {
				g = top.col[top.next]
				top.next++
				break
			}
			open = open[:len(open)-1]
		}
	}
}

// leaf draws a geometry that is not a collection.
func (c *canvas) leaf(g orb.Geometry, thin bool) {
	switch g := g.(type) {
	case orb.Point:
		c.points([]orb.Point{g})
	case orb.MultiPoint:
		c.points(g)
	case orb.LineString:
		c.path([][]orb.Point{g}, false, thin)
	case orb.MultiLineString:
		for _, l := range g {
			c.path([][]orb.Point{l}, false, thin)
		}
	case orb.Ring:
		c.path([][]orb.Point{g}, true, thin)
	case orb.Polygon:
		c.polygon(g, thin)
	case orb.MultiPolygon:
		for _, p := range g {
			c.polygon(p, thin)
		}
	}
}

func (c *canvas) polygon(p orb.Polygon, thin bool) {
	rings := make([][]orb.Point, len(p))
	for i, r := range p {
		rings[i] = r
	}
	c.path(rings, true, thin)
}

func (c *canvas) points(pts []orb.Point) {
	for _, p := range pts {
		if finite(p) {
			x, y := c.px(p)
			if c.firstAt(x, y) {
				fmt.Fprintf(&c.b, `<circle cx="%s" cy="%s" r="4" fill="#2b6cb0"/>`+"\n", num(x), num(y))
			}
		}
	}
}

// path draws runs of positions as one path element; a non-finite
// position breaks its run.
func (c *canvas) path(runs [][]orb.Point, fill, thin bool) {
	var d strings.Builder
	for _, run := range runs {
		move := true
		lx, ly := math.NaN(), math.NaN()
		thin := thin || len(run) > decimateAbove
		for i, p := range run {
			if !finite(p) {
				move = true
				continue
			}
			x, y := c.px(p)
			if thin && !move && math.Hypot(x-lx, y-ly) < 0.5 {
				continue
			}
			if thin && move && !c.firstAt(x, y) && runWithin(c, run[i:], x, y) {
				break // the whole run lies in a pixel already drawn
			}
			if move {
				d.WriteString("M")
				move = false
			} else {
				d.WriteString(" L")
			}
			d.WriteString(num(x) + " " + num(y))
			lx, ly = x, y
		}
		d.WriteString(" ")
	}
	sw := "1.5"
	if thin {
		sw = "0.5"
	}
	attrs := `fill="none" stroke="#2b6cb0" stroke-width="` + sw + `"`
	if fill {
		attrs = `fill="#bcd7f2" fill-opacity="0.6" fill-rule="evenodd" stroke="#2b6cb0" stroke-width="` + sw + `"`
	}
	fmt.Fprintf(&c.b, `<path d="%s" %s/>`+"\n", strings.TrimSpace(d.String()), attrs)
}

// runWithin reports whether every finite position of run maps within
// half a pixel of (x, y).
func runWithin(c *canvas, run []orb.Point, x, y float64) bool {
	for _, p := range run {
		if !finite(p) {
			continue
		}
		px, py := c.px(p)
		if math.Abs(px-x) > 0.5 || math.Abs(py-y) > 0.5 {
			return false
		}
	}
	return true
}

// component returns the positions of f's part and ring.
func component(g orb.Geometry, f *classify.Fault) []orb.Point {
	var pts []orb.Point
	geojson.Components(g, func(cp geojson.Component) bool {
		if cp.Part == f.Part && cp.Ring == f.Ring {
			pts = cp.Points
			return false
		}
		return true
	})
	return pts
}

// mark draws the faults and returns caption notes for what cannot be
// drawn.
func (c *canvas) mark(g orb.Geometry, m Mark) []string {
	var notes []string
	f := m.Fault
	var pts []orb.Point
	if f != nil {
		if pts = component(g, f); pts == nil || f.Vertex < 0 || f.Vertex >= len(pts) {
			notes = append(notes, "(the fault's part/ring/vertex is not in this geometry)")
			f, pts = nil, nil
		}
	}
	crossings := 0
	if m.Location != nil && finite(*m.Location) && (m.Kind == classify.KindSelfIntersection || m.Kind == classify.KindRingSelfIntersection) {
		crossings = c.crossing(g, *m.Location)
	}
	switch {
	case f == nil:
	case m.Kind == classify.KindOutOfRange && m.Range != nil && finite(pts[f.Vertex]) && !m.Range.Contains(pts[f.Vertex]):
		// squared with the other positions out of range, below
	case m.Kind == classify.KindRingNotClosed && len(pts) >= 2 && finite(pts[0]) && finite(pts[len(pts)-1]):
		x1, y1 := c.px(pts[len(pts)-1])
		x2, y2 := c.px(pts[0])
		fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="3" stroke-dasharray="7 5" stroke-linecap="round"/>`+"\n",
			num(x1), num(y1), num(x2), num(y2), red)
		c.label((x1+x2)/2, (y1+y2)/2, "missing closing segment", red)
		c.label(x1, y1, strconv.Itoa(len(pts)-1), red)
		c.label(x2, y2, "0", red)
	case !finite(pts[f.Vertex]):
		if !c.bridge(pts, f.Vertex) {
			notes = append(notes, fmt.Sprintf("(vertex %d is not finite and has no finite neighbour to place it by)", f.Vertex))
		}
	case f.OnSegment && crossings == 0 && f.Vertex+1 < len(pts) && finite(pts[f.Vertex+1]):
		c.segment(pts, f.Vertex)
	case !f.OnSegment && crossings == 0:
		x, y := c.px(pts[f.Vertex])
		fmt.Fprintf(&c.b, `<circle cx="%s" cy="%s" r="8" fill="none" stroke="%s" stroke-width="3"/>`+"\n", num(x), num(y), red)
		c.label(x, y, strconv.Itoa(f.Vertex), red)
	}
	if m.Kind == classify.KindOutOfRange && m.Range != nil {
		c.outOfRange(g, *m.Range)
	}
	if m.Location != nil && finite(*m.Location) {
		x, y := c.px(*m.Location)
		fmt.Fprintf(&c.b, `<circle cx="%s" cy="%s" r="10" fill="none" stroke="%s" stroke-width="2"/>`+"\n", num(x), num(y), red)
		fmt.Fprintf(&c.b, `<path d="M%s %s L%s %s M%s %s L%s %s" stroke="%s" stroke-width="2"/>`+"\n",
			num(x-4), num(y-4), num(x+4), num(y+4), num(x-4), num(y+4), num(x+4), num(y-4), red)
	}
	return notes
}

// segment draws the segment from pts[i] to pts[i+1] thick in red with its
// vertex numbers.
func (c *canvas) segment(pts []orb.Point, i int) {
	x1, y1 := c.px(pts[i])
	x2, y2 := c.px(pts[i+1])
	fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="4" stroke-linecap="round"/>`+"\n",
		num(x1), num(y1), num(x2), num(y2), red)
	c.label(x1, y1, strconv.Itoa(i), red)
	c.label(x2, y2, strconv.Itoa(i+1), red)
}

// crossing draws every segment of g through p (the self-intersection's
// point): both segments of a crossing, or every segment touching a point
// where a ring meets itself. It returns how many it drew.
func (c *canvas) crossing(g orb.Geometry, p orb.Point) int {
	n := 0
	geojson.Components(g, func(cp geojson.Component) bool {
		if cp.Kind == geojson.KindPoints {
			return true
		}
		for i := 0; i+1 < len(cp.Points) && n < maxMarks; i++ {
			a, b := cp.Points[i], cp.Points[i+1]
			if !finite(a) || !finite(b) {
				continue
			}
			s := math.Max(math.Max(math.Abs(p[0]), math.Abs(p[1])), math.Max(math.Max(math.Abs(a[0]), math.Abs(a[1])), math.Max(math.Abs(b[0]), math.Abs(b[1]))))
			if segmentDistance(p, a, b) <= 1e-9*math.Max(s, 1e-300) {
				c.segment(cp.Points, i)
				n++
			}
		}
		return n < maxMarks
	})
	return n
}

// bridge marks the non-finite vertex i of pts: a dashed line between its
// nearest finite neighbours, with a cross at the middle labelled with the
// index. It reports whether there was a neighbour to place it by.
func (c *canvas) bridge(pts []orb.Point, i int) bool {
	prev, next := -1, -1
	for j := i - 1; j >= 0; j-- {
		if finite(pts[j]) {
			prev = j
			break
		}
	}
	for j := i + 1; j < len(pts); j++ {
		if finite(pts[j]) {
			next = j
			break
		}
	}
	var mx, my float64
	switch {
	case prev >= 0 && next >= 0:
		x1, y1 := c.px(pts[prev])
		x2, y2 := c.px(pts[next])
		fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2" stroke-dasharray="4 4"/>`+"\n",
			num(x1), num(y1), num(x2), num(y2), red)
		mx, my = (x1+x2)/2, (y1+y2)/2
	case prev >= 0:
		mx, my = c.px(pts[prev])
	case next >= 0:
		mx, my = c.px(pts[next])
	default:
		return false
	}
	fmt.Fprintf(&c.b, `<path d="M%s %s L%s %s M%s %s L%s %s" stroke="%s" stroke-width="3"/>`+"\n",
		num(mx-6), num(my-6), num(mx+6), num(my+6), num(mx-6), num(my+6), num(mx+6), num(my-6), red)
	c.label(mx, my, "vertex "+strconv.Itoa(i)+" not finite", red)
	return true
}

// rangeBox draws the CRS's valid area, dashed, where it is in view.
func (c *canvas) rangeBox(r orb.Bound) {
	x0, y0 := c.px(r.Min)
	x1, y1 := c.px(r.Max)
	clamp := func(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }
	x0, x1 = clamp(x0, -10, c.w+10), clamp(x1, -10, c.w+10)
	y0, y1 = clamp(y0, 0, c.h-band), clamp(y1, 0, c.h-band)
	fmt.Fprintf(&c.b, `<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#7b7b7b" stroke-width="1" stroke-dasharray="6 4"/>`+"\n",
		num(math.Min(x0, x1)), num(math.Min(y0, y1)), num(math.Abs(x1-x0)), num(math.Abs(y1-y0)))
}

// outOfRange squares every position outside r.
func (c *canvas) outOfRange(g orb.Geometry, r orb.Bound) {
	n := 0
	geojson.Components(g, func(cp geojson.Component) bool {
		for i, p := range cp.Points {
			if n >= maxMarks {
				return false
			}
			if !finite(p) || r.Contains(p) {
				continue
			}
			x, y := c.px(p)
			fmt.Fprintf(&c.b, `<rect x="%s" y="%s" width="12" height="12" fill="none" stroke="%s" stroke-width="2.5"/>`+"\n",
				num(x-6), num(y-6), red)
			c.label(x, y, strconv.Itoa(i)+" out of range", red)
			n++
		}
		return true
	})
}

// segmentDistance is the Euclidean distance from p to the segment ab.
func segmentDistance(p, a, b orb.Point) float64 {
	dx, dy := b[0]-a[0], b[1]-a[1]
	l2 := dx*dx + dy*dy
	t := 0.0
	if l2 > 0 {
		t = ((p[0]-a[0])*dx + (p[1]-a[1])*dy) / l2
		t = math.Max(0, math.Min(1, t))
	}
	return math.Hypot(p[0]-(a[0]+t*dx), p[1]-(a[1]+t*dy))
}

// label asks for s to be written by the point (x, y); placeLabels writes
// it where it overlaps no other label.
func (c *canvas) label(x, y float64, s, color string) {
	c.labels = append(c.labels, label{x: x, y: y, text: s, color: color})
}

// Label boxes: 13px bold monospace, drawn from the text's baseline.
const (
	labelAscent  = 11.0
	labelDescent = 3.0
)

type box struct{ x0, y0, x1, y1 float64 }

func (a box) overlaps(b box) bool { return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1 }

// placeLabels writes the labels so that none overlaps another: vertex
// numbers at the same spot (within 3 pixels) become one label ("46, 49");
// each label takes the first free place around its point, nearest first,
// within a w×h drawing, and one placed away from its point is tied to it
// by a thin leader line. A label with no free place left is written at
// its first place (a drawing with more labels than room; never lost).
func placeLabels(ls []label, w, h float64) string {
	ls = mergeLabels(ls)
	var b strings.Builder
	var taken []box
	for _, l := range ls {
		tw := charWidth * float64(utf8.RuneCountInString(l.text))
		var first, chosen box
		found, lead := false, false
		for ri, r := range []float64{7, 16, 28, 42, 60} {
			for di, d := range [][2]float64{{1, -1}, {-1, -1}, {1, 1}, {-1, 1}, {1, 0}, {-1, 0}, {0, -1}, {0, 1}} {
				x0 := l.x + d[0]*r
				switch {
				case d[0] < 0:
					x0 -= tw
				case d[0] == 0:
					x0 -= tw / 2
				}
				base := l.y + labelAscent/2 - labelDescent
				switch {
				case d[1] < 0:
					base = l.y - r
				case d[1] > 0:
					base = l.y + r + labelAscent
				}
				bx := box{x0, base - labelAscent, x0 + tw, base + labelDescent}
				if ri == 0 && di == 0 {
					first = bx
				}
				if bx.x0 < 2 || bx.x1 > w-2 || bx.y0 < 2 || bx.y1 > h-2 {
					continue
				}
				if !overlapsAny(bx, taken) {
					chosen, found, lead = bx, true, r > 7
					break
				}
			}
			if found {
				break
			}
		}
		if !found {
			chosen = clampBox(first, w, h)
		}
		taken = append(taken, chosen)
		if lead {
			cx := math.Max(chosen.x0, math.Min(l.x, chosen.x1))
			cy := math.Max(chosen.y0, math.Min(l.y, chosen.y1))
			fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1"/>`+"\n", num(l.x), num(l.y), num(cx), num(cy), l.color)
		}
		fmt.Fprintf(&b, `<text x="%s" y="%s" font-family="monospace" font-size="13" font-weight="bold" fill="%s" stroke="#ffffff" stroke-width="3" paint-order="stroke">%s</text>`+"\n",
			num(chosen.x0), num(chosen.y0+labelAscent), l.color, esc(l.text))
	}
	return b.String()
}

func overlapsAny(b box, taken []box) bool {
	for _, t := range taken {
		if b.overlaps(t) {
			return true
		}
	}
	return false
}

// clampBox moves b inside the w×h drawing where it fits.
func clampBox(b box, w, h float64) box {
	dx := math.Max(0, 2-b.x0) - math.Max(0, b.x1-(w-2))
	dy := math.Max(0, 2-b.y0) - math.Max(0, b.y1-(h-2))
	return box{b.x0 + dx, b.y0 + dy, b.x1 + dx, b.y1 + dy}
}

// mergeLabels joins the vertex numbers written at the same spot (within
// 3 pixels, same colour) into one label, "46, 49", in ascending order;
// other labels are kept as they are, in order.
func mergeLabels(ls []label) []label {
	var out []label
	for _, l := range ls {
		n, err := strconv.Atoi(l.text)
		merged := false
		if err == nil {
			for i := range out {
				o := &out[i]
				if o.color == l.color && math.Abs(o.x-l.x) <= 3 && math.Abs(o.y-l.y) <= 3 && isNumberList(o.text) {
					o.text = addNumber(o.text, n)
					merged = true
					break
				}
			}
		}
		if !merged {
			out = append(out, l)
		}
	}
	return out
}

func isNumberList(s string) bool {
	for p := range strings.SplitSeq(s, ", ") {
		if _, err := strconv.Atoi(p); err != nil {
			return false
		}
	}
	return true
}

func addNumber(list string, n int) string {
	var ns []int
	for p := range strings.SplitSeq(list, ", ") {
		v, _ := strconv.Atoi(p)
		if v == n {
			return list
		}
		ns = append(ns, v)
	}
	ns = append(ns, n)
	slices.Sort(ns)
	parts := make([]string, len(ns))
	for i, v := range ns {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ", ")
}

func esc(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		default:
			if r < 0x20 && r != '\t' || r == utf8.RuneError {
				b.WriteRune('\uFFFD')
				continue
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}
