package geojson

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
)

func TestParseGeometry(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want orb.Geometry
		z    []float64
	}{
		{name: "point", in: `{"type":"Point","coordinates":[1.5,-2]}`, want: orb.Point{1.5, -2}},
		{name: "point with z", in: `{"type":"Point","coordinates":[1,2,3]}`, want: orb.Point{1, 2}, z: []float64{3}},
		{name: "multipoint", in: `{"type":"MultiPoint","coordinates":[[1,2],[3,4]]}`, want: orb.MultiPoint{{1, 2}, {3, 4}}},
		{name: "linestring", in: `{"type":"LineString","coordinates":[[1,2],[3,4]]}`, want: orb.LineString{{1, 2}, {3, 4}}},
		{name: "empty linestring", in: `{"type":"LineString","coordinates":[]}`, want: orb.LineString{}},
		{name: "multilinestring", in: `{"type":"MultiLineString","coordinates":[[[1,2],[3,4]],[]]}`, want: orb.MultiLineString{{{1, 2}, {3, 4}}, {}}},
		{name: "unclosed polygon kept as written", in: `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1]]]}`, want: orb.Polygon{{{0, 0}, {1, 0}, {1, 1}}}},
		{name: "multipolygon", in: `{"type":"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,1],[0,0]]],[]]}`, want: orb.MultiPolygon{{{{0, 0}, {1, 0}, {1, 1}, {0, 0}}}, {}}},
		{
			name: "collection, members in any order",
			in:   `{"geometries":[{"coordinates":[[0,0],[1,1,7]],"type":"LineString"},{"type":"Point","coordinates":[5,6]}],"type":"GeometryCollection"}`,
			want: orb.Collection{orb.LineString{{0, 0}, {1, 1}}, orb.Point{5, 6}},
			z:    []float64{math.NaN(), 7, math.NaN()},
		},
		{name: "white space everywhere", in: " \n{ \"type\" : \"Point\" ,\t\"coordinates\" : [ 1 , 2 ] }\r\n", want: orb.Point{1, 2}},
		{name: "python tokens", in: `{"type":"MultiPoint","coordinates":[[NaN,Infinity],[-Infinity,0]]}`, want: orb.MultiPoint{{math.NaN(), math.Inf(1)}, {math.Inf(-1), 0}}},
		{name: "number forms", in: `{"type":"Point","coordinates":[-0.0,1.25e+2]}`, want: orb.Point{0, 125}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := ParseGeometry([]byte(tt.in), Limits{})
			require.NoError(t, err)
			requireSameGeometry(t, tt.want, g.Geom)
			require.Equal(t, len(g.Points), g.Vertices)
			if tt.z == nil {
				require.Nil(t, g.Z)
			} else {
				require.Len(t, g.Z, len(tt.z))
				for i := range tt.z {
					if math.IsNaN(tt.z[i]) {
						require.True(t, math.IsNaN(g.Z[i]))
					} else {
						require.Equal(t, tt.z[i], g.Z[i])
					}
				}
			}
		})
	}
}

// requireSameGeometry compares geometries, treating NaN as equal to NaN.
func requireSameGeometry(t *testing.T, want, got orb.Geometry) {
	t.Helper()
	require.Equal(t, want.GeoJSONType(), got.GeoJSONType())
	var wp, gp []orb.Point
	Walk(want, func(_ int, _ classify.Fault, p orb.Point) bool { wp = append(wp, p); return true })
	Walk(got, func(_ int, _ classify.Fault, p orb.Point) bool { gp = append(gp, p); return true })
	require.Len(t, gp, len(wp))
	for i := range wp {
		for k := range 2 {
			if math.IsNaN(wp[i][k]) {
				require.True(t, math.IsNaN(gp[i][k]))
			} else {
				require.Equal(t, wp[i][k], gp[i][k])
			}
		}
	}
	require.Equal(t, shape(want), shape(got), "structure")
}

// shape describes g's structure: its type and each component's kind, path
// and length.
func shape(g orb.Geometry) []string {
	out := []string{g.GeoJSONType()}
	Components(g, func(c Component) bool {
		out = append(out, fmt.Sprintf("%d/%d/%d:%d", c.Kind, c.Part, c.Ring, len(c.Points)))
		return true
	})
	return out
}

func TestParseGeometryErrors(t *testing.T) {
	tests := []struct {
		in     string
		kind   classify.ReasonKind
		offset int
		msg    string
	}{
		{in: ``, kind: classify.KindMalformed, offset: 0, msg: "expected a geometry object, found end of input"},
		{in: `null`, kind: classify.KindMissingGeometry, offset: 4, msg: "geometry is null"},
		{in: `{"type":"Polygon","coordinates":null}`, kind: classify.KindMissingGeometry, offset: 32, msg: `Polygon "coordinates" is null`},
		{in: `{"type":"Polygon"}`, kind: classify.KindMissingGeometry, offset: 0, msg: `Polygon has no "coordinates" member`},
		{in: `{"coordinates":[1,2]}`, kind: classify.KindMalformed, offset: 0, msg: `geometry has no "type" member`},
		{in: `{"type":"Circle","coordinates":[1,2]}`, kind: classify.KindMalformed, offset: 8, msg: `unknown geometry type "Circle"`},
		{in: `{"type":"Polygon","coordinates":[[1,2]]}`, kind: classify.KindMalformed, offset: 34, msg: "Polygon coordinates are nested too shallowly: found a number where Polygon expects an array"},
		{in: `{"type":"Point","coordinates":[[1,2]]}`, kind: classify.KindMalformed, offset: 31, msg: "Point coordinates are nested too deeply: found an array where a coordinate was expected"},
		{in: `{"type":"Point","coordinates":[1]}`, kind: classify.KindMalformed, offset: 30, msg: "position has 1 coordinate(s), needs at least 2"},
		{in: `{"type":"Point","coordinates":[1,true]}`, kind: classify.KindMalformed, offset: 33, msg: "non-numeric coordinate in Point: found a boolean"},
		{in: `{"type":"Point","coordinates":[1,2],"bbox":[NaN]}`, kind: classify.KindMalformed, offset: 44, msg: "non-finite number token outside coordinates"},
		{in: `{"type":"Point","coordinates":[1,2]}}`, kind: classify.KindMalformed, offset: 36, msg: "unexpected '}' after the JSON document"},
		{in: `{"type":"Point","type":"Point","coordinates":[1,2]}`, kind: classify.KindMalformed, offset: 16, msg: `duplicate "type" member`},
		{in: `{"type":"Point","coordinates":[1,2],"x":"\q"}`, kind: classify.KindMalformed, offset: 41, msg: `invalid escape \q in string`},
		{in: `{"type":"Point","coordinates":[01,2]}`, kind: classify.KindMalformed, offset: 32, msg: "expected ',' or ']' in position, found a number"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseGeometry([]byte(tt.in), Limits{})
			var ge *Error
			require.ErrorAs(t, err, &ge)
			require.Equal(t, tt.kind, ge.Kind)
			require.Equal(t, tt.msg, ge.Msg)
			require.Equal(t, tt.offset, ge.Offset)
		})
	}
}

func TestParseLimits(t *testing.T) {
	in := []byte(`{"type":"MultiPoint","coordinates":[[1,2],[3,4],[5,6]]}`)
	_, err := ParseGeometry(in, Limits{MaxVertices: 2})
	var ge *Error
	require.ErrorAs(t, err, &ge)
	require.Equal(t, classify.KindVertexBudget, ge.Kind)
	_, err = ParseGeometry(in, Limits{MaxVertices: 3})
	require.NoError(t, err)
	_, err = ParseGeometry(in, Limits{MaxVertices: -1})
	require.NoError(t, err)

	nested := strings.Repeat(`{"type":"GeometryCollection","geometries":[`, 3) + strings.Repeat(`]}`, 3)
	_, err = ParseGeometry([]byte(nested), Limits{MaxNesting: 2})
	require.ErrorAs(t, err, &ge)
	require.Contains(t, ge.Msg, "nested deeper than 2")
	_, err = ParseGeometry([]byte(nested), Limits{MaxNesting: 3})
	require.NoError(t, err)

	deep := `{"type":"Point","coordinates":[1,2],"p":` + strings.Repeat("[", 20) + strings.Repeat("]", 20) + `}`
	_, err = ParseGeometry([]byte(deep), Limits{MaxDepth: 10})
	require.ErrorAs(t, err, &ge)
	_, err = ParseGeometry([]byte(deep), Limits{MaxDepth: 30})
	require.NoError(t, err)
}

func TestParseEvent(t *testing.T) {
	tests := []struct {
		name string
		in   string
		crs  CRS
		typ  Type
	}{
		{name: "string crs", in: `{"crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[1,2]}}`, crs: CRS{Form: CRSString, Name: "EPSG:3857"}, typ: Point},
		{name: "named crs", in: `{"geometry":{"type":"Point","coordinates":[1,2]},"crs":{"properties":{"name":"urn:ogc:def:crs:EPSG::3857"},"type":"name"}}`, crs: CRS{Form: CRSNamed, Name: "urn:ogc:def:crs:EPSG::3857"}, typ: Point},
		{name: "linked crs", in: `{"crs":{"type":"link","properties":{"href":"http://x/crs","type":"proj4"}},"geometry":{"type":"Point","coordinates":[1,2]}}`, crs: CRS{Form: CRSLinked, Name: "http://x/crs"}, typ: Point},
		{name: "integer crs", in: `{"crs":3857,"geometry":{"type":"Point","coordinates":[1,2]}}`, crs: CRS{Form: CRSCode, Name: "EPSG:3857"}, typ: Point},
		{name: "null crs", in: `{"crs":null,"geometry":{"type":"Point","coordinates":[1,2]}}`, crs: CRS{Form: CRSNull}, typ: Point},
		{name: "absent crs", in: `{"geometry":{"type":"Point","coordinates":[1,2]}}`, crs: CRS{}, typ: Point},
		{name: "geometry crs fallback", in: `{"geometry":{"crs":"EPSG:2154","type":"Point","coordinates":[1,2]}}`, crs: CRS{Form: CRSString, Name: "EPSG:2154"}, typ: Point},
		{name: "feature", in: `{"type":"Feature","id":1,"properties":{"a":[1,{"b":null}],"s":"\u00e9\ud83d\ude00"},"geometry":{"type":"MultiPolygon","coordinates":[]}}`, typ: MultiPolygon},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := ParseEvent([]byte(tt.in), Limits{})
			require.NoError(t, err)
			require.Equal(t, tt.crs, ev.CRS)
			require.Equal(t, tt.typ, ev.Geometry.Type())
		})
	}
	for in, kind := range map[string]classify.ReasonKind{
		`{}`:                          classify.KindMissingGeometry,
		`{"geometry":null}`:           classify.KindMissingGeometry,
		`{"geometry":[]}`:             classify.KindMalformed,
		`[]`:                          classify.KindMalformed,
		`"x"`:                         classify.KindMalformed,
		`{"crs":[],"geometry":null}`:  classify.KindMalformed,
		`{"crs":0,"geometry":null}`:   classify.KindMalformed,
		`{"crs":1.5,"geometry":null}`: classify.KindMalformed,
		`{"a":NaN,"geometry":{"type":"Point","coordinates":[1,2]}}`: classify.KindMalformed,
	} {
		t.Run(in, func(t *testing.T) {
			_, err := ParseEvent([]byte(in), Limits{})
			var ge *Error
			require.ErrorAs(t, err, &ge)
			require.Equal(t, kind, ge.Kind)
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		in     string
		kind   classify.ReasonKind // "" = passes
		reason string
		fault  *classify.Fault
		loc    *orb.Point
	}{
		{in: `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]}`},
		{in: `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`}, // GEOS's job
		{in: `{"type":"MultiLineString","coordinates":[[],[[0,0],[1,1]]]}`},
		{in: `{"type":"Polygon","coordinates":[]}`, kind: classify.KindEmpty, reason: ReasonEmpty},
		{in: `{"type":"GeometryCollection","geometries":[{"type":"LineString","coordinates":[]}]}`, kind: classify.KindEmpty, reason: ReasonEmpty},
		{
			in: `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1]]]}`, kind: classify.KindRingNotClosed,
			reason: "Ring is not closed[0 0]", fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0}, loc: &orb.Point{0, 0},
		},
		{
			in: `{"type":"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,1],[0,0]]],[[[5,5],[6,6],[5,5]]]]}`, kind: classify.KindTooFewPoints,
			reason: "Too few points in geometry component[5 5]", fault: &classify.Fault{Part: 1, Ring: 0, Vertex: 0}, loc: &orb.Point{5, 5},
		},
		{
			in: `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1]],[[0,0],[NaN,0]]]}`, kind: classify.KindInvalidCoordinate,
			reason: "Invalid Coordinate[NaN 0]", fault: &classify.Fault{Part: -1, Ring: 1, Vertex: 1},
		},
		{
			in: `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[0,0]},{"type":"MultiLineString","coordinates":[[[0,0],[1,1]],[[2,2]]]}]}`, kind: classify.KindTooFewPoints,
			reason: "Too few points in geometry component[2 2]", fault: &classify.Fault{Part: 1, Ring: 1, Vertex: 0}, loc: &orb.Point{2, 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			g, err := ParseGeometry([]byte(tt.in), Limits{})
			require.NoError(t, err)
			verr := Validate(g)
			if tt.kind == "" {
				require.Nil(t, verr)
				return
			}
			require.NotNil(t, verr)
			require.Equal(t, classify.ClassInvalidGeometry, verr.Class)
			require.Equal(t, classify.StageTopologyValidation, verr.Stage)
			require.Equal(t, tt.kind, verr.Geometry.Kind)
			if tt.kind != classify.KindEmpty { // classify has no reason text for "empty"
				require.Equal(t, tt.kind, classify.KindOfReason(verr.Geometry.Reason), "reason must map to its own kind")
			}
			require.Equal(t, tt.reason, verr.Geometry.Reason)
			require.Equal(t, tt.fault, verr.Geometry.Fault)
			require.Equal(t, tt.loc, verr.Geometry.Location)
			require.Equal(t, g.Vertices, verr.Geometry.VertexCount)
		})
	}
}

func TestCheckRange(t *testing.T) {
	for in, want := range map[string]*classify.Fault{
		`{"type":"Point","coordinates":[180,-90]}`:                            nil,
		`{"type":"Point","coordinates":[180.0000001,0]}`:                      {Part: -1, Ring: -1, Vertex: 0},
		`{"type":"LineString","coordinates":[[0,0],[0,90.5],[500,0]]}`:        {Part: -1, Ring: -1, Vertex: 1},
		`{"type":"MultiPoint","coordinates":[[NaN,1000],[Infinity,0]]}`:       nil,
		`{"type":"MultiPolygon","coordinates":[[],[[[0,0],[1,0],[-181,1]]]]}`: {Part: 1, Ring: 0, Vertex: 2},
	} {
		t.Run(in, func(t *testing.T) {
			g, err := ParseGeometry([]byte(in), Limits{})
			require.NoError(t, err)
			rerr := CheckRange(g)
			if want == nil {
				require.Nil(t, rerr)
				return
			}
			require.NotNil(t, rerr)
			require.Equal(t, classify.ClassCRSMismatch, rerr.Class)
			require.Equal(t, classify.StageCRSTransform, rerr.Stage)
			require.Equal(t, classify.KindOutOfRange, rerr.Geometry.Kind)
			require.Equal(t, want, rerr.Geometry.Fault)
			require.NotNil(t, rerr.Geometry.Location)
			p, ok := ParseLocation(rerr.Geometry.Reason)
			require.True(t, ok)
			require.Equal(t, *rerr.Geometry.Location, p)
		})
	}
}

func TestLocate(t *testing.T) {
	bowtie := orb.Polygon{{{0, 0}, {1, 1}, {1, 0}, {0, 1}, {0, 0}}}
	tests := []struct {
		name string
		g    orb.Geometry
		p    orb.Point
		want *classify.Fault
	}{
		{name: "bowtie crossing: first segment", g: bowtie, p: orb.Point{0.5, 0.5}, want: &classify.Fault{Part: -1, Ring: 0, Vertex: 0, OnSegment: true}},
		{name: "vertex wins over segment", g: bowtie, p: orb.Point{1, 0}, want: &classify.Fault{Part: -1, Ring: 0, Vertex: 2}},
		{name: "closing vertex is vertex 0", g: bowtie, p: orb.Point{0, 0}, want: &classify.Fault{Part: -1, Ring: 0, Vertex: 0}},
		{name: "printed to 15 digits", g: orb.LineString{{0, 0}, {1.0000000000000002, 3.141592653589793}}, p: orb.Point{1, 3.14159265358979}, want: &classify.Fault{Part: -1, Ring: -1, Vertex: 1}},
		{name: "nowhere", g: bowtie, p: orb.Point{5, 5}},
		{name: "NaN", g: bowtie, p: orb.Point{math.NaN(), 0}},
		{name: "multipoint has no segments", g: orb.MultiPoint{{0, 0}, {2, 2}}, p: orb.Point{1, 1}},
		{name: "multipoint vertex", g: orb.MultiPoint{{0, 0}, {2, 2}}, p: orb.Point{2, 2}, want: &classify.Fault{Part: -1, Ring: -1, Vertex: 1}},
		{
			name: "collection member ring numbering",
			g:    orb.Collection{orb.Point{9, 9}, orb.MultiPolygon{{{{0, 0}, {1, 0}, {1, 1}, {0, 0}}}, {{{5, 5}, {6, 5}, {6, 6}, {5, 5}}}}},
			p:    orb.Point{5.5, 5}, want: &classify.Fault{Part: 1, Ring: 1, Vertex: 0, OnSegment: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Locate(tt.g, tt.p))
		})
	}
}

func TestParseLocation(t *testing.T) {
	for in, want := range map[string]*orb.Point{
		"Self-intersection[0.5 0.5]":                           {0.5, 0.5},
		"Self-intersection[1163194.90793274 6496275.84101716]": {1163194.90793274, 6496275.84101716},
		"Ring is not closed[-1e-07 3]":                         {-1e-7, 3},
		"Invalid Coordinate[NaN 1]":                            nil,
		"Invalid Coordinate[nan inf]":                          nil,
		"Valid Geometry":                                       nil,
		"Too few points in geometry component":                 nil,
		"x[1]":                                                 nil,
		"x[a b]":                                               nil,
	} {
		p, ok := ParseLocation(in)
		if want == nil {
			require.False(t, ok, in)
			continue
		}
		require.True(t, ok, in)
		require.Equal(t, *want, p, in)
	}
}

func TestAppend(t *testing.T) {
	for _, in := range []string{
		`{"type":"Point","coordinates":[1,2]}`,
		`{"type":"Point","coordinates":[1113194.9079327357,6446275.841017158,0.1]}`,
		`{"type":"MultiPoint","coordinates":[[1e-7,2e+21],[-0,123456789012345680000]]}`,
		`{"type":"LineString","coordinates":[[0.1,0.2],[0.30000000000000004,1]]}`,
		`{"type":"MultiLineString","coordinates":[[[0,0],[1,1]],[]]}`,
		`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1]]]}`,
		`{"type":"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,1],[0,0]]],[]]}`,
		`{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2,3]},{"type":"GeometryCollection","geometries":[]}]}`,
	} {
		t.Run(in, func(t *testing.T) {
			g, err := ParseGeometry([]byte(in), Limits{})
			require.NoError(t, err)
			out, err := Append(nil, g.Geom, g.Z)
			require.NoError(t, err)
			require.True(t, json.Valid(out), string(out))
			g2, err := ParseGeometry(out, Limits{})
			require.NoError(t, err)
			require.Equal(t, g.Points, g2.Points, "numbers must round-trip exactly")
			out2, err := Append(nil, g2.Geom, g2.Z)
			require.NoError(t, err)
			require.Equal(t, string(out), string(out2))
		})
	}
	_, err := Append(nil, orb.Point{math.NaN(), 0}, nil)
	require.ErrorIs(t, err, ErrNonFinite)
	_, err = Append(nil, orb.Bound{}, nil)
	require.Error(t, err)
	b, err := Append([]byte("x="), nil, nil)
	require.NoError(t, err)
	require.Equal(t, "x=null", string(b))
	b, err = Append(nil, orb.Ring{{0, 0}, {1, 1}}, nil)
	require.NoError(t, err)
	require.Equal(t, `{"type":"LineString","coordinates":[[0,0],[1,1]]}`, string(b))
}

func TestAppendFloat(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 1: "1", -2.5: "-2.5", 1e6: "1000000", 1113194.9079327357: "1113194.9079327357",
		1e-7: "1e-7", 1e21: "1e+21", 123456789e-15: "1.23456789e-7", 0.000001: "0.000001",
	} {
		require.Equal(t, want, string(AppendFloat(nil, v)))
	}
}

func TestRefresh(t *testing.T) {
	g, err := ParseGeometry([]byte(`{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2]},{"type":"LineString","coordinates":[[3,4],[5,6]]},{"type":"Point","coordinates":[7,8]}]}`), Limits{})
	require.NoError(t, err)
	for i := range g.Points {
		g.Points[i][0] *= 10
	}
	out, err := Append(nil, Refresh(g), nil)
	require.NoError(t, err)
	require.Equal(t, `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[10,2]},{"type":"LineString","coordinates":[[30,4],[50,6]]},{"type":"Point","coordinates":[70,8]}]}`, string(out))
}

func TestSlicesAreCapped(t *testing.T) {
	g, err := ParseGeometry([]byte(`{"type":"MultiLineString","coordinates":[[[0,0],[1,1]],[[2,2],[3,3]]]}`), Limits{})
	require.NoError(t, err)
	mls := g.Geom.(orb.MultiLineString)
	_ = append(mls[0], orb.Point{9, 9})
	require.Equal(t, orb.Point{2, 2}, mls[1][0])
}

func FuzzParseGeometry(f *testing.F) {
	for _, s := range []string{
		`{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`,
		`{"coordinates":[[[0,0],[1,0],[NaN,1]]],"type":"Polygon"}`,
		`{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2,3]}]}`,
		`{"type":"MultiPoint","coordinates":[[1e999,-Infinity],[-0.0,1E-7]],"x":"\ud83d"}`,
		`null`,
		// Bytes after the document, NUL first.
		`{"type":"Point","coordinates":[1,2]}` + "\x00garbage",
		`{"type":"Point","coordinates":[1,2]} ` + "\v",
		`{"type":"Point","coordinates":[1,2]}{}`,
		// Depth a mutator can extend: the stack is capped at 1 MiB below.
		`{"type":"GeometryCollection","geometries":[` + strings.Repeat(`{"type":"GeometryCollection","geometries":[`, 2000) + strings.Repeat(`]}`, 2001),
		`{"coordinates":` + strings.Repeat("[", 3000) + strings.Repeat("]", 3000) + `,"type":"Polygon"}`,
		`{"type":"Point","coordinates":[1,2],"p":` + strings.Repeat(`{"a":[`, 2000) + strings.Repeat(`]}`, 2000) + `}`,
		`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]` + strings.Repeat(`,[]`, 200) + `]}`,
		`{"type":"Point","coordinates":[1.` + strings.Repeat("5", 600) + `,2]}`,
	} {
		f.Add([]byte(s))
	}
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGeometry(data, Limits{MaxVertices: 10_000})
		if err != nil {
			var ge *Error
			if !strings.HasPrefix(err.Error(), "geojson: ") || !errorsAs(err, &ge) || ge.Kind == "" {
				t.Fatalf("bad error %v", err)
			}
			return
		}
		if g.Vertices != len(g.Points) {
			t.Fatalf("vertices %d, points %d", g.Vertices, len(g.Points))
		}
		_ = Validate(g)
		_ = CheckRange(g)
		out, err := Append(nil, g.Geom, g.Z)
		if err != nil {
			if CheckFinite(g) == nil {
				t.Fatalf("append failed on finite geometry: %v", err)
			}
			return
		}
		g2, err := ParseGeometry(out, Limits{MaxVertices: 10_000})
		if err != nil {
			t.Fatalf("reparse of %s: %v", out, err)
		}
		out2, _ := Append(nil, g2.Geom, g2.Z)
		if string(out) != string(out2) {
			t.Fatalf("not stable:\n%s\n%s", out, out2)
		}
	})
}

func errorsAs(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}
