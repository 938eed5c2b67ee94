package geojson

import (
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
)

const (
	validGeometry = `{"type":"Point","coordinates":[1,2]}`
	validEvent    = `{"crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[1,2]},"properties":{"a":[1,{"b":null}]}}`
)

func parseEvent(data []byte) error {
	_, err := ParseEvent(data, Limits{})
	return err
}

func parseGeometry(data []byte) error {
	_, err := ParseGeometry(data, Limits{})
	return err
}

// TestTrailingBytes: after a complete document only RFC 8259 white space
// may follow. Every other byte — NUL first among them, which the scanner
// used to mistake for the end of the input — is an error at its offset.
func TestTrailingBytes(t *testing.T) {
	for _, doc := range []struct {
		name  string
		body  string
		parse func([]byte) error
	}{{"event", validEvent, parseEvent}, {"geometry", validGeometry, parseGeometry}} {
		t.Run(doc.name, func(t *testing.T) {
			require.NoError(t, doc.parse([]byte(doc.body)))
			for b := 0; b < 256; b++ {
				in := []byte(doc.body + string([]byte{byte(b)}))
				err := doc.parse(in)
				if b == ' ' || b == '\t' || b == '\r' || b == '\n' {
					require.NoError(t, err, "white space byte 0x%02x", b)
					continue
				}
				var ge *Error
				require.ErrorAs(t, err, &ge, "byte 0x%02x after the document", b)
				require.Equal(t, classify.KindMalformed, ge.Kind, "byte 0x%02x", b)
				require.Equal(t, len(doc.body), ge.Offset, "byte 0x%02x", b)
				require.Contains(t, ge.Msg, "after the JSON document", "byte 0x%02x", b)
			}
			for _, tail := range []string{
				"\x00", "\x00garbage", " \x00", "\n\x00\n", "\x00" + doc.body, doc.body, "garbage", ",", "]", "}",
				"\v", "\f", "\u00a0", "\u2028", "\ufeff", "\x85", "\xff", "//", "/* */", "#",
			} {
				err := doc.parse([]byte(doc.body + tail))
				var ge *Error
				require.ErrorAs(t, err, &ge, "tail %q", tail)
				require.Equal(t, classify.KindMalformed, ge.Kind)
			}
			require.NoError(t, doc.parse([]byte(" \t\r\n"+doc.body+" \t\r\n")))
		})
	}
}

// TestLeadingAndInnerNUL: NUL is an invalid character wherever it is, not
// the end of the input.
func TestLeadingAndInnerNUL(t *testing.T) {
	for _, in := range []string{
		"\x00" + validEvent,
		`{"geometry":{"type":"Point","coordinates":[1,2]}` + "\x00}",
		`{"geometry":{"type":"Point","coordinates":[1,2` + "\x00" + `]}}`,
		`{"geometry":{"type":"Point","coordinates":[1,2]},"p":[` + "\x00" + `]}`,
		`{"geometry":{"type":"Point","coordinates":[1,2]},"p":"a` + "\x00" + `b"}`,
		`{"geometry":{"type":"Point","coordinates":[1,2]},` + "\x00",
		"\x00",
	} {
		var ge *Error
		require.ErrorAs(t, parseEvent([]byte(in)), &ge, "%q", in)
		require.Equal(t, classify.KindMalformed, ge.Kind, "%q", in)
	}
}

// deepCases builds, for n levels, nesting in every position the parser
// meets: each one must be refused before it is entered.
func deepCases(n int) map[string]string {
	arr := func(inner string) string { return strings.Repeat("[", n) + inner + strings.Repeat("]", n) }
	obj := strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n)
	mixed := strings.Repeat(`[{"a":`, n/2) + "1" + strings.Repeat("}]", n/2)
	gc := strings.Repeat(`{"type":"GeometryCollection","geometries":[`, n) + strings.Repeat("]}", n)
	gcLate := strings.Repeat(`{"geometries":[`, n) + strings.Repeat(`],"type":"GeometryCollection"}`, n)
	point := `{"type":"Point","coordinates":[1,2]}`
	ev := func(geom string) string { return `{"geometry":` + geom + `}` }
	return map[string]string{
		"collections, type first":      ev(gc),
		"collections, geometries late": ev(gcLate),
		"coordinates, type first":      ev(`{"type":"Polygon","coordinates":` + arr("0") + `}`),
		"coordinates, type late":       ev(`{"coordinates":` + arr("0") + `,"type":"Polygon"}`),
		"position":                     ev(`{"type":"Point","coordinates":[1,` + arr("2") + `]}`),
		"geometries of arrays":         ev(`{"type":"GeometryCollection","geometries":` + arr("") + `}`),
		"properties arrays":            `{"geometry":` + point + `,"properties":` + arr("") + `}`,
		"properties objects":           `{"properties":` + obj + `,"geometry":` + point + `}`,
		"properties mixed":             `{"geometry":` + point + `,"properties":` + mixed + `}`,
		"bbox":                         ev(`{"type":"Point","bbox":` + arr("1") + `,"coordinates":[1,2]}`),
		"crs object":                   `{"crs":{"type":"name","properties":{"name":"EPSG:4326","x":` + obj + `}},"geometry":` + point + `}`,
		"crs member of crs":            `{"crs":{"type":` + arr("") + `},"geometry":` + point + `}`,
		"geometry crs":                 ev(`{"type":"Point","coordinates":[1,2],"crs":{"type":"name","properties":` + obj + `}}`),
		"geometry value":               ev(arr("")),
		"top level":                    arr(""),
		"unclosed":                     `{"geometry":` + point + `,"p":` + strings.Repeat("[", n),
		"member of a collection":       ev(`{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2],"p":` + arr("") + `}]}`),
	}
}

// TestDepthRefusedBeforeDescent parses tens of megabytes of nesting in
// every position with the goroutine's stack capped at 1 MiB: a parser that
// recursed once per level, or checked its limit only on the way back,
// would die with Go's fatal "stack overflow" (which fails the test binary,
// recover or not). Each is refused with a typed error, in memory that does
// not grow with the input.
func TestDepthRefusedBeforeDescent(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	n := 700_000 // ~30 MB of nested collections, under spatial's 64 MiB budget
	if testing.Short() {
		n = 100_000
	}
	for name, doc := range deepCases(n) {
		t.Run(name, func(t *testing.T) {
			data := []byte(doc)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := ParseEvent(data, Limits{})
			runtime.ReadMemStats(&after)
			var ge *Error
			require.ErrorAs(t, err, &ge)
			require.Equal(t, classify.KindMalformed, ge.Kind, "%v", err)
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "allocated %d bytes for %d input bytes", after.TotalAlloc-before.TotalAlloc, len(data))
			require.Less(t, ge.Offset, 64*1024, "refused near the top, not after walking the input: %v", err)
		})
	}
}

// TestDepthLimits pins the limits: MaxDepth containers inside a skipped
// value pass, one more fails; MaxNesting collections pass, one more fails,
// whichever member comes first; a MaxNesting above the ceiling is lowered.
func TestDepthLimits(t *testing.T) {
	point := `{"type":"Point","coordinates":[1,2]}`
	withProps := func(n int) []byte {
		return []byte(`{"geometry":` + point + `,"properties":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`)
	}
	_, err := ParseEvent(withProps(DefaultMaxDepth), Limits{})
	require.NoError(t, err)
	_, err = ParseEvent(withProps(DefaultMaxDepth+1), Limits{})
	var ge *Error
	require.ErrorAs(t, err, &ge)
	require.Equal(t, fmt.Sprintf("JSON nested deeper than %d levels", DefaultMaxDepth), ge.Msg)
	// The iterative skipper's bit stack grows past its inline 512 levels.
	_, err = ParseEvent(withProps(5000), Limits{MaxDepth: 5000})
	require.NoError(t, err)
	bad := `{"geometry":` + point + `,"p":` + strings.Repeat(`[`, 700) + `{"a":1` + strings.Repeat(`]`, 701) + `}`
	_, err = ParseEvent([]byte(bad), Limits{MaxDepth: 5000})
	require.ErrorAs(t, err, &ge)
	require.Contains(t, ge.Msg, "expected ',' or '}' in object")

	gc := func(n int, late bool) []byte {
		if late {
			return []byte(strings.Repeat(`{"geometries":[`, n) + point + strings.Repeat(`],"type":"GeometryCollection"}`, n))
		}
		return []byte(strings.Repeat(`{"type":"GeometryCollection","geometries":[`, n) + point + strings.Repeat(`]}`, n))
	}
	for _, late := range []bool{false, true} {
		g, err := ParseGeometry(gc(DefaultMaxNesting, late), Limits{})
		require.NoError(t, err, "late %v", late)
		require.Equal(t, 1, g.Vertices)
		_, err = ParseGeometry(gc(DefaultMaxNesting+1, late), Limits{})
		require.ErrorAs(t, err, &ge, "late %v", late)
		require.Equal(t, fmt.Sprintf("GeometryCollections nested deeper than %d levels", DefaultMaxNesting), ge.Msg)
		require.Equal(t, classify.KindMalformed, ge.Kind)
	}
	_, err = ParseGeometry(gc(CeilingMaxNesting, false), Limits{MaxNesting: 1 << 40})
	require.NoError(t, err)
	_, err = ParseGeometry(gc(CeilingMaxNesting+1, false), Limits{MaxNesting: 1 << 40})
	require.ErrorAs(t, err, &ge)
	require.Contains(t, ge.Msg, fmt.Sprintf("deeper than %d", CeilingMaxNesting))
}

func TestPartsLimit(t *testing.T) {
	rings := func(n int) []byte {
		return []byte(`{"type":"Polygon","coordinates":[` + strings.TrimSuffix(strings.Repeat("[],", n), ",") + `]}`)
	}
	// The polygon's own array and n rings.
	_, err := ParseGeometry(rings(9), Limits{MaxParts: 10})
	require.NoError(t, err)
	_, err = ParseGeometry(rings(10), Limits{MaxParts: 10})
	var ge *Error
	require.ErrorAs(t, err, &ge)
	require.Equal(t, classify.KindVertexBudget, ge.Kind)
	require.Equal(t, "geometry has more than 10 parts (rings, lines, polygons and collection members)", ge.Msg)
	_, err = ParseGeometry(rings(DefaultMaxParts), Limits{})
	require.ErrorAs(t, err, &ge)
	require.Equal(t, classify.KindVertexBudget, ge.Kind)
	_, err = ParseGeometry(rings(10), Limits{MaxParts: -1})
	require.NoError(t, err)

	members := func(n int) []byte {
		return []byte(`{"type":"GeometryCollection","geometries":[` + strings.TrimSuffix(strings.Repeat(`{"type":"MultiPoint","coordinates":[]},`, n), ",") + `]}`)
	}
	// Each member counts, and so does its coordinate array.
	_, err = ParseGeometry(members(5), Limits{MaxParts: 10})
	require.NoError(t, err)
	_, err = ParseGeometry(members(6), Limits{MaxParts: 10})
	require.ErrorAs(t, err, &ge)
	require.Equal(t, classify.KindVertexBudget, ge.Kind)
}

func TestNumberLengthLimit(t *testing.T) {
	num := func(n int) string { return "1." + strings.Repeat("5", n-2) }
	_, err := ParseGeometry([]byte(`{"type":"Point","coordinates":[`+num(DefaultMaxNumberLength)+`,2]}`), Limits{})
	require.NoError(t, err)
	for _, in := range []string{
		`{"type":"Point","coordinates":[` + num(DefaultMaxNumberLength+1) + `,2]}`,
		`{"coordinates":[` + num(DefaultMaxNumberLength+1) + `,2],"type":"Point"}`,
		`{"type":"Point","coordinates":[1,-` + strings.Repeat("9", 1<<20) + `]}`,
	} {
		_, err := ParseGeometry([]byte(in), Limits{})
		var ge *Error
		require.ErrorAs(t, err, &ge)
		require.Equal(t, classify.KindMalformed, ge.Kind)
		require.Contains(t, ge.Msg, fmt.Sprintf("(longer than %d)", DefaultMaxNumberLength))
	}
	// Numbers that are only skipped are not converted and not limited.
	_, err = ParseEvent([]byte(`{"geometry":{"type":"Point","coordinates":[1,2]},"p":`+num(1<<20)+`}`), Limits{})
	require.NoError(t, err)
	// An integer crs is converted.
	_, err = ParseEvent([]byte(`{"crs":`+strings.Repeat("0", DefaultMaxNumberLength)+`4326,"geometry":{"type":"Point","coordinates":[1,2]}}`), Limits{})
	var ge *Error
	require.ErrorAs(t, err, &ge)
	require.Contains(t, ge.Msg, "crs member is a number but not a positive integer EPSG code")
}

// TestPositionsSizedByContent: the position array is sized from what the
// document can hold, when the first position is read — not from its
// brackets alone, so a document of brackets reserves nothing.
func TestPositionsSizedByContent(t *testing.T) {
	brackets := []byte(`{"properties":` + strings.Repeat("[", 400) + strings.Repeat("]", 400) + `,"geometry":{"type":"Point","coordinates":[1,2]}}`)
	p := newParser(brackets, Limits{})
	require.Nil(t, p.pts)
	ev, err := ParseEvent(brackets, Limits{})
	require.NoError(t, err)
	require.Equal(t, 1, ev.Geometry.Vertices)
	require.LessOrEqual(t, cap(ev.Geometry.Points), 8)
}

// TestComponentsDeepCollections walks a collection nested far deeper than
// any parse allows, with the stack capped at 1 MiB: the walker is
// iterative, and Append refuses it.
func TestComponentsDeepCollections(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	var g orb.Geometry = orb.Collection{orb.Point{1, 2}, orb.LineString{{0, 0}, {1, 1}}}
	for range 1_000_000 {
		g = orb.Collection{g}
	}
	var rings []int
	require.True(t, Components(g, func(c Component) bool {
		require.Equal(t, 0, c.Part)
		rings = append(rings, c.Ring)
		return true
	}))
	require.Equal(t, []int{0, 1}, rings)
	_, err := Append(nil, g, nil)
	require.ErrorContains(t, err, "nested deeper than")
}

// star is a closed ring of n positions on a circle, each joined to the one
// almost opposite: every segment crosses nearly every other.
func star(n int) orb.Ring {
	r := make(orb.Ring, n+1)
	for i := range n + 1 {
		k := i * ((n - 1) / 2) % n
		a := 2 * math.Pi * float64(k) / float64(n)
		r[i] = orb.Point{10 * math.Cos(a), 10 * math.Sin(a)}
	}
	return r
}

func circle(n int) orb.Ring {
	r := make(orb.Ring, n+1)
	for i := range n {
		a := 2 * math.Pi * float64(i) / float64(n)
		r[i] = orb.Point{10 * math.Cos(a), 10 * math.Sin(a)}
	}
	r[n] = r[0]
	return r
}

func TestCrossings(t *testing.T) {
	bowtie := orb.Polygon{{{0, 0}, {1, 1}, {1, 0}, {0, 1}, {0, 0}}}
	twisted := circle(100_000)
	twisted[500], twisted[501] = twisted[501], twisted[500]
	var comb orb.MultiLineString
	for i := range 20_000 {
		comb = append(comb, orb.LineString{{0, float64(i) * 1e-3}, {1000, float64(i) * 1e-3}})
	}
	holes := orb.Polygon{{{-1, -1}, {1000, -1}, {1000, 1000}, {-1, 1000}, {-1, -1}}}
	for i := range 10_000 {
		x, y := float64(i%100)*10, float64(i/100)*10
		holes = append(holes, orb.Ring{{x, y}, {x + 5, y}, {x + 5, y + 5}, {x, y + 5}, {x, y}})
	}
	diagonal := orb.Polygon{append(circle(10_000)[:5000:5000], orb.Point{-1000, -1000}, circle(10_000)[0])}
	tests := []struct {
		name   string
		g      orb.Geometry
		limit  int
		want   int
		wantOK bool
	}{
		{"bowtie", bowtie, 10, 1, true},
		{"square", orb.Polygon{{{0, 0}, {1, 0}, {1, 1}, {0, 1}, {0, 0}}}, 10, 0, true},
		{"circle of 100,000", orb.Polygon{circle(100_000)}, 10, 0, true},
		{"one twist in 100,000 (counted in each cell the pair shares)", orb.Polygon{twisted}, 10, 2, true},
		{"star of 1001: over the limit at once", orb.Polygon{star(1001)}, 10_000, 10_001, true},
		{"10,000 holes", holes, 10, 0, true},
		{"a long diagonal among short edges", diagonal, 10, 0, true},
		{"points have no segments", orb.MultiPoint{{0, 0}, {1, 1}}, 0, 0, true},
		{"dense parallel lines cannot be settled", comb, 10, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, ok := Crossings(tt.g, tt.limit)
			require.Equal(t, tt.wantOK, ok)
			if tt.wantOK {
				require.Equal(t, tt.want, n)
			}
		})
	}
}

func TestHolesLimit(t *testing.T) {
	polygon := func(holes int) string {
		return `[[[0,0],[9,0],[9,9],[0,9],[0,0]]` + strings.Repeat(`,[[1,1],[2,1],[2,2],[1,1]]`, holes) + `]`
	}
	for _, tt := range []struct {
		in      string
		limit   int
		wantErr bool
	}{
		{`{"type":"Polygon","coordinates":` + polygon(3) + `}`, 3, false},
		{`{"type":"Polygon","coordinates":` + polygon(4) + `}`, 3, true},
		{`{"type":"MultiPolygon","coordinates":[` + polygon(3) + `,` + polygon(3) + `]}`, 3, false},
		{`{"type":"MultiPolygon","coordinates":[` + polygon(3) + `,` + polygon(4) + `]}`, 3, true},
		{`{"coordinates":` + polygon(4) + `,"type":"Polygon"}`, 3, true},
		{`{"type":"MultiLineString","coordinates":[[[0,0],[1,1]],[[0,0],[1,1]],[[0,0],[1,1]]]}`, 1, false},
		{`{"type":"Polygon","coordinates":` + polygon(DefaultMaxHoles) + `}`, 0, false},
		{`{"type":"Polygon","coordinates":` + polygon(DefaultMaxHoles+1) + `}`, 0, true},
		{`{"type":"Polygon","coordinates":` + polygon(DefaultMaxHoles+1) + `}`, -1, false},
	} {
		_, err := ParseGeometry([]byte(tt.in), Limits{MaxHoles: tt.limit})
		if !tt.wantErr {
			require.NoError(t, err, "%.80s", tt.in)
			continue
		}
		var ge *Error
		require.ErrorAs(t, err, &ge, "%.80s", tt.in)
		require.Equal(t, classify.KindVertexBudget, ge.Kind)
		require.Contains(t, ge.Msg, "polygon has more than")
	}
}
