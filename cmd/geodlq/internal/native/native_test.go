package native_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/cmd/geodlq/internal/native"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
)

// TestNewChecker: a cgo build's checker repairs with GEOS, reprojects and
// resolves a PROJ string with PROJ; a build without cgo checks in pure Go
// and says what needs the cgo build.
func TestNewChecker(t *testing.T) {
	c, err := native.NewChecker(&spatial.Options{ExpectedEPSG: 4326})
	require.NoError(t, err)
	bowtie := []byte(`{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`)
	require.Error(t, c.CheckGeometry(bowtie), "checking works in every build")
	fixed, info, verr := c.MakeValid(bowtie)
	moved, perr := c.Reproject([]byte(`{"type":"Point","coordinates":[1,2]}`), 4326, 3857)
	crs, cerr := c.ResolveCRS("+proj=longlat +datum=WGS84 +type=crs")
	_, rerr := c.Repairers(nil)
	if geos.Version() == "" {
		for _, err := range []error{verr, perr, rerr} {
			require.ErrorIs(t, err, spatial.ErrNeedsCGO)
		}
		require.ErrorIs(t, cerr, spatial.ErrNeedsPROJ)
	} else {
		require.NoError(t, verr)
		require.Equal(t, "MultiPolygon", info.TypeAfter)
		require.NoError(t, c.CheckGeometry(fixed))
		require.NoError(t, perr)
		require.Contains(t, string(moved), "111319.49")
		require.NoError(t, cerr)
		require.Equal(t, 4326, crs.EPSG)
		require.NoError(t, rerr)
	}
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	_, _, err = c.MakeValid(bowtie)
	if geos.Version() != "" {
		require.ErrorIs(t, err, spatial.ErrClosed)
	}
}
