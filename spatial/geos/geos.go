//go:build cgo

package geos

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/paulmach/orb"
	"github.com/twpayne/go-geos"

	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/spatial"
)

// geosValid is GEOS's IsValidReason for a valid geometry.
const geosValid = "Valid Geometry"

// Engine is GEOS, for a [spatial.Checker]'s Options.GEOS: the check path
// of spatial.EngineGEOS (one cgo call builds the geometry from the
// parser's positions and checks it) and MakeValid. It is safe for
// concurrent use: it pools GEOS contexts, one per concurrent caller.
type Engine struct {
	geos     geosPool
	handles  *geosHandles
	programs sync.Pool // of *geosProgram
}

var _ spatial.GEOS = (*Engine)(nil)

// New returns a GEOS engine. In a build without cgo it fails with an
// error wrapping [spatial.ErrNeedsCGO].
func New() (*Engine, error) {
	e := &Engine{
		geos:     newGEOSPool(runtime.GOMAXPROCS(0)),
		handles:  newGEOSHandles(runtime.GOMAXPROCS(0)),
		programs: sync.Pool{New: func() any { return new(geosProgram) }},
	}
	// Free the C handles even if the caller forgets Close.
	runtime.AddCleanup(e, func(h *geosHandles) { h.close() }, e.handles)
	return e, nil
}

// Close releases the engine's idle GEOS contexts; calls in flight finish
// and free theirs. It is idempotent and returns nil. An engine used after
// Close still works, creating contexts as it needs them.
func (e *Engine) Close() error {
	e.geos.drain()
	e.handles.close()
	return nil
}

// Version returns the version of GEOS whose headers the engine was built
// with, "major.minor.patch" ("3.11.1"); "" in a build without cgo.
func Version() string {
	return fmt.Sprintf("%d.%d.%d", geos.VersionMajor, geos.VersionMinor, geos.VersionPatch)
}

// geosPool hands out GEOS contexts. A go-geos Context serialises every call
// on its own mutex, so sharing one between goroutines would make them take
// turns; a pool gives each concurrent caller its own. Idle contexts beyond
// the pool's capacity are dropped and finalised by go-geos.
type geosPool struct {
	ch chan *geos.Context
}

func newGEOSPool(size int) geosPool {
	return geosPool{ch: make(chan *geos.Context, max(size, 1))}
}

func (p geosPool) get() *geos.Context {
	select {
	case c := <-p.ch:
		return c
	default:
		return geos.NewContext()
	}
}

func (p geosPool) put(c *geos.Context) {
	select {
	case p.ch <- c:
	default:
	}
}

func (p geosPool) drain() {
	for {
		select {
		case <-p.ch:
		default:
			return
		}
	}
}

// withGEOS runs fn with a pooled context, turning a panic (GEOS raised an
// exception; go-geos panics rather than returning errors from most calls)
// into an error. A context that panicked is not returned to the pool.
func (e *Engine) withGEOS(fn func(*geos.Context) error) (err error) {
	ctx := e.geos.get()
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("GEOS failed: %v", v)
			return
		}
		e.geos.put(ctx)
	}()
	return fn(ctx)
}

// newGeom builds g in ctx through WKB. The caller destroys the result.
//
// A multi-part geometry is built part by part, through one reused buffer,
// and assembled in GEOS: the WKB of a large MultiPolygon is as large as its
// positions, and go-geos copies it into C memory before reading it, so
// building it whole would hold two transient copies of the geometry on top
// of GEOS's own.
func newGeom(ctx *geos.Context, g orb.Geometry) (*geos.Geom, error) {
	var parts []orb.Geometry
	var typ geos.TypeID
	switch g := g.(type) {
	case orb.MultiPolygon:
		typ = geos.TypeIDMultiPolygon
		for _, p := range g {
			parts = append(parts, p)
		}
	case orb.MultiLineString:
		typ = geos.TypeIDMultiLineString
		for _, l := range g {
			parts = append(parts, l)
		}
	case orb.Collection:
		typ, parts = geos.TypeIDGeometryCollection, g
	}
	if len(parts) < 2 {
		return newGeomWKB(ctx, appendWKB(make([]byte, 0, wkbSize(g)), g))
	}
	geoms := make([]*geos.Geom, 0, len(parts))
	var buf []byte
	for _, p := range parts {
		buf = appendWKB(buf[:0], p)
		geom, err := newGeomWKB(ctx, buf)
		if err != nil {
			for _, done := range geoms {
				done.Destroy()
			}
			return nil, err
		}
		geoms = append(geoms, geom)
	}
	return ctx.NewCollection(typ, geoms), nil
}

// newGeomWKB builds the geometry of wkb in ctx.
func newGeomWKB(ctx *geos.Context, wkb []byte) (*geos.Geom, error) {
	geom, err := ctx.NewGeomFromWKB(wkb)
	if err == nil && geom == nil {
		err = errors.New("GEOS returned no geometry")
	}
	return geom, err
}

// wkbSize estimates the WKB size of g to size the buffer once.
func wkbSize(g orb.Geometry) int {
	n := 64
	geojson.Components(g, func(c geojson.Component) bool {
		n += 16*len(c.Points) + 16
		return true
	})
	return n
}

// IsValidReason checks g with GEOSisValidReason_r, building it in GEOS
// from pts (or g's positions) and checking it in one cgo call
// (geosbuild.go). See [spatial.GEOS].
func (e *Engine) IsValidReason(g orb.Geometry, pts []orb.Point) (string, error) {
	h, err := e.handles.get()
	if err != nil {
		return "", err
	}
	p := e.programs.Get().(*geosProgram)
	p.set(g, pts)
	code, msg := geosCheck(h, p)
	p.release(&e.programs)
	e.handles.put(h)
	switch code {
	case geosIsValid:
		return "", nil
	case geosIsInvalid:
		return msg, nil
	case geosBuildFailed:
		return "", &spatial.GEOSRefusedError{Message: msg}
	}
	return "", errors.New(msg)
}

// MakeValid checks g and repairs it with GEOS's MakeValid ("structure"
// method, collapsed components discarded). See [spatial.GEOS].
func (e *Engine) MakeValid(g orb.Geometry) (reason string, repaired orb.Geometry, err error) {
	err = e.withGEOS(func(ctx *geos.Context) error {
		geom, err := newGeom(ctx, g)
		if err != nil {
			return fmt.Errorf("GEOS refused the prepared geometry: %w", err)
		}
		defer geom.Destroy()
		r := geom.IsValidReason()
		if r == geosValid {
			return nil
		}
		fixed := geom.MakeValidWithParams(geos.MakeValidStructure, geos.MakeValidDiscardCollapsed)
		if fixed == nil {
			return errors.New("GEOS MakeValid returned no geometry")
		}
		defer fixed.Destroy()
		out, err := decodeWKB(fixed.ToWKB())
		if err != nil {
			return err
		}
		reason, repaired = r, out
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	return reason, repaired, nil
}
