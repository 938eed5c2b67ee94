package offloadtest

import (
	"bytes"
	"strconv"
)

// GeometryEvent returns a deterministic GeoJSON Feature-like event of at
// least size bytes whose "geometry" member is a MultiPolygon of
// pseudo-random WGS84 positions (256 per ring, six decimals), the shape of
// a continent-scale geometry. The same size always yields the same bytes;
// nothing is read from disk.
//
//	{"event_id":"evt-big","crs":"EPSG:4326","geometry":{"type":"MultiPolygon","coordinates":[…]},"properties":{…}}
func GeometryEvent(size int) []byte {
	var b bytes.Buffer
	b.Grow(size + 8<<10)
	b.WriteString(`{"event_id":"evt-big","crs":"EPSG:4326","geometry":{"type":"MultiPolygon","coordinates":[`)
	x := uint64(0x9E3779B97F4A7C15)
	var num []byte
	for poly := 0; b.Len() < size; poly++ {
		if poly > 0 {
			b.WriteByte(',')
		}
		b.WriteString("[[")
		var first [2]float64
		for k := 0; k < 256; k++ {
			if k > 0 {
				b.WriteByte(',')
			}
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			p := [2]float64{float64(x%360_000_000)/1e6 - 180, float64(x>>32%180_000_000)/1e6 - 90}
			if k == 0 {
				first = p
			}
			if k == 255 {
				p = first // close the ring
			}
			b.WriteByte('[')
			num = strconv.AppendFloat(num[:0], p[0], 'f', 6, 64)
			b.Write(num)
			b.WriteByte(',')
			num = strconv.AppendFloat(num[:0], p[1], 'f', 6, 64)
			b.Write(num)
			b.WriteByte(']')
		}
		b.WriteString("]]")
	}
	b.WriteString(`]},"properties":{"name":"generated","source":"offloadtest"}}`)
	return b.Bytes()
}
