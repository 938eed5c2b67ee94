//go:build cgo

package spatial_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
	"github.com/geodlq/geodlq/spatial/proj"
)

// newChecker returns a Checker configured by opts with GEOS
// (spatial/geos) and PROJ (spatial/proj) injected where opts leaves them
// nil, closed with the test.
func newChecker(t testing.TB, opts *spatial.Options) *spatial.Checker {
	t.Helper()
	var o spatial.Options
	if opts != nil {
		o = *opts
	}
	if o.GEOS == nil {
		g, err := geos.New()
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, g.Close()) })
		o.GEOS = g
	}
	if o.ResolveCRS == nil && o.Reprojector == nil {
		p, err := proj.New(nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, p.Close()) })
		o.ResolveCRS, o.Reprojector = p.ResolveCRS, p
	}
	c, err := spatial.NewChecker(&o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// requireClassified asserts err is a *classify.Error with the given class,
// stage and kind, reachable through errors.As and the classify helpers.
func requireClassified(t testing.TB, err error, class classify.Class, stage classify.Stage, kind classify.ReasonKind) *classify.Error {
	t.Helper()
	require.Error(t, err)
	var ce *classify.Error
	require.True(t, errors.As(err, &ce), "error %v (%T) is not a *classify.Error", err, err)
	require.Equal(t, class, ce.Class, "class of %q", err)
	require.Equal(t, stage, ce.Stage, "stage of %q", err)
	require.Equal(t, class, classify.Classify(err))
	require.Equal(t, stage, classify.StageOf(err))
	require.NotNil(t, ce.Geometry, "geometry detail of %q", err)
	require.Equal(t, kind, ce.Geometry.Kind, "kind of %q", err)
	require.NotEmpty(t, ce.Geometry.Reason)
	require.NotEmpty(t, err.Error())
	return ce
}

func TestCheckEventCorpus(t *testing.T) {
	c := newChecker(t, nil)
	for _, it := range corpus.All() {
		t.Run(it.Name, func(t *testing.T) {
			res, err := c.CheckEvent(it.Payload)
			if it.Valid() {
				require.NoError(t, err)
				require.Equal(t, it.EPSG, res.EPSG)
				require.NotEmpty(t, res.GeometryType)
				require.Positive(t, res.VertexCount)
				return
			}
			ce := requireClassified(t, err, it.Class, it.Stage, it.Kind)
			d := ce.Geometry
			if it.Reason != "" {
				require.Equal(t, it.Reason, d.Reason)
			}
			require.Equal(t, it.Location, d.Location)
			require.Equal(t, it.Fault, d.Fault)
			require.Equal(t, it.EPSG, d.EPSG)
			if it.Stage != classify.StageParse {
				require.Equal(t, res.GeometryType, d.GeometryType)
				require.Equal(t, res.VertexCount, d.VertexCount)
				require.NotEmpty(t, d.GeometryType)
			}
		})
	}
}

func TestCheckGeometry(t *testing.T) {
	c := newChecker(t, nil)
	const (
		inv    = classify.ClassInvalidGeometry
		schema = classify.ClassSchemaViolation
		topo   = classify.StageTopologyValidation
		parse  = classify.StageParse
	)
	tests := []struct {
		name   string
		in     string
		class  classify.Class // 0: valid
		stage  classify.Stage
		kind   classify.ReasonKind
		reason string
		loc    *orb.Point
		fault  *classify.Fault
	}{
		{name: "valid polygon", in: `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}`},
		{name: "valid point", in: `{"type":"Point","coordinates":[1,2]}`},
		{name: "valid 3D point", in: `{"type":"Point","coordinates":[1,2,3]}`},
		{name: "valid multipoint", in: `{"type":"MultiPoint","coordinates":[[1,2],[3,4]]}`},
		{name: "valid linestring", in: `{"type":"LineString","coordinates":[[1,2],[3,4]]}`},
		{name: "valid multilinestring", in: `{"type":"MultiLineString","coordinates":[[[1,2],[3,4]],[[5,6],[7,8]]]}`},
		{name: "valid multipolygon", in: `{"type":"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,1],[0,0]]],[[[5,5],[6,5],[6,6],[5,5]]]]}`},
		{name: "valid collection", in: `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2]},{"type":"LineString","coordinates":[[1,2],[3,4]]}]}`},
		{name: "members in any order", in: `{"coordinates":[[[0,0],[1,0],[1,1],[0,0]]],"bbox":[0,0,1,1],"type":"Polygon"}`},
		{name: "escaped member name", in: `{"\u0074ype":"Point","coordinates":[1,2]}`},
		{name: "foreign members skipped", in: `{"type":"Point","coordinates":[1,2],"extra":{"a":[1,{"b":null}],"c":"\"x\""}}`},
		{name: "positions beyond z", in: `{"type":"Point","coordinates":[1,2,3,4]}`},
		{name: "huge exponent is a number", in: `{"type":"Point","coordinates":[1e-400,2E+2]}`},

		{
			name: "bowtie", in: `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`,
			class: inv, stage: topo, kind: classify.KindSelfIntersection, reason: "Self-intersection[0.5 0.5]",
			loc: &orb.Point{0.5, 0.5}, fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0, OnSegment: true},
		},
		{
			name: "bowtie in a multipolygon", in: `{"type":"MultiPolygon","coordinates":[[[[5,5],[6,5],[6,6],[5,5]]],[[[0,0],[1,1],[1,0],[0,1],[0,0]]]]}`,
			class: inv, stage: topo, kind: classify.KindSelfIntersection, reason: "Self-intersection[0.5 0.5]",
			loc: &orb.Point{0.5, 0.5}, fault: &classify.Fault{Part: 1, Ring: 0, Vertex: 0, OnSegment: true},
		},
		{
			name: "bowtie with awkward coordinates", in: `{"type":"Polygon","coordinates":[[[0.1,0.1],[1.123456789123,1.987654321987],[1.123456789123,0.1],[0.1,1.987654321987],[0.1,0.1]]]}`,
			class: inv, stage: topo, kind: classify.KindSelfIntersection, reason: "Self-intersection[0.6117283945615 1.0438271609935]",
			loc: &orb.Point{0.6117283945615, 1.0438271609935}, fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0, OnSegment: true},
		},
		{
			name: "bowtie in web mercator metres", in: `{"type":"Polygon","coordinates":[[[1113194.9079327357,6446275.841017158],[1213194.9079327357,6546275.841017158],[1213194.9079327357,6446275.841017158],[1113194.9079327357,6546275.841017158],[1113194.9079327357,6446275.841017158]]]}`,
			class: inv, stage: topo, kind: classify.KindSelfIntersection, reason: "Self-intersection[1163194.90793274 6496275.84101716]",
			loc: &orb.Point{1163194.90793274, 6496275.84101716}, fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0, OnSegment: true},
		},
		{
			name: "unclosed ring", in: `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}`,
			class: inv, stage: topo, kind: classify.KindRingNotClosed, reason: "Ring is not closed[0 0]",
			loc: &orb.Point{0, 0}, fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0},
		},
		{
			name: "unclosed hole", in: `{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,10],[0,10],[0,0]],[[1,1],[2,1],[2,2],[1,2]]]}`,
			class: inv, stage: topo, kind: classify.KindRingNotClosed, reason: "Ring is not closed[1 1]",
			loc: &orb.Point{1, 1}, fault: &classify.Fault{Part: -1, Ring: 1, Vertex: 0},
		},
		{
			name: "too few points", in: `{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,0]]]}`,
			class: inv, stage: topo, kind: classify.KindTooFewPoints, reason: "Too few points in geometry component[0 0]",
			loc: &orb.Point{0, 0}, fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0},
		},
		{
			name: "empty hole ring", in: `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]],[]]}`,
			class: inv, stage: topo, kind: classify.KindTooFewPoints, reason: "Too few points in geometry component",
			fault: &classify.Fault{Part: -1, Ring: 1, Vertex: -1},
		},
		{
			name: "one-point linestring", in: `{"type":"MultiLineString","coordinates":[[[0,0],[1,1]],[[3,4]]]}`,
			class: inv, stage: topo, kind: classify.KindTooFewPoints, reason: "Too few points in geometry component[3 4]",
			loc: &orb.Point{3, 4}, fault: &classify.Fault{Part: 1, Ring: -1, Vertex: 0},
		},
		{
			name: "degenerate ring (GEOS)", in: `{"type":"Polygon","coordinates":[[[0,0],[0,0],[0,0],[0,0]]]}`,
			class: inv, stage: topo, kind: classify.KindTooFewPoints, reason: "Too few points in geometry component[0 0]",
			loc: &orb.Point{0, 0}, fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0},
		},
		{
			name: "hole outside shell", in: `{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,10],[0,10],[0,0]],[[20,20],[21,20],[21,21],[20,20]]]}`,
			class: inv, stage: topo, kind: classify.KindHoleOutsideShell, reason: "Hole lies outside shell[20 20]",
			loc: &orb.Point{20, 20}, fault: &classify.Fault{Part: -1, Ring: 1, Vertex: 0},
		},
		{
			name: "nested holes", in: `{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,10],[0,10],[0,0]],[[1,1],[9,1],[9,9],[1,9],[1,1]],[[2,2],[3,2],[3,3],[2,2]]]}`,
			class: inv, stage: topo, kind: classify.KindNestedHoles, reason: "Holes are nested[2 2]",
			loc: &orb.Point{2, 2}, fault: &classify.Fault{Part: -1, Ring: 2, Vertex: 0},
		},
		{
			name: "nested shells", in: `{"type":"MultiPolygon","coordinates":[[[[0,0],[10,0],[10,10],[0,10],[0,0]]],[[[2,2],[3,2],[3,3],[2,2]]]]}`,
			class: inv, stage: topo, kind: classify.KindNestedShells, reason: "Nested shells[2 2]",
			loc: &orb.Point{2, 2}, fault: &classify.Fault{Part: 1, Ring: 0, Vertex: 0},
		},
		{
			name: "ring self-intersection at a vertex", in: `{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,10],[5,0],[0,10],[0,0]]]}`,
			class: inv, stage: topo, kind: classify.KindRingSelfIntersection, reason: "Ring Self-intersection[5 0]",
			loc: &orb.Point{5, 0}, fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 3},
		},
		{
			name: "duplicate rings", in: `{"type":"Polygon","coordinates":[[[0,0],[10,0],[10,10],[0,10],[0,0]],[[0,0],[10,0],[10,10],[0,10],[0,0]]]}`,
			class: inv, stage: topo, kind: classify.KindSelfIntersection, reason: "Self-intersection[10 0]",
			loc: &orb.Point{10, 0}, fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 1},
		},
		{
			name: "collection member", in: `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[5,5]},{"type":"MultiPolygon","coordinates":[[[[5,5],[6,5],[6,6],[5,5]]],[[[0,0],[1,1],[1,0],[0,1],[0,0]]]]}]}`,
			class: inv, stage: topo, kind: classify.KindSelfIntersection, reason: "Self-intersection[0.5 0.5]",
			loc: &orb.Point{0.5, 0.5}, fault: &classify.Fault{Part: 1, Ring: 1, Vertex: 0, OnSegment: true},
		},
		{
			name: "NaN", in: `{"type":"Polygon","coordinates":[[[0,0],[1,0],[NaN,1],[0,1],[0,0]]]}`,
			class: inv, stage: topo, kind: classify.KindInvalidCoordinate, reason: "Invalid Coordinate[NaN 1]",
			fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 2},
		},
		{
			name: "-Infinity in a point", in: `{"type":"Point","coordinates":[-Infinity, 3]}`,
			class: inv, stage: topo, kind: classify.KindInvalidCoordinate, reason: "Invalid Coordinate[-Infinity 3]",
			fault: &classify.Fault{Part: -1, Ring: -1, Vertex: 0},
		},
		{
			name: "overflowing number", in: `{"type":"MultiPoint","coordinates":[[0,0],[1e999,0]]}`,
			class: inv, stage: topo, kind: classify.KindInvalidCoordinate, reason: "Invalid Coordinate[Infinity 0]",
			fault: &classify.Fault{Part: -1, Ring: -1, Vertex: 1},
		},
		{name: "empty polygon", in: `{"type":"Polygon","coordinates":[]}`, class: inv, stage: topo, kind: classify.KindEmpty},
		{name: "empty rings", in: `{"type":"Polygon","coordinates":[[]]}`, class: inv, stage: topo, kind: classify.KindEmpty},
		{name: "empty multipolygon", in: `{"type":"MultiPolygon","coordinates":[]}`, class: inv, stage: topo, kind: classify.KindEmpty},
		{name: "empty collection", in: `{"type":"GeometryCollection","geometries":[]}`, class: inv, stage: topo, kind: classify.KindEmpty},

		{name: "not JSON", in: `POLYGON((0 0,1 1,1 0,0 0))`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "empty input", in: ``, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "truncated", in: `{"type":"Polygon","coordinates":[[[0,0],[1,0]`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "trailing garbage", in: `{"type":"Point","coordinates":[1,2]} x`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "array", in: `[1,2]`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "missing type", in: `{"coordinates":[1,2]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "type not a string", in: `{"type":7,"coordinates":[1,2]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "unknown type", in: `{"type":"Circle","coordinates":[1,2]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "feature is not a geometry", in: `{"type":"Feature","geometry":null}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "missing coordinates", in: `{"type":"Polygon"}`, class: schema, stage: parse, kind: classify.KindMissingGeometry},
		{name: "null coordinates", in: `{"type":"Polygon","coordinates":null}`, class: schema, stage: parse, kind: classify.KindMissingGeometry},
		{name: "null geometry", in: `null`, class: schema, stage: parse, kind: classify.KindMissingGeometry},
		{name: "missing geometries", in: `{"type":"GeometryCollection"}`, class: schema, stage: parse, kind: classify.KindMissingGeometry},
		{name: "null member", in: `{"type":"GeometryCollection","geometries":[null]}`, class: schema, stage: parse, kind: classify.KindMissingGeometry},
		{name: "too shallow", in: `{"type":"Polygon","coordinates":[[0,0],[1,0],[1,1],[0,0]]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "too deep", in: `{"type":"LineString","coordinates":[[[0,0],[1,0]]]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "point not a position", in: `{"type":"Point","coordinates":[[1,2]]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "empty point", in: `{"type":"Point","coordinates":[]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "one-number position", in: `{"type":"LineString","coordinates":[[0,0],[1]]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "string coordinate", in: `{"type":"Point","coordinates":["1",2]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "null coordinate", in: `{"type":"Point","coordinates":[null,2]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "nan lower case", in: `{"type":"Point","coordinates":[nan,2]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "NaN outside coordinates", in: `{"type":"Point","coordinates":[1,2],"bbox":[NaN,0,1,1]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "leading plus", in: `{"type":"Point","coordinates":[+1,2]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "duplicate coordinates", in: `{"type":"Point","coordinates":[1,2],"coordinates":[3,4]}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "control character", in: "{\"type\":\"Po\x01int\",\"coordinates\":[1,2]}", class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "nesting bomb", in: `{"type":"Point","coordinates":[1,2],"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, class: schema, stage: parse, kind: classify.KindMalformed},
		{name: "collection bomb", in: strings.Repeat(`{"type":"GeometryCollection","geometries":[`, 50) + strings.Repeat(`]}`, 50), class: schema, stage: parse, kind: classify.KindMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.CheckGeometry([]byte(tt.in))
			if tt.class == "" {
				require.NoError(t, err)
				return
			}
			ce := requireClassified(t, err, tt.class, tt.stage, tt.kind)
			if tt.reason != "" {
				require.Equal(t, tt.reason, ce.Geometry.Reason)
			}
			require.Equal(t, tt.loc, ce.Geometry.Location)
			require.Equal(t, tt.fault, ce.Geometry.Fault)
		})
	}
}

func TestCheckGeometryBudgets(t *testing.T) {
	c := newChecker(t, &spatial.Options{MaxVertices: 4, MaxBytes: 200})
	square := `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]}`
	require.NoError(t, c.CheckGeometry([]byte(square)))

	err := c.CheckGeometry([]byte(`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}`))
	requireClassified(t, err, classify.ClassResourceExhausted, classify.StageParse, classify.KindVertexBudget)

	big := `{"type":"Point","coordinates":[1,2],"pad":"` + strings.Repeat("x", 300) + `"}`
	err = c.CheckGeometry([]byte(big))
	requireClassified(t, err, classify.ClassResourceExhausted, classify.StageParse, classify.KindByteBudget)
	_, err = c.CheckEvent([]byte(big))
	requireClassified(t, err, classify.ClassResourceExhausted, classify.StageParse, classify.KindByteBudget)

	unlimited := newChecker(t, &spatial.Options{MaxVertices: -1, MaxBytes: -1})
	require.NoError(t, unlimited.CheckGeometry(corpus.LargeMultiPolygon(256<<10)))
}

func TestCheckGeometryLarge(t *testing.T) {
	c := newChecker(t, nil)
	g := corpus.LargeMultiPolygon(2 << 20)
	require.NoError(t, c.CheckGeometry(g))
	_, err := c.CheckEvent(corpus.LargeEvent(1 << 20))
	require.NoError(t, err)
}

func TestCheckEvent(t *testing.T) {
	c := newChecker(t, nil)
	const point = `{"type":"Point","coordinates":[10,50]}`
	tests := []struct {
		name     string
		in       string
		class    classify.Class
		stage    classify.Stage
		kind     classify.ReasonKind
		epsg     int // in the detail, or Result.EPSG when valid
		declared string
	}{
		{name: "integer crs", in: `{"crs":4326,"geometry":` + point + `}`, epsg: 4326, declared: "EPSG:4326"},
		{name: "lower-case epsg", in: `{"crs":"epsg:4326","geometry":` + point + `}`, epsg: 4326, declared: "epsg:4326"},
		{name: "urn with version", in: `{"crs":"urn:ogc:def:crs:EPSG:6.6:4326","geometry":` + point + `}`, epsg: 4326, declared: "urn:ogc:def:crs:EPSG:6.6:4326"},
		{name: "geometry-level crs", in: `{"geometry":{"type":"Point","coordinates":[10,50],"crs":{"type":"name","properties":{"name":"EPSG:3857"}}}}`, class: classify.ClassCRSMismatch, stage: classify.StageCRSTransform, kind: classify.KindCRSDiffers, epsg: 3857, declared: "EPSG:3857"},
		{name: "event crs wins over geometry crs", in: `{"crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[10,50],"crs":"EPSG:3857"}}`, epsg: 4326, declared: "EPSG:4326"},
		{name: "empty crs string is the default", in: `{"crs":"","geometry":` + point + `}`, epsg: 4326},
		{name: "blank crs string is the default", in: `{"crs":" ","geometry":` + point + `}`, epsg: 4326, declared: " "},
		{name: "linked crs", in: `{"crs":{"type":"link","properties":{"href":"http://example.com/crs/42","type":"proj4"}},"geometry":` + point + `}`, class: classify.ClassCRSMismatch, stage: classify.StageCRSTransform, kind: classify.KindCRSUnparseable, declared: "http://example.com/crs/42"},
		{name: "bare crs name", in: `{"crs":"foo","geometry":` + point + `}`, class: classify.ClassCRSMismatch, stage: classify.StageCRSTransform, kind: classify.KindCRSUnparseable, declared: "foo"},
		{name: "boolean crs", in: `{"crs":true,"geometry":` + point + `}`, class: classify.ClassSchemaViolation, stage: classify.StageParse, kind: classify.KindMalformed},
		{name: "crs object without name", in: `{"crs":{"type":"name"},"geometry":` + point + `}`, class: classify.ClassSchemaViolation, stage: classify.StageParse, kind: classify.KindMalformed},
		{name: "NaN in properties", in: `{"geometry":` + point + `,"properties":{"speed":NaN}}`, class: classify.ClassSchemaViolation, stage: classify.StageParse, kind: classify.KindMalformed},
		{name: "payload is an array", in: `[` + point + `]`, class: classify.ClassSchemaViolation, stage: classify.StageParse, kind: classify.KindMalformed},
		{name: "duplicate geometry", in: `{"geometry":` + point + `,"geometry":` + point + `}`, class: classify.ClassSchemaViolation, stage: classify.StageParse, kind: classify.KindMalformed},
		{name: "CRS checked before topology", in: `{"crs":"EPSG:3857","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`, class: classify.ClassCRSMismatch, stage: classify.StageCRSTransform, kind: classify.KindCRSDiffers, epsg: 3857, declared: "EPSG:3857"},
		{name: "range checked before topology", in: `{"geometry":{"type":"Polygon","coordinates":[[[0,0],[200,100],[1,0],[0,1],[0,0]]]}}`, class: classify.ClassCRSMismatch, stage: classify.StageCRSTransform, kind: classify.KindOutOfRange, epsg: 4326},
		{name: "NaN is not out of range", in: `{"geometry":{"type":"Point","coordinates":[NaN,1000]}}`, class: classify.ClassInvalidGeometry, stage: classify.StageTopologyValidation, kind: classify.KindInvalidCoordinate, epsg: 4326},
		{name: "edges of the range are in range", in: `{"geometry":{"type":"MultiPoint","coordinates":[[-180,-90],[180,90]]}}`, epsg: 4326},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := c.CheckEvent([]byte(tt.in))
			if tt.class == "" {
				require.NoError(t, err)
				require.Equal(t, tt.epsg, res.EPSG)
				require.Equal(t, tt.declared, res.DeclaredCRS)
				return
			}
			ce := requireClassified(t, err, tt.class, tt.stage, tt.kind)
			require.Equal(t, tt.epsg, ce.Geometry.EPSG)
			require.Equal(t, tt.declared, res.DeclaredCRS)
		})
	}
}

func TestCheckEventResult(t *testing.T) {
	c := newChecker(t, nil)
	it, ok := corpus.Lookup("bowtie")
	require.True(t, ok)
	res, err := c.CheckEvent(it.Payload)
	require.Error(t, err)
	require.Equal(t, spatial.Result{
		GeometryType: "Polygon", VertexCount: 5,
		DeclaredCRS: "EPSG:4326", CRS: "EPSG:4326", EPSG: 4326, CRSName: "WGS 84", Geographic: true,
	}, res)

	it, ok = corpus.Lookup("crs_missing")
	require.True(t, ok)
	res, err = c.CheckEvent(it.Payload)
	require.NoError(t, err)
	require.Equal(t, spatial.Result{
		GeometryType: "Point", VertexCount: 1,
		CRS: "OGC:CRS84", EPSG: 4326, CRSName: "WGS 84 (CRS84)", Geographic: true,
	}, res)
}

func TestCheckEventProjectedPipeline(t *testing.T) {
	c := newChecker(t, &spatial.Options{ExpectedEPSG: 3857})
	for name, want := range map[string]classify.ReasonKind{
		"epsg_3857_declared":        "",
		"named_crs_3857":            "",
		"crs_missing":               classify.KindCRSDiffers,
		"webmercator_labelled_4326": classify.KindCRSDiffers,
	} {
		t.Run(name, func(t *testing.T) {
			it, ok := corpus.Lookup(name)
			require.True(t, ok)
			_, err := c.CheckEvent(it.Payload)
			if want == "" {
				require.NoError(t, err)
				return
			}
			ce := requireClassified(t, err, classify.ClassCRSMismatch, classify.StageCRSTransform, want)
			require.Equal(t, 4326, ce.Geometry.EPSG)
		})
	}
}

func TestErrorChains(t *testing.T) {
	c := newChecker(t, nil)

	err := c.CheckCRS("EPSG:43x6", 4326)
	var crsErr *spatial.CRSError
	require.ErrorAs(t, err, &crsErr)
	require.Equal(t, "EPSG:43x6", crsErr.Definition)
	require.Equal(t, "proj_create: crs not found", crsErr.Message)
	require.NotZero(t, crsErr.Errno)

	err = c.CheckCRS("EPSG:3857", 4326)
	var mm *spatial.CRSMismatchError
	require.ErrorAs(t, err, &mm)
	require.Equal(t, 3857, mm.Info.EPSG)
	require.Equal(t, 4326, mm.Expected)
	require.Equal(t, 3857, classify.DetailOf(err).EPSG)

	err = c.CheckGeometry([]byte(`{"type":"Point"`))
	var ge *geojson.Error
	require.ErrorAs(t, err, &ge)
	require.Equal(t, classify.KindMalformed, ge.Kind)

	// A classified error keeps its class through the caller's wrapping.
	wrapped := classify.WithStage(errors.Join(errors.New("context"), err), classify.StageSpatialJoin)
	require.Equal(t, classify.ClassSchemaViolation, classify.Classify(wrapped))
	require.Equal(t, classify.StageParse, classify.StageOf(wrapped))
	require.Equal(t, classify.RoutePoison, classify.Policy{}.Decide(wrapped, 1).Route)
}

func TestClose(t *testing.T) {
	c := newChecker(t, nil)
	require.NoError(t, c.CheckCRS("EPSG:4326", 4326))
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())

	err := c.CheckGeometry([]byte(`{"type":"Point","coordinates":[1,2]}`))
	require.ErrorIs(t, err, spatial.ErrClosed)
	require.Equal(t, classify.ClassUnknown, classify.Classify(err))
	_, err = c.CheckEvent([]byte(`{}`))
	require.ErrorIs(t, err, spatial.ErrClosed)
	require.ErrorIs(t, c.CheckCRS("EPSG:4326", 4326), spatial.ErrClosed)
	_, err = c.ResolveEPSG("EPSG:4326")
	require.ErrorIs(t, err, spatial.ErrClosed)
	_, _, err = c.MakeValid([]byte(`{"type":"Point","coordinates":[1,2]}`))
	require.ErrorIs(t, err, spatial.ErrClosed)
	_, err = c.Reproject([]byte(`{"type":"Point","coordinates":[1,2]}`), 4326, 3857)
	require.ErrorIs(t, err, spatial.ErrClosed)
}

func TestNewCheckerOptions(t *testing.T) {
	c, err := spatial.NewChecker(nil)
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, spatial.Options{
		ExpectedEPSG: 4326, MaxVertices: 5_000_000, MaxParts: 200_000, MaxHoles: 10_000, MaxBytes: 64 << 20,
		CRSCacheSize:      1024,
		MaxRepairVertices: 100_000, MaxRepairParts: 10_000, MaxRepairCrossings: 10_000,
	}, c.Options())
	_, err = spatial.NewChecker(&spatial.Options{ExpectedEPSG: -1})
	require.Error(t, err)
	_, err = spatial.NewChecker(&spatial.Options{CRSCacheSize: -1})
	require.Error(t, err)
}

// TestConcurrent runs every operation from many goroutines at once; run it
// with -race.
func TestConcurrent(t *testing.T) {
	c := newChecker(t, &spatial.Options{CRSCacheSize: 8})
	items := corpus.All()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				it := items[(g*7+i)%len(items)]
				_, err := c.CheckEvent(it.Payload)
				if it.Valid() {
					require.NoError(t, err, it.Name)
				} else {
					require.Equal(t, it.Class, classify.Classify(err), it.Name)
				}
				_, err = c.ResolveEPSG("EPSG:" + []string{"4326", "3857", "32633", "4269", "2154", "27700", "3035", "4258", "25832", "5070"}[i%10])
				require.NoError(t, err)
				_, _, err = c.MakeValid([]byte(`{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`))
				require.NoError(t, err)
				_, err = c.Reproject([]byte(`{"type":"Point","coordinates":[10,50]}`), 4326, []int{3857, 32632, 4326}[i%3])
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, c.CRSCacheLen(), 8)
}
