package console

import (
	clist "container/list"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/simplify"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/geojson"
)

// The main map draws the failing geometries themselves, simplified to
// about a pixel, once it is zoomed in far enough that a record's shape
// tells more than its dot.
const (
	// minShapeZoom is the least zoom at which shapes are drawn.
	minShapeZoom = 5
	// maxShapes bounds the shapes of one answer (the nearest to the
	// view's centre first).
	maxShapes = 150
	// maxShapeVertices bounds the vertices of one answer, after
	// simplification; shapes past it are left to their markers.
	maxShapeVertices = 200_000
	// shapeCacheBytes bounds the memory of simplified shapes kept.
	shapeCacheBytes = 32 << 20
	// displaySimplifyAbove is the vertex count above which the record
	// panel's geometry is simplified for the page (its fault marks stay
	// exact).
	displaySimplifyAbove = 50_000
)

// shape is one record's geometry on the main map.
type shape struct {
	Destination string          `json:"destination"`
	ID          string          `json:"id"`
	EventID     string          `json:"event_id,omitempty"`
	Class       string          `json:"class"`
	Kind        string          `json:"reason_kind,omitempty"`
	Geometry    json.RawMessage `json:"geometry"`
	// Vertices is how many positions are drawn; Of how many the
	// geometry has.
	Vertices int `json:"vertices"`
	Of       int `json:"of"`
}

type shapesAnswer struct {
	Shapes []shape `json:"shapes"`
	// InView is how many located records lie in the view; Left how many
	// of them have no shape here (over the limits, or not drawable), drawn
	// as markers only.
	InView int `json:"in_view"`
	Left   int `json:"left"`
	// MinZoom is the zoom shapes start at; below it none are sent.
	MinZoom int `json:"min_zoom"`
}

// shapes is GET /api/shapes: the geometries of the records matching the
// filters whose place lies in view (minlon,minlat,maxlon,maxlat),
// simplified for zoom, in longitude/latitude.
func (s *Server) shapes(w http.ResponseWriter, r *http.Request) {
	sel, err := s.selection(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := r.URL.Query()
	view, err := parseBBox(v.Get("view"))
	if err != nil {
		s.fail(w, r, badQuery("view: %v", err))
		return
	}
	zoom, err := strconv.Atoi(v.Get("zoom"))
	if err != nil || zoom < 0 || zoom > 30 {
		s.fail(w, r, badQuery("zoom %q: want 0 to 30", v.Get("zoom")))
		return
	}
	ans := shapesAnswer{Shapes: []shape{}, MinZoom: minShapeZoom}
	if zoom < minShapeZoom {
		writeJSON(w, ans)
		return
	}
	// A shape whose place lies just outside the view may reach into it.
	dx, dy := view.Max[0]-view.Min[0], view.Max[1]-view.Min[1]
	wide := orb.Bound{Min: orb.Point{view.Min[0] - dx/2, view.Min[1] - dy/2}, Max: orb.Point{view.Max[0] + dx/2, view.Max[1] + dy/2}}
	cx, cy := (view.Min[0]+view.Max[0])/2, (view.Min[1]+view.Max[1])/2
	type cand struct {
		p *placed
		d float64
	}
	recs, _, err := s.sample(r.Context(), sel)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var cands []cand
	for i := range recs {
		p := &recs[i]
		if p.located == "" || !wide.Contains(orb.Point{p.lon, p.lat}) {
			continue
		}
		if view.Contains(orb.Point{p.lon, p.lat}) {
			ans.InView++
		}
		cands = append(cands, cand{p, math.Hypot(p.lon-cx, p.lat-cy)})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.d != b.d {
			if a.d < b.d {
				return -1
			}
			return 1
		}
		return cmpRec(a.p.dest, a.p.id, b.p.dest, b.p.id)
	})
	tol := 360 / (256 * math.Exp2(float64(zoom))) // a pixel, in degrees
	bucket := zoom
	vertices := 0
	var todo []*placed
	for i, c := range cands {
		if i >= maxShapes {
			ans.Left += len(cands) - i
			break
		}
		if sh, ok := s.shapeCache.get(shapeKey{c.p.dest, c.p.id, bucket}); ok {
			if vertices+sh.Vertices > maxShapeVertices {
				ans.Left++
				continue
			}
			vertices += sh.Vertices
			ans.Shapes = append(ans.Shapes, sh)
			continue
		}
		todo = append(todo, c.p)
	}
	byDest := map[string][]*placed{}
	for _, p := range todo {
		byDest[p.dest] = append(byDest[p.dest], p)
	}
	if len(todo) > 0 {
		release, err := s.holdBodies(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		defer release()
	}
	for dest, ps := range byDest {
		for _, part := range chunks(ps, broker.MaxFilterValues) {
			ids := make([]string, len(part))
			for i, p := range part {
				ids[i] = p.id
			}
			// Pages of at most placeBodyBytes of bodies (one record at
			// least), followed to the last: a page cut by its bytes leaves
			// none of the records out.
			lo := broker.ListOptions{Destination: dest, Filter: broker.Filter{IDs: ids}, Limit: len(ids), MaxBytes: placeBodyBytes}
			for {
				pg, err := s.store.List(r.Context(), lo)
				if err != nil {
					s.fail(w, r, err)
					return
				}
				s.drawPage(r.Context(), pg, dest, bucket, tol, &vertices, &ans)
				if pg.Next == "" || pg.Next == lo.After {
					break
				}
				lo.After = pg.Next
			}
		}
	}
	writeJSON(w, ans)
}

// drawPage draws the shapes of a page of records read with their bodies
// into ans, within maxShapeVertices, and caches them.
func (s *Server) drawPage(ctx context.Context, pg broker.Page, dest string, bucket int, tol float64, vertices *int, ans *shapesAnswer) {
	for _, e := range pg.Entries {
		if e.Record == nil {
			continue
		}
		env := envelopeOf(e.Record)
		if env == nil {
			continue
		}
		sh, ok := s.shapeOf(ctx, e.Record, env, tol)
		if !ok {
			ans.Left++
			continue
		}
		s.shapeCache.put(shapeKey{dest, e.Record.ID, bucket}, sh)
		if *vertices+sh.Vertices > maxShapeVertices {
			ans.Left++
			continue
		}
		*vertices += sh.Vertices
		ans.Shapes = append(ans.Shapes, sh)
	}
}

// cmpRec orders records by destination, then id (numeric ids: shorter
// is smaller).
func cmpRec(ad, aid, bd, bid string) int {
	if c := strings.Compare(ad, bd); c != 0 {
		return c
	}
	if len(aid) != len(bid) {
		return len(aid) - len(bid)
	}
	return strings.Compare(aid, bid)
}

// shapeOf draws a record's geometry for the main map: in
// longitude/latitude, continuous across ±180°, simplified to tol degrees.
func (s *Server) shapeOf(ctx context.Context, rec *broker.Record, env *envelope.Envelope, tol float64) (shape, bool) {
	data, err := s.geometryBytes(ctx, env)
	if err != nil {
		return shape{}, false
	}
	ans, g, err := s.prepare(data, broker.EPSGOf(env), env, nil)
	if err != nil || ans.Display != "wgs84" || g == nil {
		return shape{}, false
	}
	simple, n := simplified(g, tol)
	b, err := geojson.Append(nil, simple, nil)
	if err != nil {
		return shape{}, false
	}
	sh := shape{Destination: rec.Destination, ID: rec.ID, EventID: env.EventID, Class: string(env.FailureClass), Geometry: b,
		Vertices: n, Of: ans.Vertices}
	if env.GeometryError != nil {
		sh.Kind = env.GeometryError.Kind
	}
	return sh, true
}

// simplified returns g with every ring and line simplified with
// Douglas-Peucker to tol (g's own slices are reused), and its vertex
// count. Points stay.
func simplified(g orb.Geometry, tol float64) (orb.Geometry, int) {
	dp := simplify.DouglasPeucker(tol)
	n := 0
	var walk func(g orb.Geometry) orb.Geometry
	walk = func(g orb.Geometry) orb.Geometry {
		switch g := g.(type) {
		case orb.Point:
			n++
			return g
		case orb.MultiPoint:
			n += len(g)
			return g
		case orb.LineString:
			l := dp.LineString(g)
			n += len(l)
			return l
		case orb.Ring:
			r := dp.Ring(g)
			n += len(r)
			return r
		case orb.MultiLineString:
			for i := range g {
				g[i] = walk(g[i]).(orb.LineString)
			}
			return g
		case orb.Polygon:
			for i := range g {
				g[i] = walk(g[i]).(orb.Ring)
			}
			return g
		case orb.MultiPolygon:
			for i := range g {
				g[i] = walk(g[i]).(orb.Polygon)
			}
			return g
		case orb.Collection:
			for i := range g {
				g[i] = walk(g[i])
			}
			return g
		}
		return g
	}
	return walk(g), n
}

// shapeKey names a simplified shape: its record and the zoom it was
// simplified for.
type shapeKey struct {
	dest, id string
	zoom     int
}

// shapeCache keeps recently drawn shapes, up to a number of bytes, the
// least recently used forgotten first.
type shapeCache struct {
	mu    sync.Mutex
	max   int
	bytes int
	order *clist.List // of shapeKey, most recent first
	m     map[shapeKey]*clist.Element
	vals  map[shapeKey]shape
}

func newShapeCache(max int) *shapeCache {
	return &shapeCache{max: max, order: clist.New(), m: map[shapeKey]*clist.Element{}, vals: map[shapeKey]shape{}}
}

func (c *shapeCache) get(k shapeKey) (shape, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[k]
	if !ok {
		return shape{}, false
	}
	c.order.MoveToFront(el)
	return c.vals[k], true
}

func (c *shapeCache) put(k shapeKey, v shape) {
	size := len(v.Geometry) + len(v.ID) + len(v.Destination) + len(v.EventID) + 64
	if size > c.max/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[k]; ok {
		c.order.MoveToFront(el)
		return
	}
	c.m[k] = c.order.PushFront(k)
	c.vals[k] = v
	c.bytes += size
	for c.bytes > c.max {
		el := c.order.Back()
		old := el.Value.(shapeKey)
		o := c.vals[old]
		c.bytes -= len(o.Geometry) + len(o.ID) + len(o.Destination) + len(o.EventID) + 64
		c.order.Remove(el)
		delete(c.m, old)
		delete(c.vals, old)
	}
}

// forget drops the shapes of records that left (replayed, discarded).
func (c *shapeCache) forget(keys []recKey) {
	if len(keys) == 0 {
		return
	}
	gone := map[recKey]bool{}
	for _, k := range keys {
		gone[k] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, el := range c.m {
		if gone[recKey{k.dest, k.id}] {
			o := c.vals[k]
			c.bytes -= len(o.Geometry) + len(o.ID) + len(o.Destination) + len(o.EventID) + 64
			c.order.Remove(el)
			delete(c.m, k)
			delete(c.vals, k)
		}
	}
}
