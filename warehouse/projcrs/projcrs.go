// Package projcrs resolves EPSG codes to PROJJSON with PROJ, for the crs
// member of GeoParquet metadata (a [warehouse.CRSResolver]).
//
// It is a separate package because it links PROJ through geodlq's
// spatial/proj package (cgo): a program that imports only package
// warehouse stays pure Go and gets PROJJSON for the codes of
// [warehouse.BuiltinCRS] only.
package projcrs

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/geodlq/geodlq/spatial/proj"
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
	v, err := proj.PROJJSON(code)
	if err != nil && errors.Is(err, proj.ErrUnknownEPSG) {
		err = fmt.Errorf("%w: %w", ErrUnknownCode, err)
	}
	r.mu.Lock()
	if r.m == nil {
		r.m = map[int]result{}
	}
	r.m[code] = result{v, err}
	r.mu.Unlock()
	return v, err
}
