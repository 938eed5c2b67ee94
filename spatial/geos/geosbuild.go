//go:build cgo

package geos

/*
#cgo pkg-config: geos
#cgo noescape gdlq_check
#cgo nocallback gdlq_check
#cgo noescape gdlq_build
#cgo nocallback gdlq_build
#cgo nocallback gdlq_is_valid
#cgo nocallback gdlq_destroy
#include <stdlib.h>
#include "geos_shim.h"
*/
import "C"

import (
	"bytes"
	"errors"
	"runtime"
	"sync"
	"unsafe"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/internal/geojson"
)

// The check path hands GEOS a geometry in one cgo call (geos_shim.c): the
// parser's positions, already one flat array of x, y pairs, are copied
// once into GEOS's coordinate sequences, built and checked by
// GEOSisValidReason_r without returning to Go. The structure travels as a
// short program of int64 words (the WKB type codes followed by counts),
// built from the parsed orb geometry.

// Program opcodes (geos_shim.h).
const (
	opPoint           = C.GDLQ_POINT
	opLineString      = C.GDLQ_LINESTRING
	opPolygon         = C.GDLQ_POLYGON
	opMultiPoint      = C.GDLQ_MULTIPOINT
	opMultiLineString = C.GDLQ_MULTILINESTRING
	opMultiPolygon    = C.GDLQ_MULTIPOLYGON
	opCollection      = C.GDLQ_COLLECTION
)

// geosProgram is a geometry laid out for the shim: flat positions and the
// program that nests them.
type geosProgram struct {
	pts  []orb.Point
	prog []int64
	// own holds copies of positions when the geometry's slices are not
	// consecutive runs of one array (a geometry not fresh from the parser).
	own []orb.Point
}

// maxPooledProgram is the largest program (in words) kept for reuse.
const maxPooledProgram = 1 << 16

// release drops p's references to positions and returns it to pool,
// unless its buffers grew large.
func (p *geosProgram) release(pool *sync.Pool) {
	p.pts = nil
	if cap(p.prog) > maxPooledProgram || cap(p.own) > maxPooledProgram {
		return
	}
	pool.Put(p)
}

// set lays g out, reusing the program's buffers. pts is the array g's
// slices alias (geojson.Geometry.Points), or nil.
func (p *geosProgram) set(g orb.Geometry, pts []orb.Point) {
	p.prog = p.prog[:0]
	p.pts = pts
	if pts != nil && p.emit(g, 0, true) == len(pts) {
		return
	}
	// Not one array in order: copy the positions.
	p.prog, p.own = p.prog[:0], p.own[:0]
	geojson.Components(g, func(c geojson.Component) bool {
		p.own = append(p.own, c.Points...)
		return true
	})
	p.pts = p.own
	p.emit(g, 0, false)
}

// emit appends g's program and returns the index of the position after
// its last, or -1 when check is set and g's positions are not the run of
// p.pts starting at at.
func (p *geosProgram) emit(g orb.Geometry, at int, check bool) int {
	switch g := g.(type) {
	case orb.Point:
		if check && (at >= len(p.pts) || p.pts[at] != g) {
			return -1
		}
		p.prog = append(p.prog, opPoint)
		return at + 1
	case orb.MultiPoint:
		p.prog = append(p.prog, opMultiPoint, int64(len(g)))
		return p.run(g, at, check)
	case orb.LineString:
		p.prog = append(p.prog, opLineString, int64(len(g)))
		return p.run(g, at, check)
	case orb.Ring:
		p.prog = append(p.prog, opLineString, int64(len(g)))
		return p.run(g, at, check)
	case orb.MultiLineString:
		p.prog = append(p.prog, opMultiLineString, int64(len(g)))
		for _, l := range g {
			p.prog = append(p.prog, int64(len(l)))
			if at = p.run(l, at, check); at < 0 {
				return -1
			}
		}
		return at
	case orb.Polygon:
		p.prog = append(p.prog, opPolygon)
		return p.rings(g, at, check)
	case orb.MultiPolygon:
		p.prog = append(p.prog, opMultiPolygon, int64(len(g)))
		for _, poly := range g {
			if at = p.rings(poly, at, check); at < 0 {
				return -1
			}
		}
		return at
	case orb.Collection:
		// Parsed collections are nested at most geojson.CeilingMaxNesting
		// deep, and so is this recursion; the shim refuses deeper ones.
		p.prog = append(p.prog, opCollection, int64(len(g)))
		for _, m := range g {
			if at = p.emit(m, at, check); at < 0 {
				return -1
			}
		}
		return at
	}
	// Not produced by the parser: an empty collection.
	p.prog = append(p.prog, opCollection, 0)
	return at
}

// rings appends a polygon's ring count and lengths.
func (p *geosProgram) rings(poly orb.Polygon, at int, check bool) int {
	p.prog = append(p.prog, int64(len(poly)))
	for _, r := range poly {
		p.prog = append(p.prog, int64(len(r)))
		if at = p.run(r, at, check); at < 0 {
			return -1
		}
	}
	return at
}

// run returns the index after the run s of positions starting at at, or
// -1 when check is set and s is not the run of p.pts at at.
func (p *geosProgram) run(s []orb.Point, at int, check bool) int {
	if check && len(s) > 0 && (at+len(s) > len(p.pts) || &s[0] != &p.pts[at]) {
		return -1
	}
	return at + len(s)
}

// geosHandles pools GEOS context handles for the check path: one per
// goroutine in a GEOS call, at most max idle ones kept.
type geosHandles struct {
	mu     sync.Mutex
	idle   []*C.gdlq_geos
	max    int
	closed bool
}

func newGEOSHandles(max int) *geosHandles {
	return &geosHandles{max: max}
}

var errNoGEOSHandle = errors.New("GEOS could not create a context")

func (h *geosHandles) get() (*C.gdlq_geos, error) {
	h.mu.Lock()
	if n := len(h.idle); n > 0 {
		g := h.idle[n-1]
		h.idle = h.idle[:n-1]
		h.mu.Unlock()
		return g, nil
	}
	h.mu.Unlock()
	g := C.gdlq_geos_new()
	if g == nil {
		return nil, errNoGEOSHandle
	}
	return g, nil
}

func (h *geosHandles) put(g *C.gdlq_geos) {
	h.mu.Lock()
	if !h.closed && len(h.idle) < h.max {
		h.idle = append(h.idle, g)
		g = nil
	}
	h.mu.Unlock()
	if g != nil {
		C.gdlq_geos_free(g)
	}
}

// close frees the idle handles; handles in use are freed when put back.
func (h *geosHandles) close() {
	h.mu.Lock()
	idle := h.idle
	h.idle, h.closed = nil, true
	h.mu.Unlock()
	for _, g := range idle {
		C.gdlq_geos_free(g)
	}
}

// Outcomes of geosCheck.
const (
	geosIsValid      = 1
	geosIsInvalid    = 0
	geosBuildFailed  = -1 // GEOS refused to build the geometry
	geosCheckFailed  = -2 // GEOS failed while checking it
	geosReasonBufLen = 512
)

// geosCheck builds p in GEOS with handle g and checks it: geosIsValid,
// or geosIsInvalid with GEOS's reason, or a failure with GEOS's message.
func geosCheck(g *C.gdlq_geos, p *geosProgram) (int, string) {
	var out [geosReasonBufLen]byte
	var xy *C.double
	if len(p.pts) > 0 {
		xy = (*C.double)(unsafe.Pointer(&p.pts[0][0]))
	}
	var prog *C.int64_t
	if len(p.prog) > 0 {
		prog = (*C.int64_t)(unsafe.Pointer(&p.prog[0]))
	}
	r := C.gdlq_check(g, xy, C.int64_t(len(p.pts)), prog, C.int64_t(len(p.prog)), (*C.char)(unsafe.Pointer(&out[0])), C.int(len(out)))
	runtime.KeepAlive(p)
	if r == geosIsValid {
		return geosIsValid, ""
	}
	return int(r), string(out[:max(bytes.IndexByte(out[:], 0), 0)])
}

// geosPrebuilt is a geometry built in GEOS ahead of time, on a handle of
// its own. Only BenchmarkCorpus uses it: its GEOS floor times IsValid
// alone on geometries built beforehand.
type geosPrebuilt struct {
	h    *C.gdlq_geos
	geom *C.GEOSGeometry
}

// prebuild builds p in GEOS.
func prebuild(p *geosProgram) (*geosPrebuilt, error) {
	h := C.gdlq_geos_new()
	if h == nil {
		return nil, errNoGEOSHandle
	}
	var xy *C.double
	if len(p.pts) > 0 {
		xy = (*C.double)(unsafe.Pointer(&p.pts[0][0]))
	}
	geom := C.gdlq_build(h, xy, C.int64_t(len(p.pts)), (*C.int64_t)(unsafe.Pointer(&p.prog[0])), C.int64_t(len(p.prog)))
	runtime.KeepAlive(p)
	if geom == nil {
		msg := C.GoString(&h.msg[0])
		C.gdlq_geos_free(h)
		return nil, errors.New(msg)
	}
	return &geosPrebuilt{h: h, geom: geom}, nil
}

// isValid is GEOSisValid_r.
func (b *geosPrebuilt) isValid() bool { return C.gdlq_is_valid(b.h, b.geom) == 1 }

// destroy frees the geometry and its handle.
func (b *geosPrebuilt) destroy() {
	C.gdlq_destroy(b.h, b.geom)
	C.gdlq_geos_free(b.h)
}
