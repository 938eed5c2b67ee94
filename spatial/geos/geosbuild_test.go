//go:build cgo

package geos

import (
	"strings"
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"
	"github.com/twpayne/go-geos"

	"github.com/geodlq/geodlq/internal/geojson"
)

// oldReason is the validity reason of the path the shim replaced: g's
// WKB built in GEOS through go-geos, then IsValidReason.
func oldReason(t *testing.T, e *Engine, g orb.Geometry) string {
	t.Helper()
	var reason string
	err := e.withGEOS(func(ctx *geos.Context) error {
		geom, err := newGeom(ctx, g)
		require.NoError(t, err)
		defer geom.Destroy()
		reason = geom.IsValidReason()
		return nil
	})
	require.NoError(t, err)
	return reason
}

// nested returns a GeometryCollection chain n deep around a bowtie.
func nested(n int) string {
	return strings.Repeat(`{"type":"GeometryCollection","geometries":[`, n) +
		`{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}` + strings.Repeat(`]}`, n)
}

// TestGEOSProgramMatchesWKB builds every kind of geometry through the
// shim, from the parser's positions and from copies (a geometry whose
// slices are not one array), and requires GEOS's verdict and reason to be
// those of the WKB path it replaced.
func TestGEOSProgramMatchesWKB(t *testing.T) {
	e := newEngine(t)
	tests := []struct {
		name, in string
		valid    bool
	}{
		{"point", `{"type":"Point","coordinates":[1,2]}`, true},
		{"point z", `{"type":"Point","coordinates":[1,2,3]}`, true},
		{"linestring", `{"type":"LineString","coordinates":[[0,0],[1,1],[2,0]]}`, true},
		{"linestring empty", `{"type":"LineString","coordinates":[]}`, true},
		{"polygon", `{"type":"Polygon","coordinates":[[[0,0],[4,0],[4,4],[0,4],[0,0]],[[1,1],[2,1],[2,2],[1,1]]]}`, true},
		{"polygon z", `{"type":"Polygon","coordinates":[[[0,0,1],[4,0,1],[4,4,1],[0,4,1],[0,0,1]]]}`, true},
		{"polygon empty", `{"type":"Polygon","coordinates":[]}`, true},
		{"bowtie", `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`, false},
		{"bowtie z", `{"type":"Polygon","coordinates":[[[0,0,5],[1,1,5],[1,0,5],[0,1,5],[0,0,5]]]}`, false},
		{"hole outside", `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]],[[5,5],[6,5],[6,6],[5,5]]]}`, false},
		{"multipoint", `{"type":"MultiPoint","coordinates":[[0,0],[1,1]]}`, true},
		{"multipoint empty", `{"type":"MultiPoint","coordinates":[]}`, true},
		{"multilinestring", `{"type":"MultiLineString","coordinates":[[[0,0],[1,1]],[[2,2],[3,3]]]}`, true},
		{"multipolygon overlapping", `{"type":"MultiPolygon","coordinates":[[[[0,0],[2,0],[2,2],[0,2],[0,0]]],[[[1,1],[3,1],[3,3],[1,3],[1,1]]]]}`, false},
		{"multipolygon empty", `{"type":"MultiPolygon","coordinates":[]}`, true},
		{"collection", `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2]},{"type":"LineString","coordinates":[[0,0],[1,1]]},{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}]}`, false},
		{"collection empty", `{"type":"GeometryCollection","geometries":[]}`, true},
		{"collection nested", nested(3), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := geojson.ParseGeometry([]byte(tt.in), geojson.Limits{})
			require.NoError(t, err)
			want := oldReason(t, e, g.Geom)
			require.Equal(t, tt.valid, want == geosValid, want)
			h, herr := e.handles.get()
			require.NoError(t, herr)
			defer e.handles.put(h)
			for _, pts := range [][]orb.Point{g.Points, nil} {
				var p geosProgram
				p.set(g.Geom, pts)
				code, reason := geosCheck(h, &p)
				if tt.valid {
					require.Equal(t, geosIsValid, code, reason)
					continue
				}
				require.Equal(t, geosIsInvalid, code, reason)
				require.Equal(t, want, reason)
			}
		})
	}
}

// TestGEOSProgramDeepest builds the deepest collection the parser accepts.
func TestGEOSProgramDeepest(t *testing.T) {
	g, err := geojson.ParseGeometry([]byte(nested(geojson.CeilingMaxNesting)), geojson.Limits{MaxNesting: geojson.CeilingMaxNesting})
	require.NoError(t, err)
	h := newGEOSHandles(1)
	defer h.close()
	gh, herr := h.get()
	require.NoError(t, herr)
	defer h.put(gh)
	var p geosProgram
	p.set(g.Geom, g.Points)
	code, reason := geosCheck(gh, &p)
	require.Equal(t, geosIsInvalid, code, reason)
	require.True(t, strings.HasPrefix(reason, "Self-intersection"), reason)
}

// TestGEOSProgramHostile hands the shim programs that do not match their
// positions: it must refuse each, reading nothing outside them.
func TestGEOSProgramHostile(t *testing.T) {
	pts := []orb.Point{{0, 0}, {1, 0}, {1, 1}, {0, 0}}
	deep := make([]int64, 0, 200)
	for range 100 {
		deep = append(deep, opCollection, 1)
	}
	deep = append(deep, opPoint)
	tests := []struct {
		name string
		prog []int64
		pts  []orb.Point
	}{
		{"empty program", nil, pts},
		{"unknown opcode", []int64{99}, pts},
		{"opcode zero", []int64{0}, pts},
		{"negative count", []int64{opLineString, -1}, pts},
		{"count past positions", []int64{opLineString, 5}, pts},
		{"huge count", []int64{opLineString, 1 << 62}, pts},
		{"positions left over", []int64{opLineString, 3}, pts},
		{"words left over", []int64{opLineString, 4, 7}, pts},
		{"truncated polygon", []int64{opPolygon, 2, 4}, pts},
		{"ring count lies", []int64{opPolygon, 1 << 40}, pts},
		{"part count lies", []int64{opMultiPolygon, 1 << 40}, pts},
		{"points past positions", []int64{opMultiPoint, 5}, pts},
		{"point without positions", []int64{opPoint}, nil},
		{"ring not closed", []int64{opPolygon, 1, 3}, pts[:3]},
		{"ring too short", []int64{opPolygon, 1, 2}, []orb.Point{{0, 0}, {0, 0}}},
		{"nested too deeply", deep, []orb.Point{{0, 0}}},
		{"collection count lies", []int64{opCollection, 3, opPoint}, pts[:1]},
	}
	h := newGEOSHandles(1)
	defer h.close()
	g, err := h.get()
	require.NoError(t, err)
	defer h.put(g)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := geosProgram{pts: tt.pts, prog: tt.prog}
			code, msg := geosCheck(g, &p)
			require.Equal(t, geosBuildFailed, code, msg)
			require.NotEmpty(t, msg)
		})
	}
	// The handle still works after every refusal.
	p := geosProgram{pts: pts, prog: []int64{opPolygon, 1, 4}}
	code, msg := geosCheck(g, &p)
	require.Equal(t, geosIsValid, code, msg)
}
