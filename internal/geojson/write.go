package geojson

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/paulmach/orb"
)

// ErrNonFinite is returned by [Append] for a NaN or infinite coordinate,
// which JSON cannot represent.
var ErrNonFinite = errors.New("geojson: non-finite coordinate cannot be encoded")

// AppendFloat appends v in its shortest form that parses back to exactly
// v, as encoding/json writes float64s: plain decimal notation between 1e-6
// and 1e21, exponent notation outside. v must be finite.
func AppendFloat(b []byte, v float64) []byte {
	abs := math.Abs(v)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, v, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// Append appends g to dst as a GeoJSON geometry object. z, if not nil,
// holds a third ordinate per position in document order (see
// [Geometry.Z]); NaN entries are omitted. Numbers are written exactly (see
// [AppendFloat]). A nil g is written as null. It fails with
// [ErrNonFinite] for a NaN or infinite coordinate and for geometry types
// GeoJSON has no name for (orb.Bound), and for collections nested deeper
// than [CeilingMaxNesting] (which no parse produces).
func Append(dst []byte, g orb.Geometry, z []float64) ([]byte, error) {
	w := writer{b: dst, z: z}
	if err := w.geometry(g, 0); err != nil {
		return dst, err
	}
	return w.b, nil
}

type writer struct {
	b   []byte
	z   []float64
	doc int
	err error
}

// geometry writes g, a member of nest collections.
func (w *writer) geometry(g orb.Geometry, nest int) error {
	if g == nil {
		w.b = append(w.b, "null"...)
		return nil
	}
	switch g := g.(type) {
	case orb.Collection:
		if nest >= CeilingMaxNesting {
			return fmt.Errorf("geojson: GeometryCollections nested deeper than %d levels", CeilingMaxNesting)
		}
		w.b = append(w.b, `{"type":"GeometryCollection","geometries":[`...)
		for i, m := range g {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			if m == nil {
				return fmt.Errorf("geojson: nil member %d in GeometryCollection", i)
			}
			if err := w.geometry(m, nest+1); err != nil {
				return err
			}
		}
		w.b = append(w.b, "]}"...)
		return nil
	case orb.Bound:
		return fmt.Errorf("geojson: cannot encode %T as a geometry", g)
	}
	typ := g.GeoJSONType()
	if _, ok := g.(orb.Ring); ok {
		typ = "LineString"
	}
	w.b = append(w.b, `{"type":"`...)
	w.b = append(w.b, typ...)
	w.b = append(w.b, `","coordinates":`...)
	switch g := g.(type) {
	case orb.Point:
		w.position(g)
	case orb.MultiPoint:
		w.positions(g)
	case orb.LineString:
		w.positions(g)
	case orb.Ring:
		w.positions(g)
	case orb.MultiLineString:
		w.b = append(w.b, '[')
		for i, l := range g {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.positions(l)
		}
		w.b = append(w.b, ']')
	case orb.Polygon:
		w.polygon(g)
	case orb.MultiPolygon:
		w.b = append(w.b, '[')
		for i, p := range g {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.polygon(p)
		}
		w.b = append(w.b, ']')
	}
	w.b = append(w.b, '}')
	return w.err
}

func (w *writer) polygon(p orb.Polygon) {
	w.b = append(w.b, '[')
	for i, r := range p {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.positions(r)
	}
	w.b = append(w.b, ']')
}

func (w *writer) positions(pts []orb.Point) {
	w.b = append(w.b, '[')
	for i, p := range pts {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.position(p)
	}
	w.b = append(w.b, ']')
}

func (w *writer) position(p orb.Point) {
	w.b = append(w.b, '[')
	w.number(p[0])
	w.b = append(w.b, ',')
	w.number(p[1])
	if w.doc < len(w.z) && !math.IsNaN(w.z[w.doc]) {
		w.b = append(w.b, ',')
		w.number(w.z[w.doc])
	}
	w.doc++
	w.b = append(w.b, ']')
}

func (w *writer) number(v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		w.err = ErrNonFinite
		w.b = append(w.b, '0')
		return
	}
	w.b = AppendFloat(w.b, v)
}
