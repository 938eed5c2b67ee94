package spatial

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/validity"
)

// geosFailure is the error of GEOS failing (an exception, or the pure-Go
// engine failing where GEOS would raise one). GEOS failing on a geometry it was shown is not a verdict on the
// geometry, so the class is unknown: a human should look.
func geosFailure(stage classify.Stage, v any) *classify.Error {
	return &classify.Error{
		Class: classify.ClassUnknown,
		Stage: stage,
		Err:   fmt.Errorf("spatial: GEOS failed: %v", v),
	}
}

// topology runs the validity check of Options.Engine on a geometry that
// passed geojson.Validate (so GEOS can build it without error or silent
// repair).
func (c *Checker) topology(g geojson.Geometry) *classify.Error {
	if c.opts.Engine == EngineGEOS {
		return c.topologyGEOS(g)
	}
	// A geometry of hundreds of thousands of positions is searched on
	// every CPU; the answer does not depend on how many.
	f, err := validity.Check(g.Geom, &validity.Options{Workers: runtime.GOMAXPROCS(0)})
	switch {
	case err != nil:
		// Where GEOS would raise an exception, the engine fails with
		// GEOS's message; the error is the one the GEOS engine returns.
		e := geosFailure(classify.StageTopologyValidation, err.Error())
		fillDetail(e, g)
		return e
	case f != nil:
		return invalidFromReason(g, f.Reason())
	}
	return nil
}

// topologyGEOS is topology with Options.GEOS (NewChecker refuses
// EngineGEOS without it).
func (c *Checker) topologyGEOS(g geojson.Geometry) *classify.Error {
	reason, err := c.opts.GEOS.IsValidReason(g.Geom, g.Points)
	var refused *GEOSRefusedError
	switch {
	case errors.As(err, &refused):
		e := &classify.Error{
			Class: classify.ClassInvalidGeometry,
			Stage: classify.StageTopologyValidation,
			Geometry: &classify.GeometryDetail{
				Reason: refused.Message,
				Kind:   kindOf(refused.Message),
			},
			Err: fmt.Errorf("spatial: %w", refused),
		}
		fillDetail(e, g)
		return e
	case err != nil:
		e := geosFailure(classify.StageTopologyValidation, err.Error())
		fillDetail(e, g)
		return e
	case reason != "":
		return invalidFromReason(g, reason)
	}
	return nil
}

// invalidFromReason builds the error for a GEOS validity reason, locating
// the point it names in the input.
func invalidFromReason(g geojson.Geometry, reason string) *classify.Error {
	d := &classify.GeometryDetail{
		Reason:       reason,
		Kind:         kindOf(reason),
		GeometryType: g.Geom.GeoJSONType(),
		VertexCount:  g.Vertices,
	}
	if p, ok := geojson.ParseLocation(reason); ok {
		d.Location = &p
		d.Fault = geojson.Locate(g.Geom, p)
	}
	return &classify.Error{
		Class:    classify.ClassInvalidGeometry,
		Stage:    classify.StageTopologyValidation,
		Geometry: d,
		Err:      errors.New("invalid geometry: " + reason),
	}
}

// kindOf maps a validity reason to its kind. GEOS 3.11 words the nested
// holes reason "Holes are nested", which classify.KindOfReason does not
// recognise.
func kindOf(reason string) classify.ReasonKind {
	if strings.HasPrefix(reason, "Holes are nested") {
		return classify.KindNestedHoles
	}
	return classify.KindOfReason(reason)
}

// MakeValidMethod is the GEOS MakeValid method [Checker.MakeValid] uses.
const MakeValidMethod = "structure"

// MakeValidInfo describes what [Checker.MakeValid] did.
type MakeValidInfo struct {
	// Method is the GEOS MakeValid method: "structure" (GEOS >= 3.10),
	// which rebuilds polygons from their rings' structure, discarding
	// collapsed components.
	Method string
	// WasValid is true when the input was valid; it is then returned
	// unchanged (re-encoded, Z kept) and GEOS is not asked to repair it.
	WasValid bool
	// Reason is why the input was invalid, as [Checker.CheckGeometry]
	// would report it; "" when it was valid.
	Reason string
	// TypeBefore and TypeAfter are the GeoJSON types of input and output;
	// a repaired Polygon often becomes a MultiPolygon.
	TypeBefore, TypeAfter string
	// VerticesBefore and VerticesAfter count positions in input and output.
	VerticesBefore, VerticesAfter int
	// ClosedRings counts unclosed rings closed (by repeating their first
	// position) before GEOS saw the geometry.
	ClosedRings int
	// DroppedComponents counts rings with fewer than four positions after
	// closing, and lines with one position, dropped before GEOS saw the
	// geometry (a dropped exterior ring drops its polygon).
	DroppedComponents int
}
