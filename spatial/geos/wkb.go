//go:build cgo

package geos

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/paulmach/orb"
)

// WKB geometry type codes.
const (
	wkbPoint              = 1
	wkbLineString         = 2
	wkbPolygon            = 3
	wkbMultiPoint         = 4
	wkbMultiLineString    = 5
	wkbMultiPolygon       = 6
	wkbGeometryCollection = 7
)

// appendWKB appends g as little-endian 2D WKB. It is how geometries reach
// GEOS: one cgo call to GEOS's WKB reader instead of one per ring or point,
// and no [][]float64 per position.
func appendWKB(b []byte, g orb.Geometry) []byte {
	header := func(b []byte, t uint32) []byte {
		return binary.LittleEndian.AppendUint32(append(b, 1), t)
	}
	switch g := g.(type) {
	case orb.Point:
		b = header(b, wkbPoint)
		b = appendWKBPoint(b, g)
	case orb.MultiPoint:
		b = header(b, wkbMultiPoint)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(g)))
		for _, p := range g {
			b = header(b, wkbPoint)
			b = appendWKBPoint(b, p)
		}
	case orb.LineString:
		b = header(b, wkbLineString)
		b = appendWKBPoints(b, g)
	case orb.Ring:
		b = header(b, wkbLineString)
		b = appendWKBPoints(b, g)
	case orb.MultiLineString:
		b = header(b, wkbMultiLineString)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(g)))
		for _, l := range g {
			b = header(b, wkbLineString)
			b = appendWKBPoints(b, l)
		}
	case orb.Polygon:
		b = header(b, wkbPolygon)
		b = appendWKBRings(b, g)
	case orb.MultiPolygon:
		b = header(b, wkbMultiPolygon)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(g)))
		for _, p := range g {
			b = header(b, wkbPolygon)
			b = appendWKBRings(b, p)
		}
	case orb.Collection:
		b = header(b, wkbGeometryCollection)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(g)))
		for _, m := range g {
			b = appendWKB(b, m)
		}
	default:
		// Not produced by the parser; an empty collection keeps GEOS happy.
		b = header(b, wkbGeometryCollection)
		b = binary.LittleEndian.AppendUint32(b, 0)
	}
	return b
}

func appendWKBPoint(b []byte, p orb.Point) []byte {
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p[0]))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(p[1]))
}

func appendWKBPoints(b []byte, pts []orb.Point) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(pts)))
	for _, p := range pts {
		b = appendWKBPoint(b, p)
	}
	return b
}

func appendWKBRings(b []byte, p orb.Polygon) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
	for _, r := range p {
		b = appendWKBPoints(b, r)
	}
	return b
}

var errWKB = errors.New("malformed WKB from GEOS")

// wkbReader decodes the WKB GEOS writes (either byte order, ISO or EWKB
// dimension flags); only x and y are kept.
type wkbReader struct {
	b     []byte
	pos   int
	order binary.ByteOrder
	depth int
}

// decodeWKB decodes one WKB geometry into orb values. Empty points (NaN
// coordinates in WKB) are dropped from multi-geometries and collections;
// a lone empty point decodes as an empty collection.
func decodeWKB(b []byte) (orb.Geometry, error) {
	r := &wkbReader{b: b}
	g, err := r.geometry()
	if err != nil {
		return nil, err
	}
	if r.pos != len(b) {
		return nil, fmt.Errorf("%w: %d trailing bytes", errWKB, len(b)-r.pos)
	}
	if g == nil {
		return orb.Collection{}, nil
	}
	return g, nil
}

func (r *wkbReader) u32() (uint32, error) {
	if r.pos+4 > len(r.b) {
		return 0, errWKB
	}
	v := r.order.Uint32(r.b[r.pos:])
	r.pos += 4
	return v, nil
}

func (r *wkbReader) f64() (float64, error) {
	if r.pos+8 > len(r.b) {
		return 0, errWKB
	}
	v := math.Float64frombits(r.order.Uint64(r.b[r.pos:]))
	r.pos += 8
	return v, nil
}

// count reads an element count and checks it against the bytes left, each
// element taking at least min bytes.
func (r *wkbReader) count(min int) (int, error) {
	n, err := r.u32()
	if err != nil {
		return 0, err
	}
	if int64(n)*int64(min) > int64(len(r.b)-r.pos) {
		return 0, errWKB
	}
	return int(n), nil
}

func (r *wkbReader) point(dims int) (orb.Point, error) {
	var p orb.Point
	for i := range dims {
		v, err := r.f64()
		if err != nil {
			return p, err
		}
		if i < 2 {
			p[i] = v
		}
	}
	return p, nil
}

func (r *wkbReader) points(dims int) ([]orb.Point, error) {
	n, err := r.count(8 * dims)
	if err != nil {
		return nil, err
	}
	pts := make([]orb.Point, n)
	for i := range pts {
		if pts[i], err = r.point(dims); err != nil {
			return nil, err
		}
	}
	return pts, nil
}

func (r *wkbReader) rings(dims int) (orb.Polygon, error) {
	n, err := r.count(4)
	if err != nil {
		return nil, err
	}
	poly := make(orb.Polygon, n)
	for i := range poly {
		pts, err := r.points(dims)
		if err != nil {
			return nil, err
		}
		poly[i] = orb.Ring(pts)
	}
	return poly, nil
}

// geometry decodes one geometry; nil means an empty point.
func (r *wkbReader) geometry() (orb.Geometry, error) {
	if r.depth > 64 {
		return nil, errWKB
	}
	r.depth++
	defer func() { r.depth-- }()
	if r.pos >= len(r.b) {
		return nil, errWKB
	}
	switch r.b[r.pos] {
	case 0:
		r.order = binary.BigEndian
	case 1:
		r.order = binary.LittleEndian
	default:
		return nil, errWKB
	}
	r.pos++
	t, err := r.u32()
	if err != nil {
		return nil, err
	}
	dims := 2
	// EWKB flags.
	if t&0x80000000 != 0 {
		dims++
	}
	if t&0x40000000 != 0 {
		dims++
	}
	if t&0x20000000 != 0 {
		if _, err := r.u32(); err != nil { // SRID
			return nil, err
		}
	}
	t &= 0x0fffffff
	// ISO dimension offsets.
	switch t / 1000 {
	case 1, 2:
		dims = 3
	case 3:
		dims = 4
	}
	order := r.order
	switch t % 1000 {
	case wkbPoint:
		p, err := r.point(dims)
		if err != nil {
			return nil, err
		}
		if math.IsNaN(p[0]) && math.IsNaN(p[1]) {
			return nil, nil
		}
		return p, nil
	case wkbLineString:
		pts, err := r.points(dims)
		return orb.LineString(pts), err
	case wkbPolygon:
		return r.rings(dims)
	case wkbMultiPoint, wkbMultiLineString, wkbMultiPolygon, wkbGeometryCollection:
		n, err := r.count(5)
		if err != nil {
			return nil, err
		}
		members := make([]orb.Geometry, 0, n)
		for range n {
			m, err := r.geometry()
			if err != nil {
				return nil, err
			}
			r.order = order
			if m != nil {
				members = append(members, m)
			}
		}
		return assemble(t%1000, members)
	}
	return nil, fmt.Errorf("%w: geometry type %d", errWKB, t)
}

// assemble builds a multi-geometry from decoded members.
func assemble(t uint32, members []orb.Geometry) (orb.Geometry, error) {
	switch t {
	case wkbMultiPoint:
		mp := make(orb.MultiPoint, 0, len(members))
		for _, m := range members {
			p, ok := m.(orb.Point)
			if !ok {
				return nil, errWKB
			}
			mp = append(mp, p)
		}
		return mp, nil
	case wkbMultiLineString:
		mls := make(orb.MultiLineString, 0, len(members))
		for _, m := range members {
			l, ok := m.(orb.LineString)
			if !ok {
				return nil, errWKB
			}
			mls = append(mls, l)
		}
		return mls, nil
	case wkbMultiPolygon:
		mp := make(orb.MultiPolygon, 0, len(members))
		for _, m := range members {
			p, ok := m.(orb.Polygon)
			if !ok {
				return nil, errWKB
			}
			mp = append(mp, p)
		}
		return mp, nil
	}
	return orb.Collection(members), nil
}
