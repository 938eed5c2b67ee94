//go:build !cgo

package geos

import (
	"fmt"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/spatial"
)

// Engine is GEOS, for a [spatial.Checker]'s Options.GEOS. A build without
// cgo links no GEOS: [New] fails, and an Engine's methods fail with an
// error wrapping [spatial.ErrNeedsCGO].
type Engine struct{}

var _ spatial.GEOS = (*Engine)(nil)

// New fails in a build without cgo, with an error wrapping
// [spatial.ErrNeedsCGO].
func New() (*Engine, error) {
	return nil, fmt.Errorf("geos: New: %w", spatial.ErrNeedsCGO)
}

// Close does nothing and returns nil.
func (e *Engine) Close() error { return nil }

// Version returns "": no GEOS is linked.
func Version() string { return "" }

// IsValidReason fails with an error wrapping [spatial.ErrNeedsCGO].
func (e *Engine) IsValidReason(orb.Geometry, []orb.Point) (string, error) {
	return "", fmt.Errorf("geos: IsValidReason: %w", spatial.ErrNeedsCGO)
}

// MakeValid fails with an error wrapping [spatial.ErrNeedsCGO].
func (e *Engine) MakeValid(orb.Geometry) (string, orb.Geometry, error) {
	return "", nil, fmt.Errorf("geos: MakeValid: %w", spatial.ErrNeedsCGO)
}
