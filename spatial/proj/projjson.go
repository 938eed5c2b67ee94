//go:build cgo

package proj

/*
#include <stdlib.h>
#include "crs_shim.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unsafe"
)

// PROJJSON returns PROJ's PROJJSON description of the CRS EPSG:code, on
// one line: the form GeoParquet's and STAC's crs members take. Each call
// asks PROJ's database (a fraction of a millisecond); callers that resolve
// the same codes repeatedly should cache. It is safe for concurrent use.
func PROJJSON(code int) (json.RawMessage, error) {
	if code <= 0 || code > maxEPSG {
		return nil, fmt.Errorf("EPSG:%d: %w", code, ErrUnknownEPSG)
	}
	def := "EPSG:" + strconv.Itoa(code)
	cs := C.CString(def)
	defer C.free(unsafe.Pointer(cs))
	out := C.gdlq_projjson(cs)
	if out == nil {
		return nil, fmt.Errorf("%s: %w", def, ErrUnknownEPSG)
	}
	defer C.free(unsafe.Pointer(out))
	b := []byte(C.GoString(out))
	if !json.Valid(b) {
		return nil, fmt.Errorf("%s: PROJ wrote invalid JSON: %w", def, ErrUnknownEPSG)
	}
	return b, nil
}

// WKT returns PROJ's WKT of the CRS def (such as "EPSG:4326" or
// "OGC:CRS84"), of PROJ's PJ_WKT_TYPE typ (0 WKT2_2015, 1 its simplified
// form, 2 WKT2_2019, 3 its simplified form, 4 WKT1_GDAL, 5 WKT1_ESRI), on
// one line; ok is false when PROJ has no such CRS. Each call asks PROJ's
// database; it is safe for concurrent use.
func WKT(def string, typ int) (string, bool) {
	cs := C.CString(def)
	defer C.free(unsafe.Pointer(cs))
	out := C.gdlq_wkt(cs, C.int(typ))
	if out == nil {
		return "", false
	}
	defer C.free(unsafe.Pointer(out))
	return C.GoString(out), true
}
