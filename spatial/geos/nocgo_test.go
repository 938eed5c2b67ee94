//go:build !cgo

package geos_test

import (
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
)

// TestNoCGO: without cgo no GEOS is linked; New says so with an error
// wrapping spatial.ErrNeedsCGO, and so does an Engine's every method.
func TestNoCGO(t *testing.T) {
	_, err := geos.New()
	require.ErrorIs(t, err, spatial.ErrNeedsCGO)
	require.Empty(t, geos.Version())
	var e geos.Engine
	_, err = e.IsValidReason(orb.Point{1, 2}, nil)
	require.ErrorIs(t, err, spatial.ErrNeedsCGO)
	_, _, err = e.MakeValid(orb.Point{1, 2})
	require.ErrorIs(t, err, spatial.ErrNeedsCGO)
	require.NoError(t, e.Close())
}
