//go:build cgo

package spatial

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
	"strings"
	"sync"
	"unsafe"
)

// crsResolver owns a PROJ context used only for resolving definitions.
type crsResolver struct {
	mu sync.Mutex
	p  *C.gdlq_proj
	// auths holds the authorities in PROJ's database, upper case.
	auths map[string]bool
}

// resolve asks PROJ about def, a definition the registry does not
// resolve (a cgo build), and caches the answer.
func (n *native) resolve(c *Checker, declared, def string) crsEntry {
	r := n.crs
	r.mu.Lock()
	defer r.mu.Unlock()
	// Another goroutine may have resolved it while we waited.
	if e, ok := c.crsCache.get(declared); ok {
		return e
	}
	e := r.resolveLocked(declared, def)
	if r.p != nil {
		c.crsCache.put(declared, e)
	}
	return e
}

func newCRSResolver() (*crsResolver, error) {
	p := C.gdlq_proj_new()
	if p == nil {
		return nil, errors.New("spatial: cannot create a PROJ context")
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

// resolveLocked asks PROJ about def; r.mu must be held.
func (r *crsResolver) resolveLocked(declared, def string) crsEntry {
	if r.p == nil {
		return crsEntry{fail: &CRSError{Definition: declared, Message: "checker is closed"}}
	}
	cdef := C.CString(def)
	defer C.free(unsafe.Pointer(cdef))
	var out C.gdlq_crs_info
	C.gdlq_resolve(r.p, cdef, minIdentifyConfidence, &out)
	if out.ok == 0 {
		return crsEntry{fail: &CRSError{
			Definition: declared,
			Errno:      int(out.proj_errno),
			Message:    C.GoString(&out.msg[0]),
		}}
	}
	return crsEntry{info: CRSInfo{
		EPSG:       int(out.epsg),
		Name:       C.GoString(&out.name[0]),
		Geographic: out.geographic != 0,
		LonLatTwin: out.lonlat_alias != 0,
		Identified: out.identified != 0,
	}}
}
