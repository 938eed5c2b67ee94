//go:build cgo

package spatial

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/paulmach/orb"
	"github.com/twpayne/go-proj/v11"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
)

// Reproject transforms a GeoJSON geometry from one EPSG CRS to another with
// PROJ and returns it as GeoJSON with exact numbers. Input and output are
// in GeoJSON's axis order whatever the CRS's official one (x = easting or
// longitude, y = northing or latitude): the transformation is normalised
// for visualisation. Use 4326 for OGC:CRS84. A third ordinate is
// transformed along and kept; the structure, including any unclosed ring,
// is kept as written.
//
// Transformations are cached per (from, to) pair, bounded by
// Options.TransformCacheSize. All Reproject calls of a Checker share one
// PROJ context and run one at a time.
//
// Errors are [*classify.Error]s: schema_violation or resource_exhausted at
// parse, invalid_geometry for non-finite input coordinates, crs_mismatch at
// crs_transform for an unknown EPSG code (kind crs_unparseable) or a
// position PROJ cannot transform (kind out_of_range, located at the input
// vertex).
func (c *Checker) Reproject(data []byte, fromEPSG, toEPSG int) ([]byte, error) {
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

// transformer returns the cached PROJ transformation for the pair.
func (c *Checker) transformer(from, to int) (*proj.PJ, error) {
	key := [2]int{from, to}
	if pj, ok := c.nat.xforms.get(key); ok {
		return pj, nil
	}
	raw, err := c.nat.proj.NewCRSToCRS("EPSG:"+strconv.Itoa(from), "EPSG:"+strconv.Itoa(to), nil)
	if err != nil {
		return nil, err
	}
	pj, err := raw.NormalizeForVisualization()
	if err != nil {
		return nil, err
	}
	c.nat.xforms.put(key, pj)
	return pj, nil
}

// transform reprojects g's positions in place. When a position cannot be
// transformed it returns that position's document-order index with the
// error; otherwise the index is -1.
func (c *Checker) transform(g geojson.Geometry, from, to int) (int, *classify.Error) {
	crsErr := func(kind classify.ReasonKind, reason string, cause error) *classify.Error {
		return &classify.Error{
			Class:    classify.ClassCRSMismatch,
			Stage:    classify.StageCRSTransform,
			Geometry: &classify.GeometryDetail{Reason: reason, Kind: kind},
			Err:      fmt.Errorf("spatial: reproject EPSG:%d to EPSG:%d: %w", from, to, cause),
		}
	}
	pj, err := c.transformer(from, to)
	if err != nil {
		reason := fmt.Sprintf("no PROJ transformation from EPSG:%d to EPSG:%d: %v", from, to, err)
		return -1, crsErr(classify.KindOther, reason, err)
	}
	pts := g.Points
	n := len(pts)
	if n == 0 {
		return -1, nil
	}
	var (
		zp     *float64
		sz, nz int
		zbuf   []float64
	)
	if g.Z != nil {
		// NaN marks a position without Z; PROJ takes 0 for those.
		zbuf = make([]float64, n)
		for i, z := range g.Z {
			if !math.IsNaN(z) {
				zbuf[i] = z
			}
		}
		zp, sz, nz = &zbuf[0], 8, n
	}
	const stride = 16 // an orb.Point is two float64s
	terr := pj.TransGeneric(proj.DirectionFwd, &pts[0][0], stride, n, &pts[0][1], stride, n, zp, sz, nz, nil, 0, 0)
	for i := range pts {
		bad := !finiteXY(pts[i])
		if zbuf != nil && !math.IsNaN(g.Z[i]) {
			bad = bad || math.IsNaN(zbuf[i]) || math.IsInf(zbuf[i], 0)
		}
		if bad {
			return i, crsErr(classify.KindOutOfRange,
				fmt.Sprintf("Position cannot be transformed from EPSG:%d to EPSG:%d", from, to),
				errors.New("position outside the transformation's domain"))
		}
	}
	if terr != nil {
		return -1, crsErr(classify.KindOther, "PROJ: "+terr.Error(), terr)
	}
	for i, z := range g.Z {
		if !math.IsNaN(z) {
			g.Z[i] = zbuf[i]
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
