package spatial

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/corpus"
)

// TestNoCGOCorpus checks every corpus event with a Checker without GEOS
// or PROJ, all a build without cgo (CGO_ENABLED=0) can have: the same
// verdicts as with them, except for a PROJ string, which only PROJ
// resolves and which is then a crs_unparseable verdict, never a default
// CRS.
func TestNoCGOCorpus(t *testing.T) {
	c, err := NewChecker(nil)
	require.NoError(t, err)
	defer c.Close()
	for _, it := range corpus.All() {
		t.Run(it.Name, func(t *testing.T) {
			res, err := c.CheckEvent(it.Payload)
			if it.Name == "crs_proj_string" {
				require.Error(t, err)
				require.Equal(t, classify.ClassCRSMismatch, classify.Classify(err))
				require.Equal(t, classify.KindCRSUnparseable, classify.DetailOf(err).Kind)
				require.Contains(t, err.Error(), "only PROJ resolves this definition")
				return
			}
			if it.Valid() {
				require.NoError(t, err)
				require.Equal(t, it.EPSG, res.EPSG)
				return
			}
			require.Error(t, err)
			require.Equal(t, it.Class, classify.Classify(err))
			require.Equal(t, it.Stage, classify.StageOf(err))
			d := classify.DetailOf(err)
			require.Equal(t, it.Kind, d.Kind)
			if it.Reason != "" {
				require.Equal(t, it.Reason, d.Reason)
			}
			if it.Fault != nil {
				require.Equal(t, *it.Fault, *d.Fault)
			}
		})
	}
}

// TestNoCGONeedsCGO: without GEOS and PROJ (Options.GEOS, ResolveCRS,
// Reprojector), what needs them says so, with an error wrapping
// ErrNeedsCGO.
func TestNoCGONeedsCGO(t *testing.T) {
	_, err := NewChecker(&Options{Engine: EngineGEOS})
	require.ErrorIs(t, err, ErrNeedsCGO)
	c, err := NewChecker(nil)
	require.NoError(t, err)
	defer c.Close()
	geom := []byte(`{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`)
	_, _, err = c.MakeValid(geom)
	require.ErrorIs(t, err, ErrNeedsCGO)
	_, err = c.Reproject(geom, 3857, 4326)
	require.ErrorIs(t, err, ErrNeedsCGO)
	_, err = c.Repairers(nil)
	require.ErrorIs(t, err, ErrNeedsCGO)
	for _, crs := range []string{"EPSG:4326", "urn:ogc:def:crs:EPSG::4326", "http://www.opengis.net/def/crs/OGC/1.3/CRS84", "CRS84"} {
		info, err := c.ResolveCRS(crs)
		require.NoError(t, err, crs)
		require.Equal(t, 4326, info.EPSG)
	}
	_, err = c.ResolveCRS(`GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563]]]`)
	require.True(t, errors.As(err, new(*CRSError)))
	require.ErrorIs(t, err, ErrNeedsPROJ)
	require.Equal(t, classify.KindCRSUnparseable, classify.DetailOf(err).Kind)
}

// TestNoCGOIdentified: without PROJ, WKT and PROJJSON that name their
// EPSG code at the top level resolve through the registry (with PROJ's
// answer: TestIdentifiedAgreesWithPROJ); what needs PROJ is a
// crs_unparseable verdict wrapping ErrNeedsPROJ, never a default CRS.
func TestNoCGOIdentified(t *testing.T) {
	c, err := NewChecker(nil)
	require.NoError(t, err)
	defer c.Close()
	for _, tt := range []struct {
		def  string
		epsg int
	}{{wkt1WGS84, 4326}, {wkt2Merc, 3857}, {jsonWGS84, 4326}} {
		info, err := c.ResolveCRS(tt.def)
		require.NoError(t, err, tt.def)
		require.Equal(t, tt.epsg, info.EPSG)
		require.NoError(t, c.CheckCRS(tt.def, tt.epsg))
	}
	for _, def := range []string{"+proj=longlat +datum=WGS84 +type=crs",
		strings.Replace(wkt1WGS84, `AXIS["Latitude",NORTH],AXIS["Longitude",EAST]`, `AXIS["Longitude",EAST],AXIS["Latitude",NORTH]`, 1),
		`{"type":"CompoundCRS","name":"x","id":{"authority":"EPSG","code":9707}}`} {
		err := c.CheckCRS(def, 4326)
		require.ErrorIs(t, err, ErrNeedsPROJ, def)
		require.NotErrorIs(t, err, ErrNeedsCGO)
		require.Equal(t, classify.ClassCRSMismatch, classify.Classify(err))
		require.Equal(t, classify.KindCRSUnparseable, classify.DetailOf(err).Kind)
	}
}
