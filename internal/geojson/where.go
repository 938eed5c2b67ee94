package geojson

import (
	"strconv"
	"strings"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
)

// Where says where a fault is, in words: "(0.5 0.5) ring 0 segment 0-1",
// the location (when it has two coordinates) then the fault's part, ring
// and vertex or segment indexes, each left out when it is -1 (none). It
// is "" when there is neither. geodlq list, show and check print it, and
// the console's detail panel shows it, so that an operator reads one
// wording everywhere.
func Where(loc []float64, f *classify.Fault) string {
	var s []string
	if len(loc) == 2 {
		s = append(s, "("+FormatXY(orb.Point{loc[0], loc[1]})+")")
	}
	if f != nil {
		if f.Part >= 0 {
			s = append(s, "part "+strconv.Itoa(f.Part))
		}
		if f.Ring >= 0 {
			s = append(s, "ring "+strconv.Itoa(f.Ring))
		}
		if f.OnSegment {
			s = append(s, "segment "+strconv.Itoa(f.Vertex)+"-"+strconv.Itoa(f.Vertex+1))
		} else {
			s = append(s, "vertex "+strconv.Itoa(f.Vertex))
		}
	}
	return strings.Join(s, " ")
}
