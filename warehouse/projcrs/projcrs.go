// Package projcrs resolves EPSG codes to PROJJSON with PROJ, for the crs
// member of GeoParquet metadata (a [warehouse.CRSResolver]).
//
// It is a separate package because it links PROJ through cgo, as geodlq's
// spatial package does: a program that imports only package warehouse
// stays pure Go and gets PROJJSON for the codes of
// [warehouse.BuiltinCRS] only.
package projcrs

/*
#cgo pkg-config: proj
#include <stdlib.h>
#include <string.h>
#include <proj.h>

// gdlq_projjson returns PROJJSON for the CRS def names, on one line, or
// NULL. It uses a context of its own, so calls may run concurrently.
static char *gdlq_projjson(const char *def) {
	PJ_CONTEXT *ctx = proj_context_create();
	if (ctx == NULL) return NULL;
	proj_log_level(ctx, PJ_LOG_NONE);
	char *out = NULL;
	PJ *pj = proj_create(ctx, def);
	if (pj != NULL) {
		if (proj_is_crs(pj)) {
			const char *opts[] = {"MULTILINE=NO", NULL};
			const char *s = proj_as_projjson(ctx, pj, opts);
			if (s != NULL) out = strdup(s);
		}
		proj_destroy(pj);
	}
	proj_context_destroy(ctx);
	return out;
}
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unsafe"
)

// ErrUnknownCode is wrapped when PROJ has no CRS for an EPSG code.
var ErrUnknownCode = errors.New("projcrs: no CRS for this EPSG code")

// maxCode bounds the codes passed to PROJ (EPSG codes have at most 6
// digits; larger ones are refused before PROJ sees them).
const maxCode = 999_999

// Resolver resolves EPSG codes with PROJ and remembers the answers. The
// zero value is ready to use; it is safe for concurrent use.
type Resolver struct {
	mu sync.Mutex
	m  map[int]result
}

type result struct {
	v   json.RawMessage
	err error
}

// New returns a Resolver.
func New() *Resolver { return &Resolver{} }

// Resolve returns the PROJJSON of EPSG:code, or an error wrapping
// [ErrUnknownCode]. Its signature is [warehouse.CRSResolver]'s.
func (r *Resolver) Resolve(code int) (json.RawMessage, error) {
	if code <= 0 || code > maxCode {
		return nil, fmt.Errorf("EPSG:%d: %w", code, ErrUnknownCode)
	}
	r.mu.Lock()
	if res, ok := r.m[code]; ok {
		r.mu.Unlock()
		return res.v, res.err
	}
	r.mu.Unlock()
	v, err := projjson("EPSG:" + strconv.Itoa(code))
	r.mu.Lock()
	if r.m == nil {
		r.m = map[int]result{}
	}
	r.m[code] = result{v, err}
	r.mu.Unlock()
	return v, err
}

func projjson(def string) (json.RawMessage, error) {
	cs := C.CString(def)
	defer C.free(unsafe.Pointer(cs))
	out := C.gdlq_projjson(cs)
	if out == nil {
		return nil, fmt.Errorf("%s: %w", def, ErrUnknownCode)
	}
	defer C.free(unsafe.Pointer(out))
	b := []byte(C.GoString(out))
	if !json.Valid(b) {
		return nil, fmt.Errorf("%s: PROJ wrote invalid JSON: %w", def, ErrUnknownCode)
	}
	return b, nil
}
