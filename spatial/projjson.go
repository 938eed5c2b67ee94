package spatial

/*
#include <stdlib.h>
#include "crs_shim.h"
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unsafe"
)

// ErrNoProjDB is wrapped by [NewChecker] when PROJ cannot read its
// database, proj.db (Debian's proj-data package; PROJ_DATA names its
// directory).
var ErrNoProjDB = errors.New("spatial: cannot read PROJ's database (is proj.db installed?)")

// ErrUnknownEPSG is wrapped by [PROJJSON] for a code PROJ has no CRS for.
var ErrUnknownEPSG = errors.New("spatial: no CRS for this EPSG code")

// maxEPSG bounds the codes passed to PROJ: EPSG codes have at most six
// digits, and larger ones are refused before PROJ sees them.
const maxEPSG = 999_999

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
