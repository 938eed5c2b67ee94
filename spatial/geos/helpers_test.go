//go:build cgo

package geos

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/proj"
)

// newEngine returns a GEOS engine closed with the test.
func newEngine(t testing.TB) *Engine {
	t.Helper()
	e, err := New()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

// newChecker returns a Checker configured by opts with this package's
// GEOS and spatial/proj's PROJ injected, closed with the test.
func newChecker(t testing.TB, opts *spatial.Options) *spatial.Checker {
	t.Helper()
	var o spatial.Options
	if opts != nil {
		o = *opts
	}
	o.GEOS = newEngine(t)
	p, err := proj.New(nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	o.ResolveCRS, o.Reprojector = p.ResolveCRS, p
	c, err := spatial.NewChecker(&o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}
