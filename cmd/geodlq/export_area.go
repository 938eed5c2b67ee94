package main

import (
	"errors"
	"math"
	"strconv"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/spatial"
)

// crsArea tells whether coordinates lie in the valid area of the CRS they
// are written in, so that an export never puts, say, Web Mercator metres
// into a layer that says EPSG:4326. The valid area of a geographic CRS is
// longitude [-180, 180] and latitude [-90, 90] (GeoJSON's axis order); of
// a projected one, the positions its projection maps back to such a
// longitude and latitude and then forward to themselves (within a
// millionth of their magnitude): past a projection's edge PROJ either
// fails or wraps around (Web Mercator's x beyond ±20,037,508.34 m comes
// back 40,075 km away), and either way the position is outside. An area of
// use, narrower (a UTM zone's 6°), is not the test: data legitimately
// spills over it.
type crsArea struct {
	checker    *spatial.Checker
	geographic map[int]bool // by EPSG code, once resolved
	// err is spatial.ErrNeedsCGO's error once a projected CRS was met in
	// a build without cgo (no PROJ to test it with): the export stops.
	err error
}

func newCRSArea(c *spatial.Checker) *crsArea {
	return &crsArea{checker: c, geographic: map[int]bool{}}
}

// inside reports whether every position of g, in EPSG:code, lies in the
// CRS's valid area. A CRS PROJ cannot resolve has none.
func (a *crsArea) inside(g orb.Geometry, z []float64, code int) bool {
	geographic, ok := a.geographic[code]
	if !ok {
		info, err := a.checker.ResolveCRS("EPSG:" + strconv.Itoa(code))
		if err != nil {
			return false
		}
		geographic = info.Geographic
		a.geographic[code] = geographic
	}
	if geographic {
		return geojson.Walk(g, func(_ int, _ classify.Fault, p orb.Point) bool { return lonLat(p) })
	}
	data, err := geojson.Append(nil, g, z)
	if err != nil {
		return false
	}
	ll, err := a.checker.Reproject(data, code, 4326)
	if err != nil {
		if errors.Is(err, spatial.ErrNeedsCGO) {
			a.err = err
		}
		return false
	}
	back, err := a.checker.Reproject(ll, 4326, code)
	if err != nil {
		return false
	}
	llg, err := geojson.ParseGeometry(ll, geojson.Limits{MaxVertices: -1})
	if err != nil || !geojson.Walk(llg.Geom, func(_ int, _ classify.Fault, p orb.Point) bool { return lonLat(p) }) {
		return false
	}
	bg, err := geojson.ParseGeometry(back, geojson.Limits{MaxVertices: -1})
	if err != nil {
		return false
	}
	var there []orb.Point
	geojson.Walk(bg.Geom, func(_ int, _ classify.Fault, p orb.Point) bool { there = append(there, p); return true })
	i := 0
	same := geojson.Walk(g, func(_ int, _ classify.Fault, p orb.Point) bool {
		if i >= len(there) {
			return false
		}
		q := there[i]
		i++
		tol := 1e-6 * max(1, math.Abs(p[0]), math.Abs(p[1]))
		return math.Abs(p[0]-q[0]) <= tol && math.Abs(p[1]-q[1]) <= tol
	})
	return same && i == len(there)
}

// lonLat reports whether p is a longitude and latitude.
func lonLat(p orb.Point) bool {
	return p[0] >= -180 && p[0] <= 180 && p[1] >= -90 && p[1] <= 90
}
