package ingress

import (
	"strconv"
	"strings"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/jsonscan"
)

// maxPointerDepth bounds how deep pointerAt descends: real GeoJSON needs
// at most a dozen levels, and each level rescans what it skips.
const maxPointerDepth = 32

// escapeToken escapes a member name for a JSON pointer (RFC 6901).
func escapeToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func skipWS(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// pointerAt returns the JSON pointer of the deepest value of data that
// contains byte offset off, as far as data can be walked: the best answer
// to "where is the error at offset off". It never fails; "" is the whole
// document.
func pointerAt(data []byte, off int) string {
	var ptr strings.Builder
	i := skipWS(data, 0)
	for depth := 0; depth < maxPointerDepth && i < len(data); depth++ {
		var next int
		var tok string
		var ok bool
		switch data[i] {
		case '{':
			next, tok, ok = memberAt(data, i, off)
			if ok {
				tok = escapeToken(tok)
			}
		case '[':
			var idx int
			next, idx, ok = elementAt(data, i, off)
			tok = strconv.Itoa(idx)
		}
		if !ok {
			break
		}
		ptr.WriteByte('/')
		ptr.WriteString(tok)
		if next < 0 {
			break // the offset is on the member's name
		}
		i = next
	}
	return ptr.String()
}

// memberAt finds the member of the object at data[i] whose name or value
// contains off (or whose value cannot be skipped, so holds the error). It
// returns the value's start (-1 when off is on the name) and the name.
func memberAt(data []byte, i, off int) (valueStart int, name string, ok bool) {
	i = skipWS(data, i+1)
	for i < len(data) && data[i] == '"' {
		ks, ke, err := jsonscan.Skip(data, i)
		if err != nil {
			return 0, "", false
		}
		name, err := jsonscan.Unquote(data[ks:ke])
		if err != nil {
			return 0, "", false
		}
		if off < ks {
			return 0, "", false
		}
		if off < ke {
			return -1, name, true
		}
		i = skipWS(data, ke)
		if i >= len(data) || data[i] != ':' {
			return -1, name, off >= ke
		}
		vs := skipWS(data, i+1)
		_, ve, err := jsonscan.Skip(data, vs)
		if err != nil || off < ve {
			return vs, name, off >= vs
		}
		i = skipWS(data, ve)
		if i >= len(data) || data[i] != ',' {
			return 0, "", false
		}
		i = skipWS(data, i+1)
	}
	return 0, "", false
}

// elementAt is memberAt for the array at data[i].
func elementAt(data []byte, i, off int) (valueStart, index int, ok bool) {
	i++
	for idx := 0; i < len(data); idx++ {
		vs := skipWS(data, i)
		_, ve, err := jsonscan.Skip(data, vs)
		if err != nil {
			if vs >= len(data) || data[vs] == ']' {
				return 0, 0, false
			}
			return vs, idx, off >= vs
		}
		if off < vs {
			return 0, 0, false
		}
		if off < ve {
			return vs, idx, true
		}
		i = skipWS(data, ve)
		if i >= len(data) || data[i] != ',' {
			return 0, 0, false
		}
		i++
	}
	return 0, 0, false
}

// eachMember calls fn for each member of the object at data[i] (which
// must be valid JSON, as ParseEvent checked) with its name and the start
// of its value.
func eachMember(data []byte, i int, fn func(name string, vs int) bool) {
	i = skipWS(data, i+1)
	for i < len(data) && data[i] == '"' {
		ks, ke, err := jsonscan.Skip(data, i)
		if err != nil {
			return
		}
		name, err := jsonscan.Unquote(data[ks:ke])
		if err != nil {
			return
		}
		i = skipWS(data, ke)
		if i >= len(data) || data[i] != ':' {
			return
		}
		vs, ve, err := jsonscan.Skip(data, i+1)
		if err != nil || !fn(name, vs) {
			return
		}
		i = skipWS(data, ve)
		if i >= len(data) || data[i] != ',' {
			return
		}
		i = skipWS(data, i+1)
	}
}

// eachElement calls fn for each element of the array at data[i] with its
// index and start.
func eachElement(data []byte, i int, fn func(idx, vs int) bool) {
	i++
	for idx := 0; ; idx++ {
		vs, ve, err := jsonscan.Skip(data, i)
		if err != nil || !fn(idx, vs) {
			return
		}
		i = skipWS(data, ve)
		if i >= len(data) || data[i] != ',' {
			return
		}
		i++
	}
}

// walkComponents calls fn, in the order of geojson.Components, with the
// JSON pointer of each component of the geometry object at data[i]: the
// array of a ring, a line or a MultiPoint's positions, or a Point's
// position itself (single). It stops when fn returns false and reports
// whether it went through.
//
// It recurses into GeometryCollections; nest counts the enclosing ones, and
// collections nested deeper than the parser accepts (so never met after a
// successful parse) are not entered.
func walkComponents(data []byte, i int, base string, nest int, fn func(ptr string, single bool) bool) bool {
	var typ string
	coords, geoms := -1, -1
	eachMember(data, i, func(name string, vs int) bool {
		switch name {
		case "type":
			if _, ve, err := jsonscan.Skip(data, vs); err == nil {
				typ, _ = jsonscan.Unquote(data[vs:ve])
			}
		case "coordinates":
			coords = vs
		case "geometries":
			geoms = vs
		}
		return true
	})
	cont := true
	switch typ {
	case "GeometryCollection":
		if geoms < 0 || data[geoms] != '[' || nest >= geojson.CeilingMaxNesting {
			return true
		}
		eachElement(data, geoms, func(idx, vs int) bool {
			if data[vs] == '{' {
				cont = walkComponents(data, vs, base+"/geometries/"+strconv.Itoa(idx), nest+1, fn)
			}
			return cont
		})
		return cont
	case "Point":
		return fn(base+"/coordinates", true)
	case "MultiPoint", "LineString":
		return fn(base+"/coordinates", false)
	}
	if coords < 0 || data[coords] != '[' {
		return true
	}
	switch typ {
	case "MultiLineString", "Polygon":
		eachElement(data, coords, func(idx, _ int) bool {
			cont = fn(base+"/coordinates/"+strconv.Itoa(idx), false)
			return cont
		})
	case "MultiPolygon":
		eachElement(data, coords, func(p, vs int) bool {
			if data[vs] != '[' {
				return true
			}
			eachElement(data, vs, func(r, _ int) bool {
				cont = fn(base+"/coordinates/"+strconv.Itoa(p)+"/"+strconv.Itoa(r), false)
				return cont
			})
			return cont
		})
	}
	return cont
}

// faultPointer returns the JSON pointer of the position (or, for Vertex
// -1, the ring or line) a fault names, in the geometry g parsed from the
// geometry object at data[geomStart] whose pointer is base; base itself
// when the fault cannot be placed.
func faultPointer(data []byte, geomStart int, base string, g orb.Geometry, f *classify.Fault) string {
	if f == nil || g == nil || geomStart < 0 {
		return base
	}
	k, n := -1, 0
	geojson.Components(g, func(c geojson.Component) bool {
		if c.Part == f.Part && c.Ring == f.Ring {
			k = n
			return false
		}
		n++
		return true
	})
	if k < 0 {
		return base
	}
	ptr := base
	n = 0
	walkComponents(data, geomStart, base, 0, func(p string, single bool) bool {
		if n == k {
			ptr = p
			if f.Vertex >= 0 && !single {
				ptr += "/" + strconv.Itoa(f.Vertex)
			}
			return false
		}
		n++
		return true
	})
	return ptr
}
