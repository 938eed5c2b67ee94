package warehouse

import (
	"encoding/binary"
	"math"
)

// WKB geometry type codes (OGC Simple Features, 2D).
const (
	wkbPoint   = 1
	wkbPolygon = 3
)

// appendWKBPoint appends the little-endian WKB of the point (x, y).
func appendWKBPoint(b []byte, x, y float64) []byte {
	b = append(b, 1) // little endian
	b = binary.LittleEndian.AppendUint32(b, wkbPoint)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(y))
}

// appendWKBBox appends the little-endian WKB of the rectangle bb as a
// polygon of one counterclockwise ring: (xmin ymin, xmax ymin, xmax ymax,
// xmin ymax, xmin ymin).
func appendWKBBox(b []byte, bb BBox) []byte {
	b = append(b, 1)
	b = binary.LittleEndian.AppendUint32(b, wkbPolygon)
	b = binary.LittleEndian.AppendUint32(b, 1) // rings
	b = binary.LittleEndian.AppendUint32(b, 5) // points
	for _, p := range [5][2]float64{{bb.XMin, bb.YMin}, {bb.XMax, bb.YMin}, {bb.XMax, bb.YMax}, {bb.XMin, bb.YMax}, {bb.XMin, bb.YMin}} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p[0]))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p[1]))
	}
	return b
}

// wkbPointXY reads the coordinates of a point written by appendWKBPoint.
func wkbPointXY(b []byte) (x, y float64) {
	return math.Float64frombits(binary.LittleEndian.Uint64(b[5:13])), math.Float64frombits(binary.LittleEndian.Uint64(b[13:21]))
}
