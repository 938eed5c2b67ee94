//go:build cgo

package spatial_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/epsg"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/proj"
)

// crsVerdict is what CheckCRS makes of a definition for a 4326 pipeline:
// the class, kind and EPSG of the error, or "pass".
func crsVerdict(c *spatial.Checker, def string) string {
	err := c.CheckCRS(def, 4326)
	if err == nil {
		return "pass"
	}
	d := classify.DetailOf(err)
	return string(classify.Classify(err)) + " " + string(d.Kind) + " " + strconv.Itoa(d.EPSG)
}

// TestIdentifiedAgreesWithPROJ is the differential test of the pure-Go
// resolution of WKT and PROJJSON (identifiedCRS, what a build without
// cgo uses): for every 41st EPSG code of the registry and the codes below,
// the WKT1 (GDAL), WKT2 (2015, 2019, simplified) and PROJJSON that PROJ
// writes, plus hand-written definitions, resolve to PROJ's CRSInfo and
// give CheckCRS's verdict wherever identifiedCRS resolves them, and most
// of PROJ's own definitions (four per code at least) resolve.
func TestIdentifiedAgreesWithPROJ(t *testing.T) {
	oracle := newChecker(t, nil)
	oracle.RegistryOff()
	codes := []int{4326, 4269, 4267, 3857, 32633, 2193, 27700, 4979, 4258, 3035}
	for i, code := range epsg.Codes() {
		if i%41 == 0 {
			codes = append(codes, code)
		}
	}
	var defs []string
	for _, code := range codes {
		def := "EPSG:" + strconv.Itoa(code)
		for _, typ := range []int{0, 1, 2, 3, 4, 5} {
			if w, ok := proj.WKT(def, typ); ok {
				defs = append(defs, w)
			}
		}
		if j, err := proj.PROJJSON(code); err == nil {
			defs = append(defs, string(j))
		}
	}
	for _, ogc := range []string{"OGC:CRS84", "OGC:CRS83", "OGC:CRS27"} {
		w, ok := proj.WKT(ogc, 2)
		require.True(t, ok)
		defs = append(defs, w)
	}
	defs = append(defs,
		`GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563,AUTHORITY["EPSG","7030"]]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433],AUTHORITY["EPSG","4326"]]`,
		`GEOGCRS["My ""quoted"" CRS",DATUM["World Geodetic System 1984",ELLIPSOID["WGS 84",6378137,298.257223563]],CS[ellipsoidal,2],AXIS["longitude",east],AXIS["latitude",north],UNIT["degree",0.0174532925199433],ID["EPSG","4326"]]`,
		`GEOGCRS["Not in the database",DATUM["World Geodetic System 1984",ELLIPSOID["WGS 84",6378137,298.257223563]],CS[ellipsoidal,2],AXIS["longitude",east],AXIS["latitude",north],UNIT["degree",0.0174532925199433],ID["EPSG",999999]]`,
		`GEOGCRS["ESRI first",DATUM["World Geodetic System 1984",ELLIPSOID["WGS 84",6378137,298.257223563]],CS[ellipsoidal,2],AXIS["longitude",east],AXIS["latitude",north],UNIT["degree",0.0174532925199433],ID["ESRI",104000],ID["EPSG",4326]]`,
		`geogcs[ "lower case",
  DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563]],
  PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433],AUTHORITY["EPSG","4326"]]`,
		`geogcs ("space before the parenthesis",DATUM("WGS_1984",SPHEROID("WGS 84",6378137,298.257223563)),PRIMEM("Greenwich",0),UNIT("degree",0.0174532925199433),AUTHORITY("EPSG","4326"))`,
	)
	nocgo, err := spatial.NewChecker(nil)
	require.NoError(t, err)
	defer nocgo.Close()
	var resolved, missed int
	for _, def := range defs {
		got, ok := spatial.IdentifiedCRS(def)
		want, werr := oracle.ResolveCRS(def)
		if !ok {
			// Left to PROJ: a Checker without it gives the ErrNeedsPROJ
			// verdict (TestNoCGOIdentified).
			if werr == nil && want.EPSG != 0 && !want.Identified {
				missed++
			}
			continue
		}
		resolved++
		require.NoError(t, werr, "%.300s", def)
		require.Equal(t, want, got, "%.300s", def)
		// The verdict of a Checker without PROJ (a build without cgo)
		// equals PROJ's.
		require.Equal(t, crsVerdict(oracle, def), crsVerdict(nocgo, def), "%.300s", def)
	}
	t.Logf("%d definitions, %d resolved in pure Go with PROJ's answer, %d that PROJ resolves by their identifier left to PROJ", len(defs), resolved, missed)
	require.Greater(t, resolved, 4*len(codes))
}
