// Package nesting builds JSON events nested to a given depth in each of
// the positions a GeoJSON reader meets: for fuzz targets that must reach
// depths a byte-level mutator never would (a stack overflow needs hundreds
// of thousands of levels), and for tests. It has no dependencies, so that
// every package's tests can use it, internal/geojson's included.
package nesting

// shape is nesting in one position: head, open repeated depth times,
// inner, close repeated depth times, tail.
type shape struct {
	name                           string
	head, open, inner, close, tail string
}

const (
	point   = `{"type":"Point","coordinates":[1,2]}`
	polygon = `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}`
	head    = `{"crs":"EPSG:4326","geometry":`
)

var shapes = []shape{
	{"collections", head, `{"type":"GeometryCollection","geometries":[`, point, `]}`, `}`},
	{"collections, geometries first", head, `{"geometries":[`, point, `],"type":"GeometryCollection"}`, `}`},
	{"coordinates", head + `{"type":"Polygon","coordinates":`, `[`, `0`, `]`, `}}`},
	{"coordinates before type", head + `{"coordinates":`, `[`, `0`, `]`, `,"type":"Polygon"}}`},
	{"position", head + `{"type":"Point","coordinates":[1,`, `[`, `2`, `]`, `]}}`},
	{"geometries of arrays", head + `{"type":"GeometryCollection","geometries":`, `[`, ``, `]`, `}}`},
	{"properties arrays", head + polygon + `,"properties":`, `[`, ``, `]`, `}`},
	{"properties objects", `{"properties":`, `{"a":`, `1`, `}`, `,"geometry":` + polygon + `}`},
	{"properties mixed", head + polygon + `,"properties":`, `[{"a":`, `null`, `}]`, `}`},
	{"bbox", head + `{"type":"Point","coordinates":[1,2],"bbox":`, `[`, `1`, `]`, `}}`},
	{"crs object", `{"crs":{"type":"name","properties":{"name":"EPSG:4326","x":`, `{"x":`, `1`, `}`, `}},"geometry":` + polygon + `}`},
	{"geometry crs", `{"geometry":{"type":"Point","coordinates":[1,2],"crs":{"type":"name","properties":`, `{"a":`, `1`, `}`, `}}}`},
	{"collection member", head + `{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2],"p":`, `[`, ``, `]`, `}]}}`},
	{"geometry value", head, `[`, ``, `]`, `}`},
	{"top level", ``, `[`, ``, `]`, ``},
	{"unclosed", head + polygon + `,"properties":`, `[`, ``, ``, ``},
}

// Shapes is the number of positions Build knows.
func Shapes() int { return len(shapes) }

// Name names shape s (taken modulo Shapes).
func Name(s int) string { return shapes[mod(s)].name }

func mod(s int) int {
	s %= len(shapes)
	if s < 0 {
		s += len(shapes)
	}
	return s
}

// Build returns an event nested depth levels deep in position s (modulo
// Shapes), with filler inserted after every opening unit (so a fuzzer can
// vary what surrounds each level: white space, members, garbage). The
// result is allocated once.
func Build(s, depth int, filler []byte) []byte {
	sh := shapes[mod(s)]
	depth = max(depth, 0)
	n := len(sh.head) + len(sh.inner) + len(sh.tail) + depth*(len(sh.open)+len(filler)+len(sh.close))
	b := make([]byte, 0, n)
	b = append(b, sh.head...)
	for range depth {
		b = append(b, sh.open...)
		b = append(b, filler...)
	}
	b = append(b, sh.inner...)
	for range depth {
		b = append(b, sh.close...)
	}
	return append(b, sh.tail...)
}
