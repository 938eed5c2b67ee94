package spatial

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/epsg"
)

const (
	wkt1WGS84 = `GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563,AUTHORITY["EPSG","7030"]],AUTHORITY["EPSG","6326"]],PRIMEM["Greenwich",0,AUTHORITY["EPSG","8901"]],UNIT["degree",0.0174532925199433,AUTHORITY["EPSG","9122"]],AXIS["Latitude",NORTH],AXIS["Longitude",EAST],AUTHORITY["EPSG","4326"]]`
	wkt2Merc  = `PROJCRS["WGS 84 / Pseudo-Mercator",BASEGEOGCRS["WGS 84",ENSEMBLE["World Geodetic System 1984 ensemble",MEMBER["World Geodetic System 1984 (G2139)"],ELLIPSOID["WGS 84",6378137,298.257223563,LENGTHUNIT["metre",1]],ENSEMBLEACCURACY[2.0]],PRIMEM["Greenwich",0,ANGLEUNIT["degree",0.0174532925199433]],ID["EPSG",4326]],CONVERSION["Popular Visualisation Pseudo-Mercator",METHOD["Popular Visualisation Pseudo Mercator",ID["EPSG",1024]]],CS[Cartesian,2],AXIS["easting (X)",east,ORDER[1],LENGTHUNIT["metre",1]],AXIS["northing (Y)",north,ORDER[2],LENGTHUNIT["metre",1]],ID["EPSG",3857]]`
	jsonWGS84 = `{"type":"GeographicCRS","name":"WGS 84","datum_ensemble":{"name":"World Geodetic System 1984 ensemble","members":[{"name":"World Geodetic System 1984 (Transit)"}],"ellipsoid":{"name":"WGS 84","semi_major_axis":6378137,"inverse_flattening":298.257223563}},"coordinate_system":{"subtype":"ellipsoidal","axis":[{"name":"Geodetic latitude","abbreviation":"Lat","direction":"north","unit":"degree"},{"name":"Geodetic longitude","abbreviation":"Lon","direction":"east","unit":"degree"}]},"id":{"authority":"EPSG","code":4326}}`
)

// TestIdentifiedCRS covers identifiedCRS's answers and refusals in every
// build (TestIdentifiedAgreesWithPROJ compares them with PROJ's).
func TestIdentifiedCRS(t *testing.T) {
	tests := []struct {
		name string
		def  string
		want CRSInfo
		ok   bool
	}{
		{"wkt1", wkt1WGS84, CRSInfo{EPSG: 4326, Name: "WGS 84", Geographic: true}, true},
		{"wkt2 projected", wkt2Merc, CRSInfo{EPSG: 3857, Name: "WGS 84 / Pseudo-Mercator"}, true},
		{"projjson", jsonWGS84, CRSInfo{EPSG: 4326, Name: "WGS 84", Geographic: true}, true},
		{"wkt1 without authority", strings.Replace(wkt1WGS84, `,AUTHORITY["EPSG","4326"]]`, `]`, 1), CRSInfo{}, false},
		{"wkt1 lon/lat axes against the registry", strings.Replace(wkt1WGS84, `AXIS["Latitude",NORTH],AXIS["Longitude",EAST]`, `AXIS["Longitude",EAST],AXIS["Latitude",NORTH]`, 1), CRSInfo{}, false},
		{"wkt1 without datum", `GEOGCS["x",AUTHORITY["EPSG","4326"]]`, CRSInfo{}, false},
		{"code not in the registry", strings.Replace(wkt1WGS84, `"EPSG","4326"]]`, `"EPSG","999999"]]`, 1), CRSInfo{}, false},
		{"kind differs from the registry", strings.Replace(wkt1WGS84, `"EPSG","4326"]]`, `"EPSG","3857"]]`, 1), CRSInfo{}, false},
		{"unbalanced", wkt1WGS84[:len(wkt1WGS84)-1], CRSInfo{}, false},
		{"trailing text", wkt1WGS84 + "x", CRSInfo{}, false},
		{"unterminated string", `GEOGCS["WGS 84`, CRSInfo{}, false},
		{"projjson without id", strings.Replace(jsonWGS84, `,"id":{"authority":"EPSG","code":4326}`, ``, 1), CRSInfo{}, false},
		{"projjson compound", `{"type":"CompoundCRS","name":"x","id":{"authority":"EPSG","code":9707}}`, CRSInfo{}, false},
		{"proj string", "+proj=longlat +datum=WGS84 +type=crs", CRSInfo{}, false},
		{"deep wkt", strings.Repeat(`GEOGCS["x",`, maxCRSDepth+2) + strings.Repeat("]", maxCRSDepth+2), CRSInfo{}, false},
		{"deep projjson", `{"type":"GeographicCRS","name":"x","a":` + strings.Repeat("[", maxCRSDepth+1) + strings.Repeat("]", maxCRSDepth+1) + `}`, CRSInfo{}, false},
		{"too long", wkt1WGS84[:len(wkt1WGS84)-1] + `,"` + strings.Repeat("x", maxCRSLen) + `"]`, CRSInfo{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := identifiedCRS(tt.def)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

// FuzzIdentifiedCRS feeds identifiedCRS mutated WKT and PROJJSON, long
// and deeply nested: it must not panic, must refuse what is longer than
// maxCRSLen, and what it resolves must be a registry code of the kind
// the definition declares.
func FuzzIdentifiedCRS(f *testing.F) {
	for _, s := range []string{wkt1WGS84, wkt2Merc, jsonWGS84,
		strings.Repeat(`GEOGCS["x",`, 5000),
		strings.Repeat(`[`, maxCRSLen),
		`{"type":"GeographicCRS","name":"x","datum":` + strings.Repeat(`{"a":`, 4000),
		`GEOGCS["a""b",DATUM["d"],AUTHORITY["OGC","CRS84"]]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, def string) {
		info, ok := identifiedCRS(def)
		if !ok {
			require.Equal(t, CRSInfo{}, info)
			return
		}
		require.LessOrEqual(t, len(def), maxCRSLen)
		if info.LonLatTwin {
			require.Contains(t, []int{4326, 4269, 4267}, info.EPSG)
			return
		}
		crs, found := epsg.Lookup(info.EPSG)
		require.True(t, found, "EPSG:%d", info.EPSG)
		require.Equal(t, crs.Geographic(), info.Geographic)
	})
}
