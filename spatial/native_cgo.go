//go:build cgo

package spatial

import (
	"runtime"
	"sync"

	"github.com/twpayne/go-proj/v11"
)

// native holds a Checker's GEOS and PROJ resources (a cgo build): GEOS
// contexts for MakeValid and EngineGEOS, the PROJ context that resolves
// what the registry does not (WKT, PROJ strings, PROJJSON, other
// authorities), and Reproject's transformations.
type native struct {
	geos     geosPool
	handles  *geosHandles
	programs sync.Pool // of *geosProgram
	crs      *crsResolver
	proj     *proj.Context
	xforms   *clockCache[[2]int, *proj.PJ]
}

// cgoBuild is true: GEOS and PROJ are linked.
const cgoBuild = true

// newNative creates c's GEOS and PROJ resources. It fails with
// ErrNoProjDB when PROJ has no database.
func newNative(c *Checker) (*native, error) {
	r, err := newCRSResolver()
	if err != nil {
		return nil, err
	}
	n := &native{
		geos:     newGEOSPool(runtime.GOMAXPROCS(0)),
		handles:  newGEOSHandles(runtime.GOMAXPROCS(0)),
		programs: sync.Pool{New: func() any { return new(geosProgram) }},
		crs:      r,
		proj:     proj.NewContext(),
		xforms:   newClockCache[[2]int, *proj.PJ](c.opts.TransformCacheSize),
	}
	// Free the C resolver and GEOS handles even if the caller forgets
	// Close.
	runtime.AddCleanup(c, func(r *crsResolver) { r.close() }, r)
	runtime.AddCleanup(c, func(h *geosHandles) { h.close() }, n.handles)
	return n, nil
}

// close releases the resources; the Checker is closed.
func (n *native) close() {
	n.crs.close()
	n.xforms.clear()
	n.geos.drain()
	n.handles.close()
}
