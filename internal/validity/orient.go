package validity

import "github.com/paulmach/orb"

// Robust orientation, as GEOS 3.11 computes it (CGAlgorithmsDD): a
// floating-point filter due to Shewchuk decides the easy cases; the rest are
// decided in double-double arithmetic. Both are reproduced operation for
// operation, so that near-collinear points get GEOS's answer, not merely a
// correct one.
//
// Every product is converted to float64 explicitly before it is added to
// anything: the Go specification allows a compiler to fuse x*y+z into one
// rounding (arm64 does), which would change the results of the filter and
// break the error-free transformations double-double arithmetic relies on.
// GEOS as built for amd64 rounds every operation.

// The orientation indexes.
const (
	clockwise        = -1
	collinear        = 0
	counterClockwise = 1
)

// ddSplit is Dekker's splitter for IEEE doubles, 2^27+1.
const ddSplit = 134217729.0

// dd is a double-double number: hi + lo, with |lo| ≤ ulp(hi)/2.
type dd struct{ hi, lo float64 }

// ddAdd returns x + (yhi, ylo).
func ddAdd(x dd, yhi, ylo float64) dd {
	S := x.hi + yhi
	T := x.lo + ylo
	e := S - x.hi
	f := T - x.lo
	s := S - e
	t := T - f
	s = (yhi - e) + (x.hi - s)
	t = (ylo - f) + (x.lo - t)
	e = s + T
	H := S + e
	h := e + (S - H)
	e = t + h
	zhi := H + e
	zlo := e + (H - zhi)
	return dd{zhi, zlo}
}

// ddMul returns x × (yhi, ylo).
func ddMul(x dd, yhi, ylo float64) dd {
	C := float64(ddSplit * x.hi)
	hx := C - x.hi
	c := float64(ddSplit * yhi)
	hx = C - hx
	tx := x.hi - hx
	hy := c - yhi
	C = float64(x.hi * yhi)
	hy = c - hy
	ty := yhi - hy
	c = ((((float64(hx*hy) - C) + float64(hx*ty)) + float64(tx*hy)) + float64(tx*ty)) + (float64(x.hi*ylo) + float64(x.lo*yhi))
	zhi := C + c
	hx = C - zhi
	zlo := c + hx
	return dd{zhi, zlo}
}

// signum is GEOS's orientation(double): NaN is collinear.
func signum(x float64) int {
	if x < 0 {
		return clockwise
	}
	if x > 0 {
		return counterClockwise
	}
	return collinear
}

// orientation returns the orientation index of q relative to the directed
// segment p1→p2: 1 to the left (counter-clockwise), -1 to the right, 0
// collinear. It is GEOS's Orientation::index for finite coordinates.
func orientation(p1, p2, q orb.Point) int {
	pax, pay, pbx, pby, pcx, pcy := p1[0], p1[1], p2[0], p2[1], q[0], q[1]
	detleft := float64((pax - pcx) * (pby - pcy))
	detright := float64((pay - pcy) * (pbx - pcx))
	det := detleft - detright
	var detsum float64
	switch {
	case detleft > 0:
		if detright <= 0 {
			return signum(det)
		}
		detsum = detleft + detright
	case detleft < 0:
		if detright >= 0 {
			return signum(det)
		}
		detsum = -detleft - detright
	default:
		return signum(det)
	}
	errbound := float64(1e-15 * detsum)
	if det >= errbound || -det >= errbound {
		return signum(det)
	}
	return orientationDD(p1, p2, q)
}

// orientationDD is the double-double determinant of the filter's failures.
func orientationDD(p1, p2, q orb.Point) int {
	dx1 := ddAdd(dd{p2[0], 0}, -p1[0], 0)
	dy1 := ddAdd(dd{p2[1], 0}, -p1[1], 0)
	dx2 := ddAdd(dd{q[0], 0}, -p2[0], 0)
	dy2 := ddAdd(dd{q[1], 0}, -p2[1], 0)
	m1 := ddMul(dx1, dy2.hi, dy2.lo)
	m2 := ddMul(dy1, dx2.hi, dx2.lo)
	d := ddAdd(m1, -m2.hi, -m2.lo)
	switch {
	case d.hi < 0 || (d.hi == 0 && d.lo < 0):
		return clockwise
	case d.hi > 0 || (d.hi == 0 && d.lo > 0):
		return counterClockwise
	}
	return collinear
}
