// Package native gives geodlq's commands a spatial.Checker with GEOS
// (spatial/geos) and PROJ (spatial/proj) injected where the binary links
// them: MakeValid and reprojection (triage, replay's repairs, the
// console's previews and repairs, export's reprojection) and the CRS
// definitions the registry does not resolve. A binary built with
// CGO_ENABLED=0 links neither: its checker checks in pure Go, and what
// needs GEOS or PROJ fails with an error wrapping spatial.ErrNeedsCGO,
// which the commands report plainly.
package native

import (
	"errors"

	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
	"github.com/geodlq/geodlq/spatial/proj"
)

// Checker is a spatial.Checker with the GEOS and PROJ it was given.
type Checker struct {
	*spatial.Checker
	geos *geos.Engine
	proj *proj.PROJ
}

// NewChecker returns a Checker configured by opts (nil for the defaults)
// with GEOS and PROJ injected when the binary links them. It fails when
// PROJ cannot read its database (wrapping proj.ErrNoProjDB), or when
// opts is refused.
func NewChecker(opts *spatial.Options) (*Checker, error) {
	var o spatial.Options
	if opts != nil {
		o = *opts
	}
	c := &Checker{}
	g, err := geos.New()
	switch {
	case err == nil:
		c.geos, o.GEOS = g, g
	case !errors.Is(err, spatial.ErrNeedsCGO):
		return nil, err
	}
	p, err := proj.New(nil)
	switch {
	case err == nil:
		c.proj, o.ResolveCRS, o.Reprojector = p, p.ResolveCRS, p
	case !errors.Is(err, spatial.ErrNeedsCGO):
		c.closeNative()
		return nil, err
	}
	if c.Checker, err = spatial.NewChecker(&o); err != nil {
		c.closeNative()
		return nil, err
	}
	return c, nil
}

// Close closes the checker, then its GEOS and PROJ. It is idempotent and
// returns nil.
func (c *Checker) Close() error {
	err := c.Checker.Close()
	c.closeNative()
	return err
}

func (c *Checker) closeNative() {
	if c.geos != nil {
		_ = c.geos.Close()
	}
	if c.proj != nil {
		_ = c.proj.Close()
	}
}
