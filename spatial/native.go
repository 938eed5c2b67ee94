package spatial

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
)

// This file is the Go half of what needs GEOS (MakeValid) or PROJ
// (Reproject): parsing, budgets, preparation and encoding. The C half is
// injected through Options.GEOS and Options.Reprojector (packages
// spatial/geos and spatial/proj).

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
// reports). Without Options.GEOS it fails with an error wrapping
// [ErrNeedsCGO].
func (c *Checker) MakeValid(data []byte) ([]byte, MakeValidInfo, error) {
	info := MakeValidInfo{Method: MakeValidMethod}
	if c.opts.GEOS == nil {
		return nil, info, needsCGO(classify.StageTopologyValidation, "MakeValid")
	}
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
	reason, fixed, gerr := c.opts.GEOS.MakeValid(prepared)
	switch {
	case gerr != nil:
		err := &classify.Error{
			Class: classify.ClassUnknown,
			Stage: classify.StageTopologyValidation,
			Err:   fmt.Errorf("spatial: %w", gerr),
		}
		fillDetail(err, g)
		return nil, info, err
	case reason == "":
		if invalid != nil {
			// Closing rings and dropping collapsed ones sufficed.
			out = prepared
		}
	default:
		if invalid == nil {
			invalid = invalidFromReason(g, reason)
			info.Reason = reason
		}
		out = fixed
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

// Reproject transforms a GeoJSON geometry from one EPSG CRS to another with
// PROJ and returns it as GeoJSON with exact numbers. Input and output are
// in GeoJSON's axis order whatever the CRS's official one (x = easting or
// longitude, y = northing or latitude): the transformation is normalised
// for visualisation. Use 4326 for OGC:CRS84. A third ordinate is
// transformed along and kept; the structure, including any unclosed ring,
// is kept as written.
//
// The positions are transformed by Options.Reprojector (spatial/proj's
// PROJ, which caches its transformations); without one Reproject fails
// with an error wrapping [ErrNeedsCGO].
//
// Errors are [*classify.Error]s: schema_violation or resource_exhausted at
// parse, invalid_geometry for non-finite input coordinates, crs_mismatch at
// crs_transform for an unknown EPSG code (kind crs_unparseable) or a
// position PROJ cannot transform (kind out_of_range, located at the input
// vertex).
func (c *Checker) Reproject(data []byte, fromEPSG, toEPSG int) ([]byte, error) {
	if c.opts.Reprojector == nil {
		return nil, needsCGO(classify.StageCRSTransform, "Reproject")
	}
	if c.closed.Load() {
		return nil, errClosed(classify.StageCRSTransform)
	}
	g, perr := c.parseGeometry(data)
	if perr != nil {
		return nil, perr
	}
	if err := geojson.CheckFinite(g); err != nil {
		return nil, err
	}
	for _, code := range [...]int{fromEPSG, toEPSG} {
		if _, err := c.checkCRS("EPSG:"+strconv.Itoa(code), 0); err != nil {
			fillDetail(err, g)
			return nil, err
		}
	}
	if fromEPSG != toEPSG {
		if bad, err := c.transform(g, fromEPSG, toEPSG); err != nil {
			fillDetail(err, g)
			if orig, perr := c.parseGeometry(data); bad >= 0 && perr == nil {
				// The failed position was overwritten in place; report
				// where it was in the input.
				locateOriginal(err, orig, bad)
			}
			return nil, err
		}
		g.Geom = geojson.Refresh(g)
	}
	out, err := geojson.Append(make([]byte, 0, len(data)+len(data)/4), g.Geom, g.Z)
	if err != nil {
		return nil, &classify.Error{
			Class: classify.ClassUnknown,
			Stage: classify.StageCRSTransform,
			Err:   fmt.Errorf("spatial: encoding the reprojected geometry: %w", err),
		}
	}
	return out, nil
}

// transform reprojects g's positions in place with Options.Reprojector.
// When a position cannot be transformed it returns that position's
// document-order index with the error; otherwise the index is -1.
func (c *Checker) transform(g geojson.Geometry, from, to int) (int, *classify.Error) {
	if len(g.Points) == 0 {
		return -1, nil
	}
	bad, err := c.opts.Reprojector.Transform(from, to, g.Points, g.Z)
	switch {
	case bad >= 0:
		return bad, &classify.Error{
			Class: classify.ClassCRSMismatch,
			Stage: classify.StageCRSTransform,
			Geometry: &classify.GeometryDetail{
				Reason: fmt.Sprintf("Position cannot be transformed from EPSG:%d to EPSG:%d", from, to),
				Kind:   classify.KindOutOfRange,
			},
			Err: fmt.Errorf("spatial: reproject EPSG:%d to EPSG:%d: %w", from, to, errors.New("position outside the transformation's domain")),
		}
	case err != nil:
		return -1, &classify.Error{
			Class:    classify.ClassCRSMismatch,
			Stage:    classify.StageCRSTransform,
			Geometry: &classify.GeometryDetail{Reason: err.Error(), Kind: classify.KindOther},
			Err:      fmt.Errorf("spatial: reproject EPSG:%d to EPSG:%d: %w", from, to, err),
		}
	}
	return -1, nil
}

// locateOriginal records the input position with document-order index doc
// as the error's location and fault.
func locateOriginal(err *classify.Error, orig geojson.Geometry, doc int) {
	geojson.Walk(orig.Geom, func(i int, at classify.Fault, p orb.Point) bool {
		if i != doc {
			return true
		}
		loc, f := p, at
		err.Geometry.Location, err.Geometry.Fault = &loc, &f
		err.Geometry.Reason += "[" + geojson.FormatXY(p) + "]"
		return false
	})
}

func finiteXY(p orb.Point) bool {
	return !math.IsNaN(p[0]) && !math.IsNaN(p[1]) && !math.IsInf(p[0], 0) && !math.IsInf(p[1], 0)
}

// needsCGO is the error of an operation that needs GEOS or PROJ when the
// Checker has none (Options.GEOS, Options.Reprojector: what a build
// without cgo cannot give it): class unknown (it says nothing of the
// geometry).
func needsCGO(stage classify.Stage, op string) *classify.Error {
	return &classify.Error{
		Class:    classify.ClassUnknown,
		Stage:    stage,
		Geometry: &classify.GeometryDetail{Reason: op + ": " + ErrNeedsCGO.Error(), Kind: classify.KindOther},
		Err:      fmt.Errorf("spatial: %s: %w", op, ErrNeedsCGO),
	}
}
