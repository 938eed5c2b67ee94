//go:build !cgo

package proj

import (
	"encoding/json"
	"fmt"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/spatial"
)

// PROJ is PROJ, for a [spatial.Checker]'s Options.ResolveCRS and
// Options.Reprojector. A build without cgo links no PROJ: [New] fails, and
// a PROJ's methods fail with an error wrapping [spatial.ErrNeedsCGO].
type PROJ struct{}

var _ spatial.Reprojector = (*PROJ)(nil)

// New fails in a build without cgo, with an error wrapping
// [spatial.ErrNeedsCGO].
func New(*Options) (*PROJ, error) {
	return nil, fmt.Errorf("proj: New: %w", spatial.ErrNeedsCGO)
}

// Close does nothing and returns nil.
func (p *PROJ) Close() error { return nil }

// Version returns "": no PROJ is linked.
func Version() string { return "" }

// Authorities returns nil: no PROJ is linked.
func (p *PROJ) Authorities() []string { return nil }

// WKT returns "", false: no PROJ is linked.
func WKT(def string, typ int) (string, bool) { return "", false }

// ResolveCRS fails with an error wrapping [spatial.ErrNeedsCGO].
func (p *PROJ) ResolveCRS(string) (spatial.CRSInfo, error) {
	return spatial.CRSInfo{}, fmt.Errorf("proj: ResolveCRS: %w", spatial.ErrNeedsCGO)
}

// Transform fails with an error wrapping [spatial.ErrNeedsCGO].
func (p *PROJ) Transform(int, int, []orb.Point, []float64) (int, error) {
	return -1, fmt.Errorf("proj: Transform: %w", spatial.ErrNeedsCGO)
}

// PROJJSON needs PROJ: in a build without cgo it fails with an error
// wrapping [spatial.ErrNeedsCGO].
func PROJJSON(code int) (json.RawMessage, error) {
	return nil, fmt.Errorf("spatial: PROJJSON of EPSG:%d: %w", code, spatial.ErrNeedsCGO)
}
