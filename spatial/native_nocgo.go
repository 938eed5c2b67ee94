//go:build !cgo

package spatial

import (
	"encoding/json"
	"fmt"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
)

// native is empty in a build without cgo: no GEOS, no PROJ. Checking
// works (EngineGo, the CRS registry); what needs GEOS or PROJ fails with
// an error wrapping ErrNeedsCGO.
type native struct{}

// cgoBuild is false: GEOS and PROJ are not linked.
const cgoBuild = false

// newNative refuses EngineGEOS, which needs GEOS.
func newNative(c *Checker) (*native, error) {
	if c.opts.Engine == EngineGEOS {
		return nil, fmt.Errorf("spatial: Options.Engine EngineGEOS: %w", ErrNeedsCGO)
	}
	return &native{}, nil
}

func (n *native) close() {}

// resolve resolves, without PROJ, WKT and PROJJSON that name their EPSG
// (or OGC) code at the top level (identifiedCRS), and refuses the rest:
// only PROJ can resolve it. The refusal is a verdict (crs_mismatch,
// crs_unparseable) wrapping ErrNeedsPROJ, cached like PROJ's, never a
// default CRS.
func (n *native) resolve(c *Checker, declared, def string) crsEntry {
	var e crsEntry
	if info, ok := identifiedCRS(def); ok {
		e.info = info
	} else {
		e.fail = &CRSError{Definition: declared, Message: ErrNeedsPROJ.Error(), Err: ErrNeedsPROJ}
	}
	c.crsCache.put(declared, e)
	return e
}

// topologyGEOS is unreachable: NewChecker refuses EngineGEOS.
func (c *Checker) topologyGEOS(g geojson.Geometry) *classify.Error {
	e := geosFailure(classify.StageTopologyValidation, ErrNeedsCGO)
	fillDetail(e, g)
	return e
}

// MakeValid needs GEOS: in a build without cgo it fails with an error
// wrapping [ErrNeedsCGO]. See the cgo build's documentation.
func (c *Checker) MakeValid(data []byte) ([]byte, MakeValidInfo, error) {
	return nil, MakeValidInfo{Method: MakeValidMethod}, needsCGO(classify.StageTopologyValidation, "MakeValid")
}

// Reproject needs PROJ: in a build without cgo it fails with an error
// wrapping [ErrNeedsCGO].
func (c *Checker) Reproject(data []byte, fromEPSG, toEPSG int) ([]byte, error) {
	return nil, needsCGO(classify.StageCRSTransform, "Reproject")
}

// PROJJSON needs PROJ: in a build without cgo it fails with an error
// wrapping [ErrNeedsCGO].
func PROJJSON(code int) (json.RawMessage, error) {
	return nil, fmt.Errorf("spatial: PROJJSON of EPSG:%d: %w", code, ErrNeedsCGO)
}

// needsCGO is the error of an operation a build without cgo cannot do:
// class unknown (it says nothing of the geometry).
func needsCGO(stage classify.Stage, op string) *classify.Error {
	return &classify.Error{
		Class:    classify.ClassUnknown,
		Stage:    stage,
		Geometry: &classify.GeometryDetail{Reason: op + ": " + ErrNeedsCGO.Error(), Kind: classify.KindOther},
		Err:      fmt.Errorf("spatial: %s: %w", op, ErrNeedsCGO),
	}
}
