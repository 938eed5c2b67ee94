//go:build !cgo

package proj_test

import (
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/proj"
)

// TestNoCGO: without cgo no PROJ is linked; New and PROJJSON say so with
// an error wrapping spatial.ErrNeedsCGO, and so does a PROJ's every
// method.
func TestNoCGO(t *testing.T) {
	_, err := proj.New(nil)
	require.ErrorIs(t, err, spatial.ErrNeedsCGO)
	_, err = proj.PROJJSON(4326)
	require.ErrorIs(t, err, spatial.ErrNeedsCGO)
	require.Empty(t, proj.Version())
	_, ok := proj.WKT("EPSG:4326", 0)
	require.False(t, ok)
	var p proj.PROJ
	_, err = p.ResolveCRS("+proj=longlat +datum=WGS84 +type=crs")
	require.ErrorIs(t, err, spatial.ErrNeedsCGO)
	bad, err := p.Transform(4326, 3857, []orb.Point{{1, 2}}, nil)
	require.ErrorIs(t, err, spatial.ErrNeedsCGO)
	require.Equal(t, -1, bad)
	require.Empty(t, p.Authorities())
	require.NoError(t, p.Close())
}
