//go:build cgo

package proj

/*
#cgo pkg-config: proj
#cgo noescape gdlq_resolve
#cgo nocallback gdlq_resolve
#include <stdlib.h>
#include "crs_shim.h"
*/
import "C"

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/geodlq/geodlq/spatial"
)

// crsResolver owns a PROJ context used only for resolving definitions.
type crsResolver struct {
	mu sync.Mutex
	p  *C.gdlq_proj
	// auths holds the authorities in PROJ's database, upper case.
	auths map[string]bool
}

// minIdentifyConfidence is the proj_identify confidence (0-100) needed to
// take an EPSG code for a definition that does not carry one. A PROJ
// string for WGS 84 lon/lat identifies as EPSG:4326 at 70 (the axis order
// differs).
const minIdentifyConfidence = 70

// errClosed is what a closed PROJ's ResolveCRS returns.
var errClosed = errors.New("proj: PROJ is closed")

func newCRSResolver() (*crsResolver, error) {
	p := C.gdlq_proj_new()
	if p == nil {
		return nil, errors.New("proj: cannot create a PROJ context")
	}
	buf := make([]byte, 4096)
	if C.gdlq_authorities(p, (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf))) != 0 {
		C.gdlq_proj_free(p)
		return nil, ErrNoProjDB
	}
	auths := map[string]bool{}
	for a := range strings.SplitSeq(C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), "\n") {
		if a != "" {
			auths[strings.ToUpper(a)] = true
		}
	}
	return &crsResolver{p: p, auths: auths}, nil
}

func (r *crsResolver) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p != nil {
		C.gdlq_proj_free(r.p)
		r.p = nil
	}
}

// Authorities returns the authorities in PROJ's database ("EPSG",
// "ESRI", "IAU_2015", ...), upper case, sorted.
func (p *PROJ) Authorities() []string {
	return slices.Sorted(maps.Keys(p.crs.auths))
}

// resolve asks PROJ about def.
func (r *crsResolver) resolve(def string) (spatial.CRSInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p == nil {
		return spatial.CRSInfo{}, errClosed
	}
	cdef := C.CString(def)
	defer C.free(unsafe.Pointer(cdef))
	var out C.gdlq_crs_info
	C.gdlq_resolve(r.p, cdef, minIdentifyConfidence, &out)
	if out.ok == 0 {
		return spatial.CRSInfo{}, &spatial.CRSError{
			Errno:   int(out.proj_errno),
			Message: C.GoString(&out.msg[0]),
		}
	}
	return spatial.CRSInfo{
		EPSG:       int(out.epsg),
		Name:       C.GoString(&out.name[0]),
		Geographic: out.geographic != 0,
		LonLatTwin: out.lonlat_alias != 0,
		Identified: out.identified != 0,
	}, nil
}
