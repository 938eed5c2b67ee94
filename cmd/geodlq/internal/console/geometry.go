package console

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/replaying"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/jsonscan"
	"github.com/geodlq/geodlq/offload"
)

// Display budgets: the page draws geometries up to these sizes.
const (
	maxDisplayBytes    = 16 << 20
	maxDisplayVertices = 1_000_000
)

const wgs84 = 4326

// toWGS84 returns where pt, in the payload's coordinates (EPSG code
// epsg), lies in longitude and latitude, and the code it was reprojected
// from (0 when it was not); why says why it cannot be placed.
func (s *Server) toWGS84(pt orb.Point, epsg int, env *envelope.Envelope) (lon, lat float64, from int, why string) {
	if !finite(pt) {
		return 0, 0, 0, "the position is not finite"
	}
	switch {
	case epsg == wgs84:
	case epsg == 0 && env != nil && env.SourceCRS == "" && env.FailureClass != classify.ClassCRSMismatch:
		// No CRS declared: RFC 7946's default, longitude/latitude.
	case epsg == 0:
		return 0, 0, 0, "the payload's CRS is unknown"
	default:
		out, err := s.checker.Reproject(pointsJSON([]orb.Point{pt}), epsg, wgs84)
		if err != nil {
			return 0, 0, 0, "the position cannot be reprojected to EPSG:4326: " + clip(err.Error(), 200)
		}
		pts, ok := parsePoints(out)
		if !ok || len(pts) != 1 {
			return 0, 0, 0, "the position cannot be reprojected to EPSG:4326"
		}
		pt, from = pts[0], epsg
		if math.Abs(pt[0]) <= 540 {
			pt[0] = nearLon(pt[0], 0) // PROJ may answer past ±180°
		}
	}
	if math.Abs(pt[0]) > 180 || math.Abs(pt[1]) > 90 {
		return 0, 0, 0, "out of range for longitude/latitude"
	}
	return pt[0], pt[1], from, ""
}

func pointsJSON(pts []orb.Point) []byte {
	b, _ := geojson.Append(nil, orb.MultiPoint(pts), nil)
	return b
}

func parsePoints(b []byte) ([]orb.Point, bool) {
	g, err := geojson.ParseGeometry(b, geojson.Limits{MaxVertices: maxDisplayVertices})
	if err != nil {
		return nil, false
	}
	mp, ok := g.Geom.(orb.MultiPoint)
	return mp, ok
}

// marker is something the page marks on a record's geometry.
type marker struct {
	// Kind is "segment" (one of the crossing segments), "closing_segment"
	// (an unclosed ring's missing segment), "vertex" (the offending
	// position) or "point" (GEOS's location).
	Kind string `json:"kind"`
	// Coords are in the display's coordinates (x, y).
	Coords [][2]float64 `json:"coords"`
	Label  string       `json:"label"`
}

// geometryAnswer is GET …/geometry and each side of a repair preview.
type geometryAnswer struct {
	// Geometry is GeoJSON in the display's coordinates, non-finite
	// positions left out.
	Geometry json.RawMessage `json:"geometry"`
	// Display is "wgs84" (drawn on the map) or "planar" (in the
	// payload's own coordinates, without a basemap).
	Display         string   `json:"display"`
	ReprojectedFrom int      `json:"reprojected_from,omitempty"`
	Note            string   `json:"note,omitempty"`
	Markers         []marker `json:"markers"`
	Vertices        int      `json:"vertices"`
	// Dropped counts positions not drawn (NaN or infinite).
	Dropped int `json:"dropped,omitempty"`
	// Drawn, when set, is how many positions the geometry was simplified
	// to for display (Vertices has them all).
	Drawn  int    `json:"drawn,omitempty"`
	Type   string `json:"type"`
	Reason string `json:"reason,omitempty"`
	Kind   string `json:"reason_kind,omitempty"`
}

func (s *Server) geometry(w http.ResponseWriter, r *http.Request) {
	e, err := s.getRecord(r.Context(), r.PathValue("dest"), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	env := envelopeOf(e.Record)
	if env == nil {
		s.problem(w, r, http.StatusUnprocessableEntity, "no geometry", "the record is not a dlq.v1 envelope")
		return
	}
	data, err := s.geometryBytes(r.Context(), env)
	if err != nil {
		s.failRecord(w, r, err)
		return
	}
	ans, err := s.display(data, broker.EPSGOf(env), env, env.GeometryError)
	if err != nil {
		s.problem(w, r, http.StatusUnprocessableEntity, "the geometry cannot be drawn", err.Error())
		return
	}
	writeJSON(w, ans)
}

// geometryBytes returns the envelope's geometry, fetched and verified when
// offloaded.
func (s *Server) geometryBytes(ctx context.Context, env *envelope.Envelope) ([]byte, error) {
	g := env.Geometry
	if g.Missing {
		return nil, &unprocessableError{"the event has no geometry"}
	}
	if g.OffloadURI == "" {
		return g.Inline, nil
	}
	if s.opts.Blobs == nil {
		return nil, &unprocessableError{"the geometry is offloaded: start geodlq serve with --blobs to draw it"}
	}
	if g.ByteSize > maxDisplayBytes {
		return nil, &unprocessableError{fmt.Sprintf("the geometry is %d bytes, more than the %d the page draws; download the payload", g.ByteSize, maxDisplayBytes)}
	}
	b, err := s.opts.Blobs.Fetch(ctx, offload.Ref{URI: g.OffloadURI, Size: g.ByteSize, SHA256: g.ContentSHA256})
	if err != nil {
		return nil, &unprocessableError{withBlobsHint("the offloaded geometry cannot be restored: "+err.Error(), err)}
	}
	return b, nil
}

// display prepares a geometry for the page: in longitude/latitude when
// its CRS is known (reprojected with PROJ when it is another), else in
// its own coordinates, with the fault ge describes marked.
func (s *Server) display(data []byte, epsg int, env *envelope.Envelope, ge *envelope.GeometryError) (geometryAnswer, error) {
	ans, clean, err := s.prepare(data, epsg, env, ge)
	if err != nil {
		return ans, err
	}
	if ans.Vertices > displaySimplifyAbove {
		// A page draws a million positions slowly, and the eye does not
		// need them: a ten-thousandth of the extent is finer than the
		// panel's pixels at its first zoom. The fault's marks are exact.
		b := clean.Bound()
		var n int
		clean, n = simplified(clean, math.Max(b.Max[0]-b.Min[0], b.Max[1]-b.Min[1])/10000)
		ans.Note += fmt.Sprintf(" Simplified for display: %d of %d positions drawn; the fault's marks are exact.", n, ans.Vertices)
		ans.Drawn = n
	}
	ans.Geometry, err = geojson.Append(nil, clean, nil)
	if err != nil {
		return ans, fmt.Errorf("encoding the geometry: %v", err)
	}
	return ans, nil
}

// prepare reads a geometry for the page: the answer without its encoded
// geometry, and the geometry to draw (see display).
func (s *Server) prepare(data []byte, epsg int, env *envelope.Envelope, ge *envelope.GeometryError) (geometryAnswer, orb.Geometry, error) {
	ans := geometryAnswer{Markers: []marker{}}
	if len(data) > maxDisplayBytes {
		return ans, nil, fmt.Errorf("the geometry is %d bytes, more than the %d the page draws", len(data), maxDisplayBytes)
	}
	g, err := geojson.ParseGeometry(data, geojson.Limits{MaxVertices: maxDisplayVertices})
	if err != nil {
		return ans, nil, fmt.Errorf("the geometry cannot be parsed: %v", err)
	}
	ans.Type, ans.Vertices = g.Geom.GeoJSONType(), g.Vertices
	if ge != nil {
		ans.Reason, ans.Kind = ge.Reason, ge.Kind
	}
	marks := faultMarkers(g.Geom, ge)
	clean, dropped := finiteOnly(g.Geom)
	ans.Dropped = dropped

	ans.Display = "wgs84"
	switch {
	case epsg == wgs84:
	case epsg == 0 && env != nil && env.SourceCRS == "" && env.FailureClass != classify.ClassCRSMismatch:
	case epsg == 0:
		ans.Display = "planar"
		ans.Note = "The payload's CRS is unknown"
		if env != nil && env.SourceCRS != "" {
			ans.Note += " (it declares " + strconv.Quote(clip(env.SourceCRS, 200)) + ")"
		}
		ans.Note += ": drawn in its own coordinates, without a basemap."
	default:
		moved, mmarks, err := s.reprojectDisplay(clean, marks, epsg)
		if err != nil {
			ans.Display = "planar"
			ans.Note = fmt.Sprintf("Cannot reproject from EPSG:%d to EPSG:4326 (%s): drawn in its own coordinates.", epsg, clip(err.Error(), 200))
			break
		}
		clean, marks, ans.ReprojectedFrom = moved, mmarks, epsg
		ans.Note = fmt.Sprintf("Reprojected from EPSG:%d to EPSG:4326 with PROJ for display; the payload is unchanged.", epsg)
	}
	if ans.Display == "wgs84" && !inLonLat(clean, ans.ReprojectedFrom != 0) {
		ans.Display = "planar"
		ans.Note = "Coordinates lie outside longitude/latitude range (metres labelled as degrees?): drawn in their own coordinates, without a basemap."
	}
	if ans.Display == "wgs84" {
		// Continuous across ±180°, for the map (the markers follow).
		var mid float64
		clean, mid = unwrap(clean)
		for i := range marks {
			for j := range marks[i].Coords {
				marks[i].Coords[j][0] = nearLon(marks[i].Coords[j][0], mid)
			}
		}
	}
	if dropped > 0 {
		ans.Note += fmt.Sprintf(" %d non-finite position(s) cannot be drawn; the marker stands next to it.", dropped)
	}
	ans.Markers = nonNil(marks)
	return ans, clean, nil
}

// inLonLat reports whether every position of g is a longitude/latitude:
// within ±180° and ±90°, or, for PROJ's output (reprojected), within a
// turn past the antimeridian, which unwrap brings back.
func inLonLat(g orb.Geometry, reprojected bool) bool {
	maxLon := 180.0
	if reprojected {
		maxLon = 540
	}
	ok := true
	geojson.Components(g, func(c geojson.Component) bool {
		for _, p := range c.Points {
			if math.Abs(p[0]) > maxLon || math.Abs(p[1]) > 90 {
				ok = false
				return false
			}
		}
		return true
	})
	return ok
}

// reprojectDisplay reprojects a geometry and its markers to EPSG:4326.
func (s *Server) reprojectDisplay(g orb.Geometry, marks []marker, epsg int) (orb.Geometry, []marker, error) {
	b, err := geojson.Append(nil, g, nil)
	if err != nil {
		return nil, nil, err
	}
	out, err := s.checker.Reproject(b, epsg, wgs84)
	if err != nil {
		return nil, nil, err
	}
	moved, err := geojson.ParseGeometry(out, geojson.Limits{MaxVertices: maxDisplayVertices})
	if err != nil {
		return nil, nil, err
	}
	var pts []orb.Point
	for _, m := range marks {
		for _, c := range m.Coords {
			pts = append(pts, orb.Point(c))
		}
	}
	if len(pts) == 0 {
		return moved.Geom, marks, nil
	}
	mo, err := s.checker.Reproject(pointsJSON(pts), epsg, wgs84)
	if err != nil {
		return nil, nil, err
	}
	mp, ok := parsePoints(mo)
	if !ok || len(mp) != len(pts) {
		return nil, nil, fmt.Errorf("reprojecting the markers")
	}
	i := 0
	out2 := make([]marker, len(marks))
	for j, m := range marks {
		out2[j] = marker{Kind: m.Kind, Label: m.Label}
		for range m.Coords {
			out2[j].Coords = append(out2[j].Coords, [2]float64(mp[i]))
			i++
		}
	}
	return moved.Geom, out2, nil
}

// finiteOnly returns g without its non-finite positions, and how many it
// dropped. Components left with too few positions are kept as they are
// (the page draws what there is).
func finiteOnly(g orb.Geometry) (orb.Geometry, int) {
	dropped := 0
	keep := func(ps []orb.Point) []orb.Point {
		out := ps[:0:0]
		for _, p := range ps {
			if finite(p) {
				out = append(out, p)
			} else {
				dropped++
			}
		}
		return out
	}
	var walk func(g orb.Geometry) orb.Geometry
	walk = func(g orb.Geometry) orb.Geometry {
		switch g := g.(type) {
		case orb.Point:
			if !finite(g) {
				dropped++
				return orb.MultiPoint{}
			}
			return g
		case orb.MultiPoint:
			return orb.MultiPoint(keep(g))
		case orb.LineString:
			return orb.LineString(keep(g))
		case orb.Ring:
			return orb.Ring(keep(g))
		case orb.MultiLineString:
			out := make(orb.MultiLineString, len(g))
			for i, l := range g {
				out[i] = orb.LineString(keep(l))
			}
			return out
		case orb.Polygon:
			out := make(orb.Polygon, len(g))
			for i, r := range g {
				out[i] = orb.Ring(keep(r))
			}
			return out
		case orb.MultiPolygon:
			out := make(orb.MultiPolygon, len(g))
			for i, p := range g {
				out[i] = walk(p).(orb.Polygon)
			}
			return out
		case orb.Collection:
			out := make(orb.Collection, len(g))
			for i, m := range g {
				out[i] = walk(m)
			}
			return out
		}
		return g
	}
	return walk(g), dropped
}

// component returns the run of positions a fault's Part and Ring name.
func component(g orb.Geometry, f *classify.Fault) (geojson.Component, bool) {
	var found geojson.Component
	ok := false
	geojson.Components(g, func(c geojson.Component) bool {
		if c.Part == f.Part && (c.Ring == f.Ring || c.Kind == geojson.KindPoints) {
			found, ok = c, true
			return false
		}
		return true
	})
	return found, ok
}

// faultMarkers marks the fault ge describes on g, in g's coordinates.
func faultMarkers(g orb.Geometry, ge *envelope.GeometryError) []marker {
	var out []marker
	if ge == nil {
		return out
	}
	var loc *orb.Point
	if len(ge.Location) == 2 {
		p := orb.Point{ge.Location[0], ge.Location[1]}
		if finite(p) {
			loc = &p
		}
	}
	f := ge.Fault
	var comp geojson.Component
	haveComp := false
	if f != nil {
		comp, haveComp = component(g, f)
	}
	where := func(f *classify.Fault) string {
		s := ""
		if f.Part >= 0 {
			s += "part " + strconv.Itoa(f.Part) + ", "
		}
		if f.Ring >= 0 {
			s += "ring " + strconv.Itoa(f.Ring) + ", "
		}
		return s
	}
	switch classify.ReasonKind(ge.Kind) {
	case classify.KindInvalidCoordinate:
		if haveComp && f.Vertex >= 0 && f.Vertex < len(comp.Points) {
			// The position itself cannot be drawn: mark it between its
			// finite neighbours.
			var near []orb.Point
			for _, j := range []int{f.Vertex - 1, f.Vertex + 1} {
				if j >= 0 && j < len(comp.Points) && finite(comp.Points[j]) {
					near = append(near, comp.Points[j])
				}
			}
			if len(near) > 0 {
				var c orb.Point
				for _, p := range near {
					c[0], c[1] = c[0]+p[0]/float64(len(near)), c[1]+p[1]/float64(len(near))
				}
				out = append(out, marker{Kind: "vertex", Coords: [][2]float64{c},
					Label: fmt.Sprintf("%svertex %d is %s (not drawable): marked between its neighbours", where(f), f.Vertex, geojson.FormatXY(comp.Points[f.Vertex]))})
			}
		}
		return out
	case classify.KindRingNotClosed:
		if haveComp && len(comp.Points) >= 2 {
			first, last := comp.Points[0], comp.Points[len(comp.Points)-1]
			if finite(first) && finite(last) {
				out = append(out, marker{Kind: "closing_segment", Coords: [][2]float64{last, first},
					Label: fmt.Sprintf("%sthe ring is not closed: the missing closing segment from vertex %d back to vertex 0", where(f), len(comp.Points)-1)})
			}
			out = append(out, marker{Kind: "vertex", Coords: [][2]float64{first}, Label: fmt.Sprintf("%sfirst vertex, where the ring should end", where(f))})
		}
		return out
	case classify.KindOutOfRange:
		if loc != nil {
			label := "position out of range"
			if f != nil {
				label = fmt.Sprintf("%svertex %d is out of range: %s", where(f), f.Vertex, geojson.FormatXY(*loc))
			}
			out = append(out, marker{Kind: "vertex", Coords: [][2]float64{*loc}, Label: label})
		}
		return out
	}
	if loc == nil {
		return out
	}
	if f != nil && f.OnSegment || classify.ReasonKind(ge.Kind) == classify.KindSelfIntersection {
		for _, sm := range crossingSegments(g, *loc, f) {
			out = append(out, sm)
		}
	}
	if f != nil && !f.OnSegment && haveComp && f.Vertex >= 0 && f.Vertex < len(comp.Points) {
		out = append(out, marker{Kind: "vertex", Coords: [][2]float64{comp.Points[f.Vertex]}, Label: fmt.Sprintf("%svertex %d", where(f), f.Vertex)})
	}
	out = append(out, marker{Kind: "point", Coords: [][2]float64{*loc}, Label: "GEOS: " + clip(ge.Reason, 200)})
	return out
}

// crossingSegments finds the segments of g that pass through p (the
// fault's segment first): both segments of a self-intersection.
func crossingSegments(g orb.Geometry, p orb.Point, f *classify.Fault) []marker {
	type seg struct {
		part, ring, v int
		a, b          orb.Point
	}
	var segs []seg
	scale := math.Max(math.Abs(p[0]), math.Abs(p[1]))
	geojson.Components(g, func(c geojson.Component) bool {
		if c.Kind == geojson.KindPoints {
			return true
		}
		for i := 0; i+1 < len(c.Points); i++ {
			a, b := c.Points[i], c.Points[i+1]
			if !finite(a) || !finite(b) {
				continue
			}
			s := math.Max(scale, math.Max(math.Max(math.Abs(a[0]), math.Abs(a[1])), math.Max(math.Abs(b[0]), math.Abs(b[1]))))
			if segDistance(p, a, b) <= 1e-9*math.Max(s, 1e-300) {
				segs = append(segs, seg{c.Part, c.Ring, i, a, b})
			}
		}
		return len(segs) < 64
	})
	// The fault's own segment first.
	if f != nil {
		for i, s := range segs {
			if s.part == f.Part && s.ring == f.Ring && s.v == f.Vertex {
				segs[0], segs[i] = segs[i], segs[0]
				break
			}
		}
	}
	var out []marker
	for i, s := range segs {
		if i == 4 {
			break
		}
		label := fmt.Sprintf("segment %d→%d", s.v, s.v+1)
		if s.ring >= 0 {
			label = fmt.Sprintf("ring %d, %s", s.ring, label)
		}
		if s.part >= 0 {
			label = fmt.Sprintf("part %d, %s", s.part, label)
		}
		out = append(out, marker{Kind: "segment", Coords: [][2]float64{s.a, s.b}, Label: label + " (crossing)"})
	}
	return out
}

func segDistance(p, a, b orb.Point) float64 {
	dx, dy := b[0]-a[0], b[1]-a[1]
	l2 := dx*dx + dy*dy
	t := 0.0
	if l2 > 0 {
		t = math.Max(0, math.Min(1, ((p[0]-a[0])*dx+(p[1]-a[1])*dy)/l2))
	}
	x, y := a[0]+t*dx-p[0], a[1]+t*dy-p[1]
	return math.Hypot(x, y)
}

// repairsFor lists the repairs that apply to an envelope.
func repairsFor(env *envelope.Envelope) []string {
	switch env.FailureClass {
	case classify.ClassInvalidGeometry:
		return []string{replaying.MakeValid}
	case classify.ClassCRSMismatch:
		if e := broker.EPSGOf(env); e != 0 {
			return []string{replaying.Reproject, replaying.ReprojectMakeValid}
		}
	}
	return []string{}
}

// repairAnswer is GET …/repair: what a repair would make of the record.
type repairAnswer struct {
	Method string `json:"method"`
	OK     bool   `json:"ok"`
	// Error says why the repair does not apply or failed.
	Error string `json:"error,omitempty"`
	// NotApplicable is set when the method is not the repair for the
	// record's class (Error says why); the repairer was not run.
	NotApplicable  bool            `json:"not_applicable,omitempty"`
	Detail         string          `json:"detail,omitempty"`
	VerticesBefore int             `json:"vertices_before"`
	VerticesAfter  int             `json:"vertices_after"`
	TypeBefore     string          `json:"type_before,omitempty"`
	TypeAfter      string          `json:"type_after,omitempty"`
	ValidAfter     bool            `json:"valid_after"`
	ReasonAfter    string          `json:"reason_after,omitempty"`
	Before         *geometryAnswer `json:"before,omitempty"`
	After          *geometryAnswer `json:"after,omitempty"`
}

func (s *Server) repairPreview(w http.ResponseWriter, r *http.Request) {
	method := r.URL.Query().Get("method")
	class, ok := replaying.ClassOf(method)
	if !ok {
		s.fail(w, r, badQuery("method %q: want %s", clip(method, 40), strings.Join(replaying.RepairNames(), ", ")))
		return
	}
	_, env, payload, err := s.restore(r.Context(), r.PathValue("dest"), r.PathValue("id"))
	if err != nil {
		s.failRecord(w, r, err)
		return
	}
	if ok, why := applies(env, method, s.opts.ExpectedEPSG); !ok {
		writeJSON(w, repairAnswer{Method: method, Error: why, NotApplicable: true, VerticesBefore: env.VertexCount, TypeBefore: env.GeometryType})
		return
	}
	repairers, err := replaying.Repairers(s.checker.Checker, []string{method}, nil)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ans := repairAnswer{Method: method, VerticesBefore: env.VertexCount, TypeBefore: env.GeometryType}
	if gb, err := s.geometryBytes(r.Context(), env); err == nil {
		if before, err := s.display(gb, broker.EPSGOf(env), env, env.GeometryError); err == nil {
			ans.Before = &before
			ans.VerticesBefore, ans.TypeBefore = before.Vertices, before.Type
		}
	}
	fixed, rep, err := repairers[class].Repair(r.Context(), env, payload)
	if err != nil {
		ans.Error = err.Error()
		writeJSON(w, ans)
		return
	}
	ans.OK, ans.Detail = true, rep.String()
	if _, cerr := s.checker.CheckEventContext(r.Context(), fixed); cerr == nil {
		ans.ValidAfter = true
	} else {
		ans.ReasonAfter = cerr.Error()
	}
	start, end, err := jsonscan.Find(fixed, envelope.DefaultGeometryPath)
	if err == nil && end > start {
		after, derr := s.display(fixed[start:end], s.afterEPSG(env, method), env, nil)
		if derr == nil {
			ans.After = &after
			ans.VerticesAfter, ans.TypeAfter = after.Vertices, after.Type
		}
	}
	writeJSON(w, ans)
}

// afterEPSG is the CRS of a repaired payload.
func (s *Server) afterEPSG(env *envelope.Envelope, method string) int {
	if method == replaying.Reproject || method == replaying.ReprojectMakeValid {
		return s.opts.ExpectedEPSG
	}
	return broker.EPSGOf(env)
}
