package geojson

import (
	"bytes"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/paulmach/orb"
)

// Parallel parsing of a large MultiPolygon's coordinates (Limits.Workers).
//
// The polygons of a MultiPolygon are parsed independently of each other,
// so the coordinates array is cut into chunks at places where one polygon
// ends and the next begins ("]]],[[["; in a MultiPolygon's coordinates
// that sequence occurs only there), and each chunk is parsed by a parser
// of its own. A chunk is accepted only if its parse ends exactly where the
// next chunk begins (the last one at the array's end): by induction from
// the array's start, every chunk then starts at an element boundary and
// is parsed exactly as a sequential parse would parse it. Anything else — a
// cut outside the coordinates (where the sequence can also occur, in a
// string, say), a parse error, a third ordinate, a limit the chunks reach
// together — abandons the attempt, and the sequential parse runs from the
// array's start, giving its own result and its own errors at their own
// offsets. The chunks' positions and counts, concatenated in order, are
// what the sequential parse would have appended.

// parallelMinBytes is the smallest rest of a document worth parsing in
// parallel.
var parallelMinBytes = 4 << 20

// parallelParses counts the parallel parses that were accepted (for
// tests).
var parallelParses atomic.Int64

// polygonSeam separates two polygons of a compact MultiPolygon.
var polygonSeam = []byte("]]],[[[")

// chunkResult is what one chunk's parser read.
type chunkResult struct {
	pts    []orb.Point
	counts []int
	parts  int
	polys  int
	end    int // where the parse ended
	ok     bool
}

// parallelPolygons parses the elements of the MultiPolygon coordinates
// array whose '[' has just been read, through its closing ']', and returns
// how many polygons it holds; ok is false when the attempt was abandoned,
// and then p is as it was.
func (p *parser) parallelPolygons() (polys int, ok bool) {
	start := p.pos
	w := p.lim.Workers
	rest := len(p.data) - start
	cuts := []int{start}
	for k := 1; k < w; k++ {
		from := max(start+k*(rest/w), cuts[len(cuts)-1]+1)
		if from >= len(p.data) {
			break
		}
		i := bytes.Index(p.data[from:], polygonSeam)
		if i < 0 {
			break
		}
		cuts = append(cuts, from+i+4) // just after the comma
	}
	if len(cuts) < 2 {
		return 0, false
	}
	// Every chunk parses into its own range of one array, the final one,
	// sized by the '[' in the chunk (each position opens with one); the
	// ranges are then closed up in place. A chunk never holds its
	// positions in a second array the size of the geometry's (16 B a
	// position: 16 MB for a 40 MB MultiPolygon, live beside the document
	// and the final array). The array is never larger than the room the
	// vertex limit leaves: a chunk whose bound is more gets the room left,
	// and a chunk that outgrows its range appends elsewhere and is copied
	// in (its parse is then abandoned by the limit anyway).
	bounds := make([]int, len(cuts))
	var wg sync.WaitGroup
	for k := range cuts {
		stop := len(p.data)
		if k+1 < len(cuts) {
			stop = cuts[k+1]
		}
		wg.Go(func() { bounds[k] = bytes.Count(p.data[cuts[k]:stop], []byte{'['}) + 1 })
	}
	wg.Wait()
	base := len(p.pts)
	room := max(p.lim.MaxVertices-base, 0) // no limit is math.MaxInt: one more would wrap
	if room < math.MaxInt {
		room++
	}
	offs := make([]int, len(cuts))
	need := 0
	for k, b := range bounds {
		bounds[k] = min(b, room-need)
		offs[k] = base + need
		need += bounds[k]
	}
	if p.pts == nil {
		p.pts = make([]orb.Point, 0, need)
	}
	p.pts = slices.Grow(p.pts, need)[:base+need]
	results := make([]chunkResult, len(cuts))
	for k := range cuts {
		end := -1 // the last chunk ends with the array
		if k+1 < len(cuts) {
			end = cuts[k+1]
		}
		into := p.pts[offs[k] : offs[k] : offs[k]+bounds[k]]
		wg.Go(func() { results[k] = p.parseChunk(cuts[k], end, into) })
	}
	wg.Wait()
	total, parts := 0, 0
	for _, r := range results {
		if !r.ok {
			p.pts = p.pts[:base]
			return 0, false
		}
		total += len(r.pts)
		parts += r.parts
		polys += r.polys
	}
	if base+total > p.lim.MaxVertices || p.parts+parts > p.lim.MaxParts {
		p.pts = p.pts[:base]
		return 0, false // the sequential parse reports where
	}
	// Close up the ranges, in order: chunk k moves down to at <= its
	// offset, over nothing a later chunk still holds (copy is memmove).
	at := base
	for _, r := range results {
		at += copy(p.pts[at:], r.pts)
		p.counts = append(p.counts, r.counts...)
	}
	p.pts = p.pts[:at]
	p.parts += parts
	p.pos = results[len(results)-1].end
	parallelParses.Add(1)
	return polys, true
}

// parseChunk parses polygons from start until the one that ends just
// before end's polygon begins (a ',' then end), or for the last chunk
// (end < 0) until the array's closing ']'.
//
// Its positions are appended to into (length 0), in place while they fit.
func (p *parser) parseChunk(start, end int, into []orb.Point) chunkResult {
	q := &parser{
		scanner: scanner{data: p.data, pos: start, maxDepth: p.maxDepth, maxNumber: p.maxNumber},
		lim:     p.lim,
		counts:  make([]int, 0, 64),
	}
	q.pts = into
	var r chunkResult
	for {
		if err := q.array(MultiPolygon, 3); err != nil || q.zs != nil {
			return r
		}
		r.polys++
		c := q.ws()
		if c == ']' && end < 0 {
			q.pos++
			break
		}
		if c != ',' {
			return r
		}
		q.pos++
		if q.pos == end {
			break
		}
		if end >= 0 && q.pos > end {
			return r
		}
	}
	r.pts, r.counts, r.parts, r.end, r.ok = q.pts, q.counts, q.parts, q.pos, true
	return r
}
