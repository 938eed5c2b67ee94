// Package drawing draws a geometry as SVG, in pure Go, with the offending
// vertex or segment of a validity failure marked and a caption under it:
// what `geodlq render` writes, so that an operator looks at a bowtie
// instead of reading its coordinates.
//
// Coordinates are mapped to pixels here (y up, aspect ratio kept) and
// written with two decimals, so the output is deterministic, needs no
// viewBox scaling, and draws the same in browsers, rsvg-convert and QGIS.
// Rings are drawn exactly as written: an unclosed ring shows its gap.
// Positions that are not finite (NaN, ±Infinity) cannot be drawn; they
// break the line they are in, and the caption says so when the fault is
// one of them.
package drawing

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
)

// Options shape the drawing.
type Options struct {
	// Width and Height are the drawing area's size in pixels, caption
	// excluded. Default 640 x 480.
	Width, Height int
	// Title is the SVG document's title (shown by viewers); optional.
	Title string
	// Caption lines are written under the drawing.
	Caption []string
}

// Mark is what to highlight: the fault's location and its place in the
// geometry's coordinate arrays, either or both.
type Mark struct {
	// Location is the offending point, in the geometry's coordinates.
	Location *orb.Point
	// Fault is the offending vertex, or the segment from Fault.Vertex to
	// Fault.Vertex+1 when OnSegment is set.
	Fault *classify.Fault
}

const (
	pad         = 24.0
	captionLine = 18.0
	// decimateAbove is the number of positions in a component above which
	// positions closer than half a pixel to the previous one are dropped.
	decimateAbove = 5000
	// dotsUpTo is the most positions in a geometry for which every vertex
	// gets a dot.
	dotsUpTo = 400
)

type canvas struct {
	b          strings.Builder
	minX, maxY float64
	scale      float64
	offX, offY float64
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
	width, height := float64(opts.Width), float64(opts.Height)
	if width <= 0 {
		width = 640
	}
	if height <= 0 {
		height = 480
	}
	c := &canvas{}
	bound, ok := finiteBound(g, m.Location)
	notes := []string{}
	if ok {
		dx, dy := bound.Max[0]-bound.Min[0], bound.Max[1]-bound.Min[1]
		sx, sy := (width-2*pad)/dx, (height-2*pad)/dy
		c.scale = math.Min(sx, sy)
		if dx == 0 && dy == 0 || math.IsInf(c.scale, 0) || math.IsNaN(c.scale) {
			c.scale = 1
		} else if dx == 0 {
			c.scale = sy
		} else if dy == 0 {
			c.scale = sx
		}
		c.minX, c.maxY = bound.Min[0], bound.Max[1]
		c.offX = (width - dx*c.scale) / 2
		c.offY = (height - dy*c.scale) / 2
	} else {
		notes = append(notes, "(no finite coordinates to draw)")
	}
	total := 0
	geojson.Components(g, func(cp geojson.Component) bool { total += len(cp.Points); return true })

	lines := append(append([]string(nil), opts.Caption...), notes...)
	full := height + captionLine*float64(len(lines)) + 8
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s">`+"\n",
		num(width), num(full), num(width), num(full))
	if opts.Title != "" {
		fmt.Fprintf(&c.b, "<title>%s</title>\n", esc(opts.Title))
	}
	fmt.Fprintf(&c.b, `<rect x="0" y="0" width="%s" height="%s" fill="#ffffff"/>`+"\n", num(width), num(full))
	fmt.Fprintf(&c.b, `<rect x="0.5" y="0.5" width="%s" height="%s" fill="none" stroke="#d0d0d0"/>`+"\n", num(width-1), num(height-1))
	if ok {
		c.geometry(g)
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
		if note := c.mark(g, m); note != "" {
			lines = append(lines, note)
		}
	}
	for i, l := range lines {
		fmt.Fprintf(&c.b, `<text x="8" y="%s" font-family="monospace" font-size="13" fill="#1a1a1a">%s</text>`+"\n",
			num(height+captionLine*float64(i+1)), esc(l))
	}
	c.b.WriteString("</svg>\n")
	_, err := io.WriteString(w, c.b.String())
	return err
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

// geometry draws g: polygons filled (holes by the even-odd rule), lines
// stroked, points as dots. GeometryCollections are walked with an explicit
// stack in document order, not by recursion: a geometry is drawn however
// deeply its collections nest, in memory proportional to the nesting, and
// never exhausts the goroutine's stack.
func (c *canvas) geometry(g orb.Geometry) {
	type frame struct {
		col  orb.Collection
		next int
	}
	var open []frame // the collections being drawn, innermost last
	for {
		if col, ok := g.(orb.Collection); ok {
			open = append(open, frame{col: col})
		} else {
			c.leaf(g)
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
func (c *canvas) leaf(g orb.Geometry) {
	switch g := g.(type) {
	case orb.Point:
		c.points([]orb.Point{g})
	case orb.MultiPoint:
		c.points(g)
	case orb.LineString:
		c.path([][]orb.Point{g}, false)
	case orb.MultiLineString:
		for _, l := range g {
			c.path([][]orb.Point{l}, false)
		}
	case orb.Ring:
		c.path([][]orb.Point{g}, true)
	case orb.Polygon:
		c.polygon(g)
	case orb.MultiPolygon:
		for _, p := range g {
			c.polygon(p)
		}
	}
}

func (c *canvas) polygon(p orb.Polygon) {
	rings := make([][]orb.Point, len(p))
	for i, r := range p {
		rings[i] = r
	}
	c.path(rings, true)
}

func (c *canvas) points(pts []orb.Point) {
	for _, p := range pts {
		if finite(p) {
			x, y := c.px(p)
			fmt.Fprintf(&c.b, `<circle cx="%s" cy="%s" r="4" fill="#2b6cb0"/>`+"\n", num(x), num(y))
		}
	}
}

// path draws runs of positions as one path element; a non-finite
// position breaks its run.
func (c *canvas) path(runs [][]orb.Point, fill bool) {
	var d strings.Builder
	for _, run := range runs {
		move := true
		lx, ly := math.NaN(), math.NaN()
		for i, p := range run {
			if !finite(p) {
				move = true
				continue
			}
			x, y := c.px(p)
			if len(run) > decimateAbove && !move && i != len(run)-1 && math.Hypot(x-lx, y-ly) < 0.5 {
				continue
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
	attrs := `fill="none" stroke="#2b6cb0" stroke-width="1.5"`
	if fill {
		attrs = `fill="#bcd7f2" fill-opacity="0.6" fill-rule="evenodd" stroke="#2b6cb0" stroke-width="1.5"`
	}
	fmt.Fprintf(&c.b, `<path d="%s" %s/>`+"\n", strings.TrimSpace(d.String()), attrs)
}

// mark draws the fault and returns a caption note when it cannot be drawn.
func (c *canvas) mark(g orb.Geometry, m Mark) string {
	const red = "#d7191c"
	note := ""
	if f := m.Fault; f != nil {
		var pts []orb.Point
		geojson.Components(g, func(cp geojson.Component) bool {
			if cp.Part == f.Part && cp.Ring == f.Ring {
				pts = cp.Points
				return false
			}
			return true
		})
		switch {
		case pts == nil || f.Vertex < 0 || f.Vertex >= len(pts):
			note = "(the fault's part/ring/vertex is not in this geometry)"
		case f.OnSegment && f.Vertex+1 < len(pts) && finite(pts[f.Vertex]) && finite(pts[f.Vertex+1]):
			x1, y1 := c.px(pts[f.Vertex])
			x2, y2 := c.px(pts[f.Vertex+1])
			fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="4" stroke-linecap="round"/>`+"\n",
				num(x1), num(y1), num(x2), num(y2), red)
			c.label(x1, y1, strconv.Itoa(f.Vertex), red)
			c.label(x2, y2, strconv.Itoa(f.Vertex+1), red)
		case !f.OnSegment && finite(pts[f.Vertex]):
			x, y := c.px(pts[f.Vertex])
			fmt.Fprintf(&c.b, `<circle cx="%s" cy="%s" r="8" fill="none" stroke="%s" stroke-width="3"/>`+"\n", num(x), num(y), red)
			c.label(x, y, strconv.Itoa(f.Vertex), red)
		default:
			note = fmt.Sprintf("(vertex %d is not finite and cannot be drawn)", f.Vertex)
		}
	}
	if m.Location != nil && finite(*m.Location) {
		x, y := c.px(*m.Location)
		fmt.Fprintf(&c.b, `<circle cx="%s" cy="%s" r="10" fill="none" stroke="%s" stroke-width="2"/>`+"\n", num(x), num(y), red)
		fmt.Fprintf(&c.b, `<path d="M%s %s L%s %s M%s %s L%s %s" stroke="%s" stroke-width="2"/>`+"\n",
			num(x-4), num(y-4), num(x+4), num(y+4), num(x-4), num(y+4), num(x+4), num(y-4), red)
	}
	return note
}

func (c *canvas) label(x, y float64, s, color string) {
	fmt.Fprintf(&c.b, `<text x="%s" y="%s" font-family="monospace" font-size="13" font-weight="bold" fill="%s" stroke="#ffffff" stroke-width="3" paint-order="stroke">%s</text>`+"\n",
		num(x+7), num(y-7), color, esc(s))
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
			if r < 0x20 && r != '\t' {
				b.WriteRune('\uFFFD')
				continue
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}
