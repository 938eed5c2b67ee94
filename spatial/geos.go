//go:build cgo

package spatial

import (
	"errors"
	"fmt"

	"github.com/paulmach/orb"
	"github.com/twpayne/go-geos"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
)

// geosPool hands out GEOS contexts. A go-geos Context serialises every call
// on its own mutex, so sharing one between goroutines would make them take
// turns; a pool gives each concurrent caller its own. Idle contexts beyond
// the pool's capacity are dropped and finalised by go-geos.
type geosPool struct {
	ch chan *geos.Context
}

func newGEOSPool(size int) geosPool {
	return geosPool{ch: make(chan *geos.Context, max(size, 1))}
}

func (p geosPool) get() *geos.Context {
	select {
	case c := <-p.ch:
		return c
	default:
		return geos.NewContext()
	}
}

func (p geosPool) put(c *geos.Context) {
	select {
	case p.ch <- c:
	default:
	}
}

func (p geosPool) drain() {
	for {
		select {
		case <-p.ch:
		default:
			return
		}
	}
}

// withGEOS runs fn with a pooled context, turning a panic into an error.
// A context that panicked is not returned to the pool.
func (c *Checker) withGEOS(stage classify.Stage, fn func(*geos.Context) *classify.Error) (err *classify.Error) {
	ctx := c.nat.geos.get()
	defer func() {
		if v := recover(); v != nil {
			err = geosFailure(stage, v)
			return
		}
		c.nat.geos.put(ctx)
	}()
	return fn(ctx)
}

// newGeom builds g in ctx through WKB. The caller destroys the result.
//
// A multi-part geometry is built part by part, through one reused buffer,
// and assembled in GEOS: the WKB of a large MultiPolygon is as large as its
// positions, and go-geos copies it into C memory before reading it, so
// building it whole would hold two transient copies of the geometry on top
// of GEOS's own.
func newGeom(ctx *geos.Context, g orb.Geometry) (*geos.Geom, error) {
	var parts []orb.Geometry
	var typ geos.TypeID
	switch g := g.(type) {
	case orb.MultiPolygon:
		typ = geos.TypeIDMultiPolygon
		for _, p := range g {
			parts = append(parts, p)
		}
	case orb.MultiLineString:
		typ = geos.TypeIDMultiLineString
		for _, l := range g {
			parts = append(parts, l)
		}
	case orb.Collection:
		typ, parts = geos.TypeIDGeometryCollection, g
	}
	if len(parts) < 2 {
		return newGeomWKB(ctx, appendWKB(make([]byte, 0, wkbSize(g)), g))
	}
	geoms := make([]*geos.Geom, 0, len(parts))
	var buf []byte
	for _, p := range parts {
		buf = appendWKB(buf[:0], p)
		geom, err := newGeomWKB(ctx, buf)
		if err != nil {
			for _, done := range geoms {
				done.Destroy()
			}
			return nil, err
		}
		geoms = append(geoms, geom)
	}
	return ctx.NewCollection(typ, geoms), nil
}

// newGeomWKB builds the geometry of wkb in ctx.
func newGeomWKB(ctx *geos.Context, wkb []byte) (*geos.Geom, error) {
	geom, err := ctx.NewGeomFromWKB(wkb)
	if err == nil && geom == nil {
		err = errors.New("GEOS returned no geometry")
	}
	return geom, err
}

// wkbSize estimates the WKB size of g to size the buffer once.
func wkbSize(g orb.Geometry) int {
	n := 64
	geojson.Components(g, func(c geojson.Component) bool {
		n += 16*len(c.Points) + 16
		return true
	})
	return n
}

// topologyGEOS is topology with GEOS: one cgo call builds the geometry from
// the parser's positions and checks it (geosbuild.go).
func (c *Checker) topologyGEOS(g geojson.Geometry) *classify.Error {
	h, err := c.nat.handles.get()
	if err != nil {
		e := geosFailure(classify.StageTopologyValidation, err)
		fillDetail(e, g)
		return e
	}
	p := c.nat.programs.Get().(*geosProgram)
	p.set(g.Geom, g.Points)
	code, msg := geosCheck(h, p)
	p.release(&c.nat.programs)
	c.nat.handles.put(h)
	switch code {
	case geosIsValid:
		return nil
	case geosIsInvalid:
		return invalidFromReason(g, msg)
	case geosBuildFailed:
		e := &classify.Error{
			Class: classify.ClassInvalidGeometry,
			Stage: classify.StageTopologyValidation,
			Geometry: &classify.GeometryDetail{
				Reason: msg,
				Kind:   kindOf(msg),
			},
			Err: fmt.Errorf("spatial: GEOS refused the geometry: %s", msg),
		}
		fillDetail(e, g)
		return e
	}
	e := geosFailure(classify.StageTopologyValidation, msg)
	fillDetail(e, g)
	return e
}

// MakeValid repairs a GeoJSON geometry and returns the repaired geometry as
// GeoJSON with exact numbers. Unclosed rings are closed and collapsed rings
// and lines dropped first (see [MakeValidInfo]); if that leaves a valid
// geometry it is returned as is, otherwise GEOS's MakeValid ("structure"
// method, collapsed components discarded) repairs it. A valid input is
// returned re-encoded and unchanged. The output of a repair is 2D (Z is
// dropped).
//
// It fails, with a [*classify.Error], for input it cannot repair: malformed
// GeoJSON (schema_violation), exceeded budgets (resource_exhausted: the
// parse budgets, and the repair budgets of Options.MaxRepairVertices,
// MaxRepairParts and MaxRepairCrossings, checked before GEOS sees the
// geometry, valid or not), and
// empty geometries, non-finite coordinates or geometries whose every
// component collapses (invalid_geometry, with the fault CheckGeometry
// reports).
func (c *Checker) MakeValid(data []byte) ([]byte, MakeValidInfo, error) {
	info := MakeValidInfo{Method: MakeValidMethod}
	if c.closed.Load() {
		return nil, info, errClosed(classify.StageTopologyValidation)
	}
	g, perr := c.parseGeometry(data)
	if perr != nil {
		return nil, info, perr
	}
	info.TypeBefore, info.VerticesBefore = g.Geom.GeoJSONType(), g.Vertices
	// invalid is the input's fault, as CheckGeometry reports it.
	invalid := geojson.Validate(g)
	if invalid != nil {
		switch invalid.Geometry.Kind {
		case classify.KindEmpty, classify.KindInvalidCoordinate:
			return nil, info, invalid
		}
		info.Reason = invalid.Geometry.Reason
	}
	prepared := prepare(g.Geom, &info)
	// Before GEOS sees it: building, checking and repairing a geometry
	// each cost GEOS far more than the geometry's size.
	if err := c.repairBudget(prepared); err != nil {
		fillDetail(err, g)
		return nil, info, err
	}
	var out orb.Geometry
	err := c.withGEOS(classify.StageTopologyValidation, func(ctx *geos.Context) *classify.Error {
		geom, err := newGeom(ctx, prepared)
		if err != nil {
			return &classify.Error{
				Class: classify.ClassUnknown,
				Stage: classify.StageTopologyValidation,
				Err:   fmt.Errorf("spatial: GEOS refused the prepared geometry: %w", err),
			}
		}
		defer geom.Destroy()
		reason := geom.IsValidReason()
		if reason == geosValid {
			if invalid != nil {
				// Closing rings and dropping collapsed ones sufficed.
				out = prepared
			}
			return nil
		}
		if invalid == nil {
			invalid = invalidFromReason(g, reason)
			info.Reason = reason
		}
		fixed := geom.MakeValidWithParams(geos.MakeValidStructure, geos.MakeValidDiscardCollapsed)
		if fixed == nil {
			return &classify.Error{
				Class: classify.ClassUnknown,
				Stage: classify.StageTopologyValidation,
				Err:   errors.New("spatial: GEOS MakeValid returned no geometry"),
			}
		}
		defer fixed.Destroy()
		if out, err = decodeWKB(fixed.ToWKB()); err != nil {
			return &classify.Error{
				Class: classify.ClassUnknown,
				Stage: classify.StageTopologyValidation,
				Err:   err,
			}
		}
		return nil
	})
	if err != nil {
		fillDetail(err, g)
		return nil, info, err
	}
	var z []float64
	if invalid == nil {
		info.WasValid = true
		out, z = g.Geom, g.Z
	}
	b, werr := geojson.Append(nil, out, z)
	if werr != nil {
		return nil, info, &classify.Error{
			Class: classify.ClassUnknown,
			Stage: classify.StageTopologyValidation,
			Err:   fmt.Errorf("spatial: encoding the repaired geometry: %w", werr),
		}
	}
	info.TypeAfter = out.GeoJSONType()
	info.VerticesAfter = countVertices(out)
	if info.VerticesAfter == 0 {
		// Everything collapsed: there is no repair, only the fault.
		invalid.Err = fmt.Errorf("spatial: MakeValid left an empty geometry: %w", invalid.Err)
		return nil, info, invalid
	}
	return b, info, nil
}

// repairBudget refuses a geometry whose GEOS repair could cost far more
// than its size (see Options.MaxRepairVertices).
func (c *Checker) repairBudget(g orb.Geometry) *classify.Error {
	o := c.opts
	vertices, parts := 0, 0
	geojson.Components(g, func(cp geojson.Component) bool {
		vertices += len(cp.Points)
		if cp.Kind != geojson.KindPoints {
			parts++
		}
		return true
	})
	var reason string
	switch {
	case o.MaxRepairVertices >= 0 && vertices > o.MaxRepairVertices:
		reason = fmt.Sprintf("%d positions (more than %d)", vertices, o.MaxRepairVertices)
	case o.MaxRepairParts >= 0 && parts > o.MaxRepairParts:
		reason = fmt.Sprintf("%d rings and lines (more than %d)", parts, o.MaxRepairParts)
	case o.MaxRepairCrossings >= 0:
		if n, ok := geojson.Crossings(g, o.MaxRepairCrossings); !ok {
			reason = fmt.Sprintf("segments too long or too dense to count their crossings in bounded work (%d found)", n)
		} else if n > o.MaxRepairCrossings {
			reason = fmt.Sprintf("more than %d segment crossings", o.MaxRepairCrossings)
		}
	}
	if reason == "" {
		return nil
	}
	reason = "geometry too complex to repair: " + reason
	return &classify.Error{
		Class:    classify.ClassResourceExhausted,
		Stage:    classify.StageTopologyValidation,
		Geometry: &classify.GeometryDetail{Reason: reason, Kind: classify.KindVertexBudget},
		Err:      errors.New("spatial: " + reason),
	}
}

func countVertices(g orb.Geometry) int {
	n := 0
	geojson.Components(g, func(c geojson.Component) bool {
		n += len(c.Points)
		return true
	})
	return n
}

// prepare returns a copy of g that GEOS can build: unclosed rings closed,
// rings of fewer than four positions and one-position lines dropped.
func prepare(g orb.Geometry, info *MakeValidInfo) orb.Geometry {
	switch g := g.(type) {
	case orb.LineString:
		if len(g) == 1 {
			info.DroppedComponents++
			return orb.LineString{}
		}
		return g
	case orb.MultiLineString:
		out := make(orb.MultiLineString, 0, len(g))
		for _, l := range g {
			if len(l) == 1 {
				info.DroppedComponents++
				continue
			}
			out = append(out, l)
		}
		return out
	case orb.Polygon:
		return preparePolygon(g, info)
	case orb.MultiPolygon:
		out := make(orb.MultiPolygon, 0, len(g))
		for _, p := range g {
			if q := preparePolygon(p, info); len(q) > 0 || len(p) == 0 {
				out = append(out, q)
			}
		}
		return out
	case orb.Collection:
		out := make(orb.Collection, len(g))
		for i, m := range g {
			out[i] = prepare(m, info)
		}
		return out
	}
	return g
}

func preparePolygon(p orb.Polygon, info *MakeValidInfo) orb.Polygon {
	out := make(orb.Polygon, 0, len(p))
	for i, r := range p {
		if len(r) > 0 && r[0] != r[len(r)-1] {
			r = append(r[:len(r):len(r)], r[0])
			info.ClosedRings++
		}
		if len(r) < 4 {
			info.DroppedComponents++
			if i == 0 {
				// No exterior ring: the holes go with it.
				info.DroppedComponents += len(p) - 1
				return orb.Polygon{}
			}
			continue
		}
		out = append(out, r)
	}
	return out
}
