package ingress_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/ingress"
)

// event builds an event from its members' JSON texts; an empty text leaves
// the member out.
func event(sourceURI, mode, crs, geometry string) string {
	var parts []string
	for _, m := range [][2]string{{"source_uri", sourceURI}, {"processing_mode", mode}, {"crs", crs}, {"geometry", geometry}} {
		if m[1] != "" {
			parts = append(parts, `"`+m[0]+`":`+m[1])
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

const (
	goodURI  = `"s3://my-bucket/test.geojson"`
	goodMode = `"vector"`
	bowtie   = `{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}`
	square   = `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}`
)

// seedEvent is the seed's verification payload: the bowtie.
const seedEvent = `{
    "source_uri": "s3://my-bucket/test.geojson",
    "crs": "EPSG:4326",
    "processing_mode": "vector",
    "geometry": {
      "type": "Polygon",
      "coordinates": [[[0,0],[1,1],[0,1],[1,0],[0,0]]]
    }
  }`

type want struct {
	pointer string
	class   classify.Class
	kind    classify.ReasonKind
	message string // substring, when set
}

func TestValidate(t *testing.T) {
	const (
		schema = classify.ClassSchemaViolation
		invGeo = classify.ClassInvalidGeometry
		crsMis = classify.ClassCRSMismatch
		budget = classify.ClassResourceExhausted
	)
	for _, tc := range []struct {
		name    string
		payload string
		opts    *ingress.Options
		want    []want
	}{
		{name: "seed bowtie passes: topology is the consumer's job", payload: seedEvent},
		{name: "valid square", payload: event(goodURI, goodMode, "", square)},
		{name: "crs null", payload: event(goodURI, goodMode, "null", square)},
		{name: "crs CRS84", payload: event(goodURI, goodMode, `"urn:ogc:def:crs:OGC:1.3:CRS84"`, square)},
		{name: "crs named 4326", payload: event(goodURI, goodMode, `{"type":"name","properties":{"name":"urn:ogc:def:crs:EPSG::4326"}}`, square)},
		{name: "crs integer", payload: event(goodURI, goodMode, `4326`, square)},
		{name: "crs PROJ string left to PROJ", payload: event(goodURI, goodMode, `"+proj=longlat +datum=WGS84 +type=crs"`, square)},
		{name: "feature with properties", payload: `{"type":"Feature","source_uri":"gs://b/o","processing_mode":"vector","properties":{"a":[1,{"b":null}]},"geometry":{"type":"Point","coordinates":[12.5,41.9,3]}}`},
		{name: "geometry collection", payload: event(goodURI, goodMode, "", `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[0,0]},`+square+`]}`)},
		{name: "https source", payload: event(`"https://example.com/feeds/1.geojson?page=2"`, goodMode, "", square)},
		{name: "urn source", payload: event(`"urn:uuid:4e1c7f6e-8a65-4d39-9f64-7b9e4e5b2c11"`, goodMode, "", square)},

		{name: "missing everything", payload: `{}`, want: []want{
			{"/source_uri", schema, ingress.KindRequired, "source_uri is required"},
			{"/processing_mode", schema, ingress.KindRequired, ""},
			{"/geometry", schema, classify.KindMissingGeometry, ""},
		}},
		{name: "nulls", payload: event("null", "null", "", "null"), want: []want{
			{"/source_uri", schema, ingress.KindRequired, ""},
			{"/processing_mode", schema, ingress.KindRequired, ""},
			{"/geometry", schema, classify.KindMissingGeometry, "geometry is null"},
		}},
		{name: "wrong types", payload: event(`42`, `["vector"]`, "", square), want: []want{
			{"/source_uri", schema, ingress.KindWrongType, "must be a string"},
			{"/processing_mode", schema, ingress.KindWrongType, ""},
		}},
		{name: "relative source", payload: event(`"my-bucket/test.geojson"`, goodMode, "", square), want: []want{{"/source_uri", schema, ingress.KindInvalidURI, "absolute URI"}}},
		{name: "scheme only", payload: event(`"s3://"`, goodMode, "", square), want: []want{{"/source_uri", schema, ingress.KindInvalidURI, ""}}},
		{name: "space in source", payload: event(`"s3://my bucket/x"`, goodMode, "", square), want: []want{{"/source_uri", schema, ingress.KindInvalidURI, "space or control"}}},
		{name: "control in source", payload: event(`"s3://b/x\u0000"`, goodMode, "", square), want: []want{{"/source_uri", schema, ingress.KindInvalidURI, ""}}},
		{name: "empty source", payload: event(`""`, goodMode, "", square), want: []want{{"/source_uri", schema, ingress.KindInvalidURI, ""}}},
		{name: "long source", payload: event(`"s3://b/`+strings.Repeat("k", ingress.MaxSourceURILength)+`"`, goodMode, "", square), want: []want{{"/source_uri", schema, ingress.KindInvalidURI, "at most 4096"}}},
		{name: "scheme not accepted", payload: event(`"ftp://host/x"`, goodMode, "", square), opts: &ingress.Options{SourceURISchemes: []string{"s3", "GS"}},
			want: []want{{"/source_uri", schema, ingress.KindInvalidURI, "accepted scheme (s3, GS)"}}},
		{name: "scheme accepted case-insensitively", payload: event(`"gs://b/o"`, goodMode, "", square), opts: &ingress.Options{SourceURISchemes: []string{"s3", "GS"}}},
		{name: "unknown mode", payload: event(goodURI, `"raster"`, "", square), want: []want{{"/processing_mode", schema, ingress.KindUnknownMode, `"raster" is not one of: vector`}}},
		{name: "mode is case-sensitive", payload: event(goodURI, `"Vector"`, "", square), want: []want{{"/processing_mode", schema, ingress.KindUnknownMode, ""}}},
		{name: "configured modes", payload: event(goodURI, `"tiles"`, "", square), opts: &ingress.Options{ProcessingModes: []string{"vector", "tiles"}}},

		{name: "crs differs", payload: event(goodURI, goodMode, `"EPSG:3857"`, square), want: []want{{"/crs", crsMis, classify.KindCRSDiffers, "EPSG:3857"}}},
		{name: "named crs differs", payload: event(goodURI, goodMode, `{"type":"name","properties":{"name":"urn:ogc:def:crs:EPSG::3857"}}`, square), want: []want{{"/crs", crsMis, classify.KindCRSDiffers, ""}}},
		{name: "integer crs differs", payload: event(goodURI, goodMode, `3857`, square), want: []want{{"/crs", crsMis, classify.KindCRSDiffers, ""}}},
		{name: "unparseable EPSG", payload: event(goodURI, goodMode, `"EPSG:43x6"`, square), want: []want{{"/crs", crsMis, classify.KindCRSUnparseable, `"EPSG:43x6"`}}},
		{name: "strict refuses PROJ string", payload: event(goodURI, goodMode, `"+proj=longlat +datum=WGS84"`, square), opts: &ingress.Options{CRSChecker: ingress.EPSGChecker{Strict: true}},
			want: []want{{"/crs", crsMis, classify.KindCRSUnparseable, ""}}},
		{name: "linked crs", payload: event(goodURI, goodMode, `{"type":"link","properties":{"href":"http://example.com/crs"}}`, square), want: []want{{"/crs", crsMis, classify.KindCRSUnparseable, "linked"}}},
		{name: "malformed crs object", payload: event(goodURI, goodMode, `{"type":"name"}`, square), want: []want{{"/crs", schema, classify.KindMalformed, ""}}},
		{name: "geometry's own crs", payload: event(goodURI, goodMode, "", `{"type":"Point","coordinates":[0,0],"crs":"EPSG:3857"}`), want: []want{{"/geometry/crs", crsMis, classify.KindCRSDiffers, ""}}},
		{name: "any resolvable crs", payload: event(goodURI, goodMode, `"EPSG:3857"`, `{"type":"Point","coordinates":[1113194.9,6446275.8]}`), opts: &ingress.Options{ExpectedEPSG: -1}},
		{name: "pipeline in 3857", payload: event(goodURI, goodMode, `"EPSG:3857"`, `{"type":"Point","coordinates":[1113194.9,6446275.8]}`), opts: &ingress.Options{ExpectedEPSG: 3857}},
		{name: "crs checked although the geometry is unreadable", payload: event(goodURI, goodMode, `"EPSG:3857"`, `{"type":"Polygon","coordinates":[[0,0]]}`), want: []want{
			{"/crs", crsMis, classify.KindCRSDiffers, ""},
			{"/geometry/coordinates/0/0", schema, classify.KindMalformed, "nested too shallowly"},
		}},

		{name: "web mercator labelled 4326", payload: event(goodURI, goodMode, `"EPSG:4326"`, `{"type":"LineString","coordinates":[[0,0],[1113194.9,6446275.8]]}`),
			want: []want{{"/geometry/coordinates/1", crsMis, classify.KindOutOfRange, "Coordinate outside geographic range[1113194.9 6446275.8]"}}},
		{name: "range check off", payload: event(goodURI, goodMode, "", `{"type":"Point","coordinates":[1113194.9,6446275.8]}`), opts: &ingress.Options{NoRangeCheck: true}},
		{name: "unclosed ring", payload: event(goodURI, goodMode, "", `{"type":"Polygon","coordinates":[[[10,10],[20,10],[20,20],[10,20]]]}`),
			want: []want{{"/geometry/coordinates/0/0", invGeo, classify.KindRingNotClosed, "Ring is not closed[10 10]"}}},
		{name: "unclosed hole in a multipolygon", payload: event(goodURI, goodMode, "", `{"type":"MultiPolygon","coordinates":[[[[0,0],[9,0],[9,9],[0,0]]],[[[0,0],[9,0],[9,9],[0,0]],[[1,1],[2,1],[2,2],[1,2]]]]}`),
			want: []want{{"/geometry/coordinates/1/1/0", invGeo, classify.KindRingNotClosed, "[1 1]"}}},
		{name: "too few points", payload: event(goodURI, goodMode, "", `{"type":"Polygon","coordinates":[[[10,10],[20,10],[10,10]]]}`),
			want: []want{{"/geometry/coordinates/0/0", invGeo, classify.KindTooFewPoints, ""}}},
		{name: "empty ring", payload: event(goodURI, goodMode, "", `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]],[]]}`),
			want: []want{{"/geometry/coordinates/1", invGeo, classify.KindTooFewPoints, ""}}},
		{name: "one-point line", payload: event(goodURI, goodMode, "", `{"type":"MultiLineString","coordinates":[[[0,0],[1,1]],[[2,2]]]}`),
			want: []want{{"/geometry/coordinates/1/0", invGeo, classify.KindTooFewPoints, ""}}},
		{name: "NaN", payload: event(goodURI, goodMode, "", `{"type":"Polygon","coordinates":[[[0,0],[1,0],[NaN,1],[0,0]]]}`),
			want: []want{{"/geometry/coordinates/0/2", invGeo, classify.KindInvalidCoordinate, "Invalid Coordinate[NaN 1]"}}},
		{name: "Infinity in a point", payload: event(goodURI, goodMode, "", `{"type":"Point","coordinates":[-Infinity,0]}`),
			want: []want{{"/geometry/coordinates", invGeo, classify.KindInvalidCoordinate, ""}}},
		{name: "NaN deep in a collection", payload: event(goodURI, goodMode, "", `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[0,0]},{"type":"MultiPoint","coordinates":[[0,0],[1,NaN]]}]}`),
			want: []want{{"/geometry/geometries/1/coordinates/1", invGeo, classify.KindInvalidCoordinate, ""}}},
		{name: "empty polygon", payload: event(goodURI, goodMode, "", `{"type":"Polygon","coordinates":[]}`), want: []want{{"/geometry", invGeo, classify.KindEmpty, ""}}},
		{name: "missing coordinates", payload: event(goodURI, goodMode, "", `{"type":"Polygon"}`), want: []want{{"/geometry", schema, classify.KindMissingGeometry, ""}}},
		{name: "null coordinates", payload: event(goodURI, goodMode, "", `{"type":"Polygon","coordinates":null}`), want: []want{{"/geometry/coordinates", schema, classify.KindMissingGeometry, ""}}},
		{name: "missing type", payload: event(goodURI, goodMode, "", `{"coordinates":[0,0]}`), want: []want{{"/geometry", schema, classify.KindMalformed, ""}}},
		{name: "unknown type", payload: event(goodURI, goodMode, "", `{"type":"Circle","coordinates":[0,0]}`), want: []want{{"/geometry/type", schema, classify.KindMalformed, "Circle"}}},
		{name: "string coordinate", payload: event(goodURI, goodMode, "", `{"type":"LineString","coordinates":[[0,0],[1,"1"]]}`), want: []want{{"/geometry/coordinates/1/1", schema, classify.KindMalformed, ""}}},
		{name: "geometry not an object", payload: event(goodURI, goodMode, "", `"POINT(0 0)"`), want: []want{{"/geometry", schema, classify.KindMalformed, ""}}},

		{name: "vertex budget", payload: event(goodURI, goodMode, "", `{"type":"MultiPoint","coordinates":[[0,0],[1,1],[2,2],[3,3]]}`), opts: &ingress.Options{MaxVertices: 3},
			want: []want{{"/geometry/coordinates/3", budget, classify.KindVertexBudget, ""}}},
		{name: "byte budget", payload: event(goodURI, goodMode, "", square), opts: &ingress.Options{MaxBytes: 50},
			want: []want{{"", budget, classify.KindByteBudget, "over the budget of 50 bytes"}}},
		{name: "no byte budget", payload: event(goodURI, goodMode, "", square), opts: &ingress.Options{MaxBytes: -1, MaxVertices: -1}},

		{name: "empty body", payload: "", want: []want{{"", schema, classify.KindMalformed, "empty body"}}},
		{name: "array", payload: `[{"geometry":null}]`, want: []want{{"", schema, classify.KindMalformed, "not a JSON object"}}},
		{name: "not JSON", payload: `{"source_uri": s3://x}`, want: []want{{"/source_uri", schema, classify.KindMalformed, "not valid JSON"}}},
		{name: "truncated", payload: seedEvent[:60], want: []want{{"/crs", schema, classify.KindMalformed, "not valid JSON"}}},
		{name: "bad JSON deep in properties", payload: `{"source_uri":"s3://b/k","processing_mode":"vector","properties":{"a/b":{"c~d":[1,2,}},"geometry":` + square + `}`,
			want: []want{{"/properties/a~1b/c~0d/2", schema, classify.KindMalformed, "not valid JSON"}}},
		{name: "duplicate geometry", payload: `{"source_uri":"s3://b/k","processing_mode":"vector","geometry":` + square + `,"geometry":` + square + `}`,
			want: []want{{"/geometry", schema, classify.KindMalformed, "duplicate"}}},
		{name: "everything wrong at once", payload: event(`"relative"`, `"raster"`, `"EPSG:3857"`, `{"type":"Polygon","coordinates":[[[10,10],[20,10],[20,20],[10,20]]]}`), want: []want{
			{"/source_uri", schema, ingress.KindInvalidURI, ""},
			{"/processing_mode", schema, ingress.KindUnknownMode, ""},
			{"/crs", crsMis, classify.KindCRSDiffers, ""},
			{"/geometry/coordinates/0/0", invGeo, classify.KindRingNotClosed, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ingress.Validate([]byte(tc.payload), tc.opts)
			require.Len(t, got, len(tc.want), "%v", got)
			for i, w := range tc.want {
				require.Equal(t, w.pointer, got[i].Pointer, "%v", got[i])
				require.Equal(t, w.class, got[i].Class, "%v", got[i])
				require.Equal(t, w.kind, got[i].Kind, "%v", got[i])
				require.Contains(t, got[i].Message, w.message, "%v", got[i])
				require.NotEmpty(t, got[i].Message)
			}
		})
	}
}

func TestValidateFaultDetail(t *testing.T) {
	got := ingress.Validate([]byte(event(goodURI, goodMode, "", `{"type":"Polygon","coordinates":[[[0,0],[9,0],[9,9],[0,9],[0,0]],[[1,1],[2,1],[2,2],[1,2]]]}`)), nil)
	require.Len(t, got, 1)
	require.Equal(t, &orb.Point{1, 1}, got[0].Location)
	require.Equal(t, &classify.Fault{Part: -1, Ring: 1, Vertex: 0}, got[0].Fault)
	require.Equal(t, "/geometry/coordinates/1/0", got[0].Pointer)

	got = ingress.Validate([]byte(event(goodURI, goodMode, `"EPSG:3857"`, square)), nil)
	require.Len(t, got, 1)
	require.Equal(t, 3857, got[0].EPSG)
	require.Nil(t, got[0].Location)
}

// fakeGeometryChecker reports a self-intersection on ring 0's first
// segment, as spatial.Checker does for the bowtie.
type fakeGeometryChecker struct{ calls [][]byte }

func (f *fakeGeometryChecker) CheckGeometry(geom []byte) error {
	f.calls = append(f.calls, geom)
	loc := orb.Point{0.5, 0.5}
	return &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation,
		Geometry: &classify.GeometryDetail{Reason: "Self-intersection[0.5 0.5]", Kind: classify.KindSelfIntersection,
			Location: &loc, Fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0, OnSegment: true}},
		Err: errors.New("invalid geometry: Self-intersection[0.5 0.5]")}
}

func TestGeometryCheckerPlugged(t *testing.T) {
	gc := &fakeGeometryChecker{}
	opts := &ingress.Options{GeometryChecker: gc}
	got := ingress.Validate([]byte(seedEvent), opts)
	require.Len(t, got, 1)
	v := got[0]
	require.Equal(t, "/geometry/coordinates/0/0", v.Pointer)
	require.Equal(t, classify.ClassInvalidGeometry, v.Class)
	require.Equal(t, classify.KindSelfIntersection, v.Kind)
	require.Equal(t, "Self-intersection[0.5 0.5]", v.Message)
	require.Equal(t, &classify.Fault{Part: -1, Ring: 0, Vertex: 0, OnSegment: true}, v.Fault)
	require.Len(t, gc.calls, 1)
	require.JSONEq(t, `{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}`, string(gc.calls[0]), "the checker sees the geometry's exact bytes")
	require.True(t, strings.HasPrefix(string(gc.calls[0]), "{\n      \"type\""))

	// Not called once the pure-Go checks have refused the geometry.
	ingress.Validate([]byte(event(goodURI, goodMode, "", `{"type":"Polygon","coordinates":[[[0,0],[1,0],[NaN,1],[0,0]]]}`)), opts)
	require.Len(t, gc.calls, 1)
}

type recordingCRSChecker struct {
	declared []string
	expected []int
}

func (r *recordingCRSChecker) CheckCRS(declared string, expected int) error {
	r.declared, r.expected = append(r.declared, declared), append(r.expected, expected)
	if declared == "bad" {
		return errors.New("resolver says no")
	}
	return nil
}

func TestCRSCheckerPlugged(t *testing.T) {
	rc := &recordingCRSChecker{}
	opts := &ingress.Options{CRSChecker: rc, ExpectedEPSG: 2056}
	require.Empty(t, ingress.Validate([]byte(event(goodURI, goodMode, "", square)), opts))
	require.Empty(t, ingress.Validate([]byte(event(goodURI, goodMode, `{"type":"name","properties":{"name":"EPSG:2056"}}`, square)), opts))
	got := ingress.Validate([]byte(event(goodURI, goodMode, `"bad"`, square)), opts)
	require.Equal(t, []string{"", "EPSG:2056", "bad"}, rc.declared)
	require.Equal(t, []int{2056, 2056, 2056}, rc.expected)
	require.Len(t, got, 1)
	require.Equal(t, ingress.Violation{Pointer: "/crs", Class: classify.ClassCRSMismatch, Kind: classify.KindCRSUnparseable, Message: "resolver says no"}, got[0])
}

func TestValidateLeavesPayloadAlone(t *testing.T) {
	p := []byte(seedEvent)
	orig := string(p)
	ingress.Validate(p, &ingress.Options{GeometryChecker: &fakeGeometryChecker{}})
	require.Equal(t, orig, string(p))
}
