//go:build cgo

package spatial_test

import (
	"encoding/json"
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/spatial"
)

func TestMakeValid(t *testing.T) {
	c := newChecker(t, nil)
	tests := []struct {
		name string
		in   string
		want string // exact output
		info spatial.MakeValidInfo
	}{
		{
			name: "bowtie becomes two triangles",
			in:   `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`,
			want: `{"type":"MultiPolygon","coordinates":[[[[0.5,0.5],[1,1],[1,0],[0.5,0.5]]],[[[0,0],[0,1],[0.5,0.5],[0,0]]]]}`,
			info: spatial.MakeValidInfo{
				Method: "structure", Reason: "Self-intersection[0.5 0.5]",
				TypeBefore: "Polygon", TypeAfter: "MultiPolygon", VerticesBefore: 5, VerticesAfter: 8,
			},
		},
		{
			name: "valid input comes back unchanged, Z and all",
			in:   `{"type":"Polygon","coordinates":[[[0,0,1],[1,0,2],[1,1,3],[0,0,1]]]}`,
			want: `{"type":"Polygon","coordinates":[[[0,0,1],[1,0,2],[1,1,3],[0,0,1]]]}`,
			info: spatial.MakeValidInfo{
				Method: "structure", WasValid: true,
				TypeBefore: "Polygon", TypeAfter: "Polygon", VerticesBefore: 4, VerticesAfter: 4,
			},
		},
		{
			name: "unclosed ring is closed",
			in:   `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}`,
			want: `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}`,
			info: spatial.MakeValidInfo{
				Method: "structure", Reason: "Ring is not closed[0 0]", ClosedRings: 1,
				TypeBefore: "Polygon", TypeAfter: "Polygon", VerticesBefore: 4, VerticesAfter: 5,
			},
		},
		{
			name: "closing is not enough",
			in:   `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1]]]}`,
			want: `{"type":"MultiPolygon","coordinates":[[[[0.5,0.5],[1,1],[1,0],[0.5,0.5]]],[[[0,0],[0,1],[0.5,0.5],[0,0]]]]}`,
			info: spatial.MakeValidInfo{
				Method: "structure", Reason: "Ring is not closed[0 0]", ClosedRings: 1,
				TypeBefore: "Polygon", TypeAfter: "MultiPolygon", VerticesBefore: 4, VerticesAfter: 8,
			},
		},
		{
			name: "collapsed hole is dropped",
			in:   `{"type":"Polygon","coordinates":[[[0,0],[4,0],[4,4],[0,4],[0,0]],[[1,1],[2,2],[1,1]]]}`,
			want: `{"type":"Polygon","coordinates":[[[0,0],[4,0],[4,4],[0,4],[0,0]]]}`,
			info: spatial.MakeValidInfo{
				Method: "structure", Reason: "Too few points in geometry component[1 1]", DroppedComponents: 1,
				TypeBefore: "Polygon", TypeAfter: "Polygon", VerticesBefore: 8, VerticesAfter: 5,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, info, err := c.MakeValid([]byte(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(out))
			require.Equal(t, tt.info, info)
			require.True(t, json.Valid(out))
			require.NoError(t, c.CheckGeometry(out), "MakeValid output must be valid")
		})
	}
}

func TestMakeValidFailures(t *testing.T) {
	c := newChecker(t, nil)
	tests := []struct {
		name  string
		in    string
		class classify.Class
		kind  classify.ReasonKind
	}{
		{name: "malformed", in: `{"type":"Polygon"`, class: classify.ClassSchemaViolation, kind: classify.KindMalformed},
		{name: "null", in: `null`, class: classify.ClassSchemaViolation, kind: classify.KindMissingGeometry},
		{name: "NaN", in: `{"type":"Polygon","coordinates":[[[0,0],[1,0],[NaN,1],[0,0]]]}`, class: classify.ClassInvalidGeometry, kind: classify.KindInvalidCoordinate},
		{name: "empty", in: `{"type":"Polygon","coordinates":[]}`, class: classify.ClassInvalidGeometry, kind: classify.KindEmpty},
		{name: "everything collapses", in: `{"type":"MultiPolygon","coordinates":[[[[0,0]]]]}`, class: classify.ClassInvalidGeometry, kind: classify.KindTooFewPoints},
		{name: "GEOS collapses it", in: `{"type":"Polygon","coordinates":[[[0,0],[1,1],[2,2],[0,0]]]}`, class: classify.ClassInvalidGeometry, kind: classify.KindSelfIntersection},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, info, err := c.MakeValid([]byte(tt.in))
			require.Nil(t, out)
			require.Equal(t, "structure", info.Method)
			ce := requireClassified(t, err, tt.class, classify.StageOf(err), tt.kind)
			require.Equal(t, tt.class, ce.Class)
		})
	}
}

func TestReproject(t *testing.T) {
	c := newChecker(t, nil)
	const (
		mx = 1113194.9079327357
		my = 6446275.841017158
	)
	tests := []struct {
		name     string
		in       string
		from, to int
		want     [][]float64 // positions in document order
	}{
		{name: "4326 to 3857", in: `{"type":"Point","coordinates":[10,50]}`, from: 4326, to: 3857, want: [][]float64{{mx, my}}},
		{name: "3857 to 4326", in: `{"type":"Point","coordinates":[1113194.9079327357,6446275.841017158]}`, from: 3857, to: 4326, want: [][]float64{{10, 50}}},
		{name: "Z kept", in: `{"type":"LineString","coordinates":[[10,50,120.5],[0,0]]}`, from: 4326, to: 3857, want: [][]float64{{mx, my, 120.5}, {0, 0}}},
		{name: "structure kept, unclosed ring too", in: `{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,50]]]}`, from: 4326, to: 3857, want: [][]float64{{0, 0}, {mx, 0}, {mx, my}}},
		{name: "collection with points", in: `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[10,50]},{"type":"MultiPoint","coordinates":[[10,50]]}]}`, from: 4326, to: 3857, want: [][]float64{{mx, my}, {mx, my}}},
		{name: "identity", in: `{"type":"Point","coordinates":[10,50]}`, from: 4326, to: 4326, want: [][]float64{{10, 50}}},
		{name: "UTM 32N", in: `{"type":"Point","coordinates":[9,0]}`, from: 4326, to: 32632, want: [][]float64{{500000, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := c.Reproject([]byte(tt.in), tt.from, tt.to)
			require.NoError(t, err)
			g, err := geojson.ParseGeometry(out, geojson.Limits{})
			require.NoError(t, err)
			require.Equal(t, len(tt.want), g.Vertices)
			in, err := geojson.ParseGeometry([]byte(tt.in), geojson.Limits{})
			require.NoError(t, err)
			require.Equal(t, in.Geom.GeoJSONType(), g.Geom.GeoJSONType())
			for i, w := range tt.want {
				require.InDelta(t, w[0], g.Points[i][0], 1e-6, "x of %d", i)
				require.InDelta(t, w[1], g.Points[i][1], 1e-6, "y of %d", i)
				if len(w) > 2 {
					require.InDelta(t, w[2], g.Z[i], 1e-9)
				}
			}
		})
	}
}

func TestReprojectRoundTrip(t *testing.T) {
	c := newChecker(t, nil)
	in := []byte(`{"type":"Polygon","coordinates":[[[13.37,52.51],[13.38,52.51],[13.38,52.52],[13.37,52.52],[13.37,52.51]]]}`)
	merc, err := c.Reproject(in, 4326, 3857)
	require.NoError(t, err)
	back, err := c.Reproject(merc, 3857, 4326)
	require.NoError(t, err)
	a, err := geojson.ParseGeometry(in, geojson.Limits{})
	require.NoError(t, err)
	b, err := geojson.ParseGeometry(back, geojson.Limits{})
	require.NoError(t, err)
	require.Equal(t, len(a.Points), len(b.Points))
	for i := range a.Points {
		require.InDelta(t, a.Points[i][0], b.Points[i][0], 1e-9)
		require.InDelta(t, a.Points[i][1], b.Points[i][1], 1e-9)
	}

	// CRS84 is 4326 for reprojection: resolve it, then reproject.
	epsg, err := c.ResolveEPSG("urn:ogc:def:crs:OGC:1.3:CRS84")
	require.NoError(t, err)
	merc84, err := c.Reproject(in, epsg, 3857)
	require.NoError(t, err)
	require.Equal(t, string(merc), string(merc84))
}

func TestReprojectFailures(t *testing.T) {
	c := newChecker(t, nil)
	tests := []struct {
		name     string
		in       string
		from, to int
		class    classify.Class
		stage    classify.Stage
		kind     classify.ReasonKind
		loc      *orb.Point
		fault    *classify.Fault
	}{
		{name: "unknown source code", in: `{"type":"Point","coordinates":[1,2]}`, from: 99999, to: 4326, class: classify.ClassCRSMismatch, stage: classify.StageCRSTransform, kind: classify.KindCRSUnparseable},
		{name: "unknown target code", in: `{"type":"Point","coordinates":[1,2]}`, from: 4326, to: -5, class: classify.ClassCRSMismatch, stage: classify.StageCRSTransform, kind: classify.KindCRSUnparseable},
		{name: "NaN", in: `{"type":"Point","coordinates":[NaN,2]}`, from: 4326, to: 3857, class: classify.ClassInvalidGeometry, stage: classify.StageTopologyValidation, kind: classify.KindInvalidCoordinate, fault: &classify.Fault{Part: -1, Ring: -1, Vertex: 0}},
		{name: "malformed", in: `{"type":"Point","coordinates":[1]}`, from: 4326, to: 3857, class: classify.ClassSchemaViolation, stage: classify.StageParse, kind: classify.KindMalformed},
		{
			name: "outside the projection's domain", in: `{"type":"LineString","coordinates":[[0,0],[500000,0],[1e30,1e30]]}`, from: 32632, to: 4326,
			class: classify.ClassCRSMismatch, stage: classify.StageCRSTransform, kind: classify.KindOutOfRange,
			loc: &orb.Point{1e30, 1e30}, fault: &classify.Fault{Part: -1, Ring: -1, Vertex: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := c.Reproject([]byte(tt.in), tt.from, tt.to)
			require.Nil(t, out)
			ce := requireClassified(t, err, tt.class, tt.stage, tt.kind)
			require.Equal(t, tt.loc, ce.Geometry.Location)
			require.Equal(t, tt.fault, ce.Geometry.Fault)
		})
	}
}
