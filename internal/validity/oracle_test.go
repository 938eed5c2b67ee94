//go:build cgo

package validity_test

import (
	"fmt"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/wkb"
	"github.com/twpayne/go-geos"

	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/validity"
)

// The oracle is GEOS itself, through go-geos (cgo, tests only): the
// geometry goes in as WKB, as two-dimensional coordinate sequences, the
// way geodlq's GEOS path builds it, and GEOSisValidReason_r answers.

const valid = "Valid Geometry"

var geosCtx = geos.NewContext()

// oracle returns GEOS's reason for g, "Valid Geometry", or "error: ..."
// when GEOS fails.
func oracle(g orb.Geometry) (reason string) {
	b, err := wkb.Marshal(g)
	if err != nil {
		return "error: wkb: " + err.Error()
	}
	defer func() {
		if v := recover(); v != nil {
			reason = fmt.Sprintf("error: %v", v)
		}
	}()
	geom, err := geosCtx.NewGeomFromWKB(b)
	if err != nil {
		return "error: " + err.Error()
	}
	defer geom.Destroy()
	return geom.IsValidReason()
}

// engine returns the pure-Go engine's answer in the oracle's terms.
func engine(g orb.Geometry) string {
	f, err := validity.Check(g, nil)
	switch {
	case err != nil:
		return "error: " + err.Error()
	case f == nil:
		return valid
	}
	return f.Reason()
}

// parse parses a GeoJSON geometry and reports whether it reaches the
// validity engines (it parses and passes geojson.Validate, as the check
// path requires before either engine sees it).
func parse(data []byte) (orb.Geometry, bool) {
	g, err := geojson.ParseGeometry(data, geojson.Limits{MaxVertices: -1, MaxParts: -1, MaxHoles: -1})
	if err != nil || geojson.Validate(g) != nil {
		return nil, false
	}
	return g.Geom, true
}

// agree fails t unless both engines give g the same answer, and returns it.
func agree(t testing.TB, name string, g orb.Geometry) string {
	t.Helper()
	want, got := oracle(g), engine(g)
	if want != got {
		t.Errorf("%s: GEOS says %q, the engine %q", name, want, got)
	}
	return want
}

func TestSmallShapes(t *testing.T) {
	cases := []struct{ name, geojson, want string }{
		{"square", `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}`, valid},
		{"bowtie", `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`, "Self-intersection[0.5 0.5]"},
		{"hole outside", `{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,10],[0,10],[0,0]],[[20,20],[21,20],[21,21],[20,20]]]}`, "Hole lies outside shell[20 20]"},
		{"nested holes", `{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,10],[0,10],[0,0]],[[1,1],[9,1],[9,9],[1,9],[1,1]],[[2,2],[3,2],[3,3],[2,2]]]}`, "Holes are nested[2 2]"},
		{"nested shells", `{"type":"MultiPolygon","coordinates":[[[[0,0],[10,0],[10,10],[0,10],[0,0]]],[[[2,2],[3,2],[3,3],[2,2]]]]}`, "Nested shells[2 2]"},
		{"ring self-touch", `{"type":"Polygon","coordinates":[[[0,0],[4,0],[4,4],[2,0],[0,4],[0,0]]]}`, "Ring Self-intersection[2 0]"},
		{"too few distinct", `{"type":"Polygon","coordinates":[[[0,0],[0,0],[1,1],[0,0]]]}`, "Too few points in geometry component[0 0]"},
		{"disconnected", `{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,10],[0,10],[0,0]],[[5,0],[10,5],[5,10],[0,5],[5,0]]]}`, "Interior is disconnected[0 5]"},
		{"line of one point twice", `{"type":"LineString","coordinates":[[1,1],[1,1]]}`, "Too few points in geometry component[1 1]"},
		{"collection", `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2]},{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}]}`, "Self-intersection[0.5 0.5]"},
	}
	for _, c := range cases {
		g, ok := parse([]byte(c.geojson))
		if !ok {
			t.Fatalf("%s: does not parse and validate", c.name)
		}
		if got := agree(t, c.name, g); got != c.want {
			t.Errorf("%s: GEOS says %q, the test expects %q", c.name, got, c.want)
		}
	}
}
