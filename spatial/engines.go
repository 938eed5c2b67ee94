package spatial

import (
	"github.com/paulmach/orb"
)

// GEOS is the GEOS library as a [Checker] uses it, injected through
// [Options].GEOS: the validity check of [EngineGEOS] and the repair of
// [Checker.MakeValid]. Package github.com/geodlq/geodlq/spatial/geos
// implements it through cgo; package spatial itself links no C.
//
// Implementations must be safe for concurrent use. The Checker hands them
// only geometries that passed its own checks (parsed within the budgets,
// no empty geometry, no non-finite coordinate, rings closed and of at
// least four positions), so GEOS neither rejects nor silently repairs
// them.
type GEOS interface {
	// IsValidReason checks g's validity as GEOSisValidReason_r does and
	// returns "" for a valid geometry, otherwise GEOS's reason verbatim
	// ("Self-intersection[0.5 0.5]"). pts is the flat array of positions
	// g's slices alias, in document order (what the parser produced), or
	// nil; an implementation may read it instead of walking g. A geometry
	// GEOS refuses to build is a [*GEOSRefusedError] (a verdict on the
	// geometry); any other error is GEOS failing, which is not.
	IsValidReason(g orb.Geometry, pts []orb.Point) (reason string, err error)
	// MakeValid checks g and, when it is invalid, repairs it with GEOS's
	// MakeValid ("structure" method, collapsed components discarded). It
	// returns an empty reason and a nil geometry when g is valid, otherwise
	// GEOS's validity reason and the repaired 2D geometry. An error is
	// GEOS failing (refusing the geometry, raising an exception, returning
	// nothing); the Checker reports it as class unknown.
	MakeValid(g orb.Geometry) (reason string, repaired orb.Geometry, err error)
}

// GEOSRefusedError is what a [GEOS] engine's IsValidReason returns for a
// geometry GEOS would not build. The Checker reports it as an
// invalid_geometry verdict whose reason is Message.
type GEOSRefusedError struct {
	// Message is GEOS's own message.
	Message string
}

// Error returns "GEOS refused the geometry: " and GEOS's message.
func (e *GEOSRefusedError) Error() string { return "GEOS refused the geometry: " + e.Message }

// Reprojector transforms positions between EPSG CRSs for
// [Checker.Reproject], injected through [Options].Reprojector. Package
// github.com/geodlq/geodlq/spatial/proj implements it with PROJ through
// cgo.
//
// Implementations must be safe for concurrent use.
type Reprojector interface {
	// Transform reprojects pts in place from EPSG:from to EPSG:to, in
	// GeoJSON's axis order whatever the CRSs' official one (x = easting or
	// longitude). z, when not nil, holds a third ordinate per position (NaN
	// for a position without one), transformed along in place. bad is the
	// index of the first position that could not be transformed, or -1;
	// err explains the failure (no transformation between the CRSs, or
	// the position outside its domain) and its text becomes the verdict's
	// reason when bad is -1.
	Transform(from, to int, pts []orb.Point, z []float64) (bad int, err error)
}
