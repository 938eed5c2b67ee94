package geojson

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
)

// Reasons written by this package for faults GEOS does not report (or
// cannot be shown, because building the geometry would fail or silently
// repair it). They follow GEOS's "Reason[x y]" form so that
// [classify.KindOfReason] and [ParseLocation] work on them too.
const (
	ReasonEmpty             = "Empty geometry"
	ReasonInvalidCoordinate = "Invalid Coordinate"
	ReasonRingNotClosed     = "Ring is not closed"
	ReasonTooFewPoints      = "Too few points in geometry component"
	ReasonOutOfRange        = "Coordinate outside geographic range"
)

// Validate checks what GEOS cannot be shown: that g has positions, that
// every coordinate is finite, that every ring is closed and has at least
// four positions, and that no LineString has exactly one. It returns the
// first fault in document order as an invalid_geometry error at the
// topology_validation stage, or nil. A geometry that passes can be built
// by GEOS without error or silent repair.
//
// For a non-finite coordinate (NaN, ±Infinity) the detail's Location is
// nil, because such values cannot be encoded in JSON; the Reason spells
// the position out ("Invalid Coordinate[NaN 1]") and Fault points at it.
func Validate(g Geometry) *classify.Error {
	if g.Geom == nil || g.Vertices == 0 {
		return newInvalid(g, ReasonEmpty, classify.KindEmpty, nil, nil)
	}
	if err := CheckFinite(g); err != nil {
		return err
	}
	return checkComponents(g)
}

// checkComponents is Validate's check of each ring and line, in document
// order.
func checkComponents(g Geometry) *classify.Error {
	var err *classify.Error
	Components(g.Geom, func(c Component) bool {
		n := len(c.Points)
		switch {
		case c.Kind == KindRing && n == 0:
			err = newInvalid(g, ReasonTooFewPoints, classify.KindTooFewPoints, nil, &classify.Fault{Part: c.Part, Ring: c.Ring, Vertex: -1})
		case c.Kind == KindRing && c.Points[0] != c.Points[n-1]:
			err = newInvalidAt(g, ReasonRingNotClosed, classify.KindRingNotClosed, c, 0)
		case c.Kind == KindRing && n < 4:
			err = newInvalidAt(g, ReasonTooFewPoints, classify.KindTooFewPoints, c, 0)
		case c.Kind == KindLine && n == 1:
			err = newInvalidAt(g, ReasonTooFewPoints, classify.KindTooFewPoints, c, 0)
		}
		return err == nil
	})
	return err
}

// CheckFinite checks that every coordinate of g is a finite number. It
// returns the first NaN or infinite one, in document order, as an
// invalid_geometry error (classify.KindInvalidCoordinate) at the
// topology_validation stage, or nil. Location is nil (see [Validate]).
func CheckFinite(g Geometry) *classify.Error {
	var err *classify.Error
	Components(g.Geom, func(c Component) bool {
		for i, p := range c.Points {
			if !finite(p) {
				err = newInvalid(g, ReasonInvalidCoordinate+"["+FormatXY(p)+"]", classify.KindInvalidCoordinate, nil, c.Fault(i))
				return false
			}
		}
		return true
	})
	return err
}

// CheckRange checks that every finite position lies within longitude
// [-180, 180] and latitude [-90, 90], as it must in a geographic CRS
// written in GeoJSON's lon/lat order. It returns the first offending
// position as a crs_mismatch error (classify.KindOutOfRange) at the
// crs_transform stage, or nil. Non-finite coordinates are left to
// [Validate].
func CheckRange(g Geometry) *classify.Error {
	var err *classify.Error
	Components(g.Geom, func(c Component) bool {
		for i, p := range c.Points {
			if finite(p) && (math.Abs(p[0]) > 180 || math.Abs(p[1]) > 90) {
				loc := p
				err = &classify.Error{
					Class: classify.ClassCRSMismatch,
					Stage: classify.StageCRSTransform,
					Geometry: &classify.GeometryDetail{
						Reason:       ReasonOutOfRange + "[" + FormatXY(p) + "]",
						Kind:         classify.KindOutOfRange,
						Location:     &loc,
						Fault:        c.Fault(i),
						GeometryType: typeName(g),
						VertexCount:  g.Vertices,
					},
				}
				err.Err = errors.New("coordinates are not longitude/latitude: " + err.Geometry.Reason)
				return false
			}
		}
		return true
	})
	return err
}

func newInvalidAt(g Geometry, reason string, kind classify.ReasonKind, c Component, i int) *classify.Error {
	p := c.Points[i]
	return newInvalid(g, reason+"["+FormatXY(p)+"]", kind, &p, c.Fault(i))
}

func newInvalid(g Geometry, reason string, kind classify.ReasonKind, loc *orb.Point, f *classify.Fault) *classify.Error {
	return &classify.Error{
		Class: classify.ClassInvalidGeometry,
		Stage: classify.StageTopologyValidation,
		Geometry: &classify.GeometryDetail{
			Reason:       reason,
			Kind:         kind,
			Location:     loc,
			Fault:        f,
			GeometryType: typeName(g),
			VertexCount:  g.Vertices,
		},
		Err: errors.New("invalid geometry: " + reason),
	}
}

func typeName(g Geometry) string {
	if g.Geom == nil {
		return ""
	}
	return g.Geom.GeoJSONType()
}

func finite(p orb.Point) bool {
	return !math.IsNaN(p[0]) && !math.IsNaN(p[1]) && !math.IsInf(p[0], 0) && !math.IsInf(p[1], 0)
}

// FormatXY formats p as "x y", each number in its shortest exact form;
// non-finite values are written NaN, Infinity and -Infinity.
func FormatXY(p orb.Point) string {
	b := make([]byte, 0, 48)
	b = appendCoord(b, p[0])
	b = append(b, ' ')
	b = appendCoord(b, p[1])
	return string(b)
}

func appendCoord(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, 1):
		return append(b, "Infinity"...)
	case math.IsInf(v, -1):
		return append(b, "-Infinity"...)
	}
	return AppendFloat(b, v)
}

// ParseLocation extracts the point from a reason of the form
// "Self-intersection[0.5 0.5]", as written by GEOS and by this package. It
// reports false when there is no such suffix or a coordinate is not a
// finite number.
func ParseLocation(reason string) (orb.Point, bool) {
	if !strings.HasSuffix(reason, "]") {
		return orb.Point{}, false
	}
	i := strings.LastIndexByte(reason, '[')
	if i < 0 {
		return orb.Point{}, false
	}
	fields := strings.Fields(reason[i+1 : len(reason)-1])
	if len(fields) < 2 {
		return orb.Point{}, false
	}
	x, err1 := strconv.ParseFloat(fields[0], 64)
	y, err2 := strconv.ParseFloat(fields[1], 64)
	p := orb.Point{x, y}
	if err1 != nil || err2 != nil || !finite(p) {
		return orb.Point{}, false
	}
	return p, true
}

// Locate finds where in g the point p (typically parsed from a GEOS reason)
// lies: the first position, in document order, equal to p within a
// relative tolerance of 1e-12 (GEOS prints 15 significant digits); failing
// that, the first segment of a ring or line that p lies on within a
// relative tolerance of 1e-10, reported with OnSegment set and Vertex at
// the segment's first position. It returns nil when p is neither.
func Locate(g orb.Geometry, p orb.Point) *classify.Fault {
	if !finite(p) {
		return nil
	}
	scale := math.Max(math.Abs(p[0]), math.Abs(p[1]))
	vtol := 1e-12 * scale
	var found *classify.Fault
	Components(g, func(c Component) bool {
		for i, q := range c.Points {
			if math.Abs(q[0]-p[0]) <= vtol && math.Abs(q[1]-p[1]) <= vtol {
				found = c.Fault(i)
				return false
			}
		}
		return true
	})
	if found != nil {
		return found
	}
	Components(g, func(c Component) bool {
		if c.Kind == KindPoints {
			return true
		}
		for i := 0; i+1 < len(c.Points); i++ {
			a, b := c.Points[i], c.Points[i+1]
			s := math.Max(scale, math.Max(math.Max(math.Abs(a[0]), math.Abs(a[1])), math.Max(math.Abs(b[0]), math.Abs(b[1]))))
			if segmentDistance(p, a, b) <= 1e-10*s {
				found = c.Fault(i)
				found.OnSegment = true
				return false
			}
		}
		return true
	})
	return found
}

// segmentDistance is the Euclidean distance from p to the segment ab.
func segmentDistance(p, a, b orb.Point) float64 {
	dx, dy := b[0]-a[0], b[1]-a[1]
	l2 := dx*dx + dy*dy
	t := 0.0
	if l2 > 0 {
		t = ((p[0]-a[0])*dx + (p[1]-a[1])*dy) / l2
		t = math.Max(0, math.Min(1, t))
	}
	return math.Hypot(p[0]-(a[0]+t*dx), p[1]-(a[1]+t*dy))
}
