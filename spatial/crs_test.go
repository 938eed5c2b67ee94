//go:build cgo

package spatial_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/spatial"
)

func TestResolveEPSG(t *testing.T) {
	c := newChecker(t, nil)
	tests := []struct {
		crs        string
		epsg       int
		geographic bool
		twin       bool
	}{
		{crs: "EPSG:4326", epsg: 4326, geographic: true},
		{crs: "epsg:4326", epsg: 4326, geographic: true},
		{crs: "  EPSG:4326  ", epsg: 4326, geographic: true},
		{crs: "+proj=longlat +datum=WGS84 +type=crs", epsg: 4326, geographic: true},
		{crs: "+proj=longlat +datum=WGS84", epsg: 4326, geographic: true},
		{crs: "urn:ogc:def:crs:EPSG::4326", epsg: 4326, geographic: true},
		{crs: "urn:ogc:def:crs:EPSG:6.6:4326", epsg: 4326, geographic: true},
		{crs: "urn:x-ogc:def:crs:EPSG:4326", epsg: 4326, geographic: true},
		{crs: "WGS84", epsg: 4326, geographic: true},
		{crs: "OGC:CRS84", epsg: 4326, geographic: true, twin: true},
		{crs: "urn:ogc:def:crs:OGC:1.3:CRS84", epsg: 4326, geographic: true, twin: true},
		{crs: "urn:ogc:def:crs:OGC::CRS84", epsg: 4326, geographic: true, twin: true},
		{crs: "http://www.opengis.net/def/crs/OGC/1.3/CRS84", epsg: 4326, geographic: true, twin: true},
		{crs: "CRS84", epsg: 4326, geographic: true, twin: true},
		{crs: "crs:84", epsg: 4326, geographic: true, twin: true},
		{crs: "OGC:CRS83", epsg: 4269, geographic: true, twin: true},
		{crs: "EPSG:3857", epsg: 3857},
		{crs: "urn:ogc:def:crs:EPSG::3857", epsg: 3857},
		{crs: "+proj=merc +a=6378137 +b=6378137 +lat_ts=0 +lon_0=0 +x_0=0 +y_0=0 +k=1 +units=m +nadgrids=@null +wktext +no_defs", epsg: 3857},
		{crs: "EPSG:32633", epsg: 32633},
		{crs: "EPSG:4979", epsg: 4979, geographic: true},
		{crs: "EPSG:4326+5773", epsg: 9707, geographic: true},
		{crs: `GEOGCRS["WGS 84",DATUM["World Geodetic System 1984",ELLIPSOID["WGS 84",6378137,298.257223563]],CS[ellipsoidal,2],AXIS["latitude",north],AXIS["longitude",east],UNIT["degree",0.0174532925199433],ID["EPSG",4326]]`, epsg: 4326, geographic: true},
		{crs: "+proj=longlat +ellps=WGS84 +towgs84=0,0,0", epsg: 0, geographic: true},
		{crs: "ESRI:102100", epsg: 3857},
		{crs: "http://www.opengis.net/def/crs/EPSG/0/3857", epsg: 3857},
		{crs: `Geogcs["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]]`, epsg: 4326, geographic: true},
	}
	for _, tt := range tests {
		t.Run(tt.crs, func(t *testing.T) {
			epsg, err := c.ResolveEPSG(tt.crs)
			require.NoError(t, err)
			require.Equal(t, tt.epsg, epsg)
			info, err := c.ResolveCRS(tt.crs)
			require.NoError(t, err)
			require.Equal(t, tt.geographic, info.Geographic)
			require.Equal(t, tt.twin, info.LonLatTwin)
		})
	}
}

func TestResolveEPSGUnparseable(t *testing.T) {
	c := newChecker(t, nil)
	tests := []struct {
		crs    string
		reason string // "" = not asserted beyond the prefix
	}{
		{crs: "", reason: `unparseable CRS "": empty CRS definition`},
		{crs: "EPSG:43x6", reason: `unparseable CRS "EPSG:43x6": proj_create: crs not found`},
		{crs: "EPSG:99999", reason: `unparseable CRS "EPSG:99999": proj_create: crs not found`},
		{crs: "EPSG:4326 junk"},
		{crs: "urn:ogc:def:crs:EPSG::bogus", reason: `unparseable CRS "urn:ogc:def:crs:EPSG::bogus": proj_create: crs not found`},
		{crs: "foo"},
		{crs: "Amersfoort garbage"},
		{crs: "not a crs"},
		{crs: "+proj=nonsense"},
		{crs: "+proj=longlat +datum=WGS84 +type=coordinate_operation"},
		{crs: "EPSG:1024"}, // an ellipsoid? no: an unknown code; either way not a CRS
		{crs: "EPSG:7030"}, // the WGS 84 ellipsoid, not a CRS
		{crs: "GEOGCRS[broken"},
		{crs: "{}"},
		{crs: "EPSG:4326\x00EPSG:3857", reason: `unparseable CRS "EPSG:4326\x00EPSG:3857": CRS definition contains a NUL byte`},
		{crs: strings.Repeat("A", 9000)},
		{crs: "FOO[1,2]"},
		{crs: "PSG:432EPSG:4326"},
		{crs: "PSG:4326", reason: `unparseable CRS "PSG:4326": unknown CRS authority "PSG"`},
		{crs: "urnFogc:def:crs:OGC:1.3:CRS84"},
		{crs: "urn:ogc:def:crs:NOPE::4326", reason: `unparseable CRS "urn:ogc:def:crs:NOPE::4326": unknown CRS authority "NOPE"`},
		{crs: "http://example.com/crs/4326"},
		{crs: "+\x86roj=longlat +datum=WGS84 +type=crs"},
	}
	for _, tt := range tests {
		name := tt.crs
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			epsg, err := c.ResolveEPSG(tt.crs)
			require.Zero(t, epsg)
			ce := requireClassified(t, err, classify.ClassCRSMismatch, classify.StageCRSTransform, classify.KindCRSUnparseable)
			require.Zero(t, ce.Geometry.EPSG)
			require.True(t, strings.HasPrefix(ce.Geometry.Reason, "unparseable CRS "), ce.Geometry.Reason)
			if tt.reason != "" {
				require.Equal(t, tt.reason, ce.Geometry.Reason)
			}
			// Cached: the same answer again.
			_, err2 := c.ResolveEPSG(tt.crs)
			require.Equal(t, err.Error(), err2.Error())
		})
	}
}

func TestCheckCRS(t *testing.T) {
	c := newChecker(t, nil)
	tests := []struct {
		declared string
		expected int
		kind     classify.ReasonKind // "" = passes
		epsg     int
	}{
		{declared: "EPSG:4326", expected: 4326},
		{declared: "epsg:4326", expected: 4326},
		{declared: "+proj=longlat +datum=WGS84 +type=crs", expected: 4326},
		{declared: "urn:ogc:def:crs:EPSG::4326", expected: 4326},
		{declared: "OGC:CRS84", expected: 4326},
		{declared: "urn:ogc:def:crs:OGC:1.3:CRS84", expected: 4326},
		{declared: "CRS84", expected: 4326},
		{declared: "", expected: 4326},
		{declared: "EPSG:3857", expected: 3857},
		{declared: "EPSG:3857", expected: 0},
		{declared: "EPSG:3857", expected: 4326, kind: classify.KindCRSDiffers, epsg: 3857},
		{declared: "OGC:CRS84", expected: 3857, kind: classify.KindCRSDiffers, epsg: 4326},
		{declared: "+proj=longlat +ellps=WGS84 +towgs84=0,0,0", expected: 4326, kind: classify.KindCRSDiffers, epsg: 0},
		{declared: "EPSG:43x6", expected: 4326, kind: classify.KindCRSUnparseable},
		{declared: "EPSG:43x6", expected: 0, kind: classify.KindCRSUnparseable},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s vs %d", tt.declared, tt.expected), func(t *testing.T) {
			err := c.CheckCRS(tt.declared, tt.expected)
			if tt.kind == "" {
				require.NoError(t, err)
				return
			}
			ce := requireClassified(t, err, classify.ClassCRSMismatch, classify.StageCRSTransform, tt.kind)
			require.Equal(t, tt.epsg, ce.Geometry.EPSG)
			if tt.kind == classify.KindCRSUnparseable {
				require.Contains(t, ce.Geometry.Reason, "proj_create: crs not found")
			}
		})
	}
}

func TestCRSCacheBounded(t *testing.T) {
	c := newChecker(t, &spatial.Options{CRSCacheSize: 16})
	for i := range 200 {
		_, _ = c.ResolveEPSG(fmt.Sprintf("EPSG:%d", 100000+i))
		_, _ = c.ResolveEPSG(fmt.Sprintf("hostile-%d", i))
	}
	require.LessOrEqual(t, c.CRSCacheLen(), 16)
	// Hot entries survive a flood of one-off strings.
	for range 3 {
		_, err := c.ResolveEPSG("EPSG:4326")
		require.NoError(t, err)
	}
	for i := range 10 {
		_, _ = c.ResolveEPSG(fmt.Sprintf("EPSG:%d", 200000+i))
	}
	require.True(t, c.CRSCached("EPSG:4326"))
}

// TestHostileCRSIsCheap guards against strings that make PROJ fall back to
// its slow, approximate name search (100-300 ms each): a producer sending
// distinct junk must not be able to stall CRS resolution.
func TestHostileCRSIsCheap(t *testing.T) {
	c := newChecker(t, nil)
	_, _ = c.ResolveEPSG("EPSG:4326") // open the database
	for i, s := range []string{
		"foo", "not a crs", "Amersfoort", "FOO[1,2]", "PSG:432EPSG:4326", "urnFogc:def:crs:OGC:1.3:CRS84",
		"urz:ogc:def:crs:EPSG::4326", "+\x86roj=longlt_i+datum=WGS84 +no_defs +type=crs",
		"EPSG:99999999", "EPSG:abc", "ESRI:foo", "urn:ogc:def:crs:EPSG::xyz",
		"http://www.opengis.net/def/crs/EPSG/0/garbage", "GEOGCS[garbage", `{"type":"x"}`,
	} {
		start := time.Now()
		_, err := c.ResolveEPSG(s)
		require.Error(t, err, s)
		require.Less(t, time.Since(start), 50*time.Millisecond, "resolving %q (#%d)", s, i)
	}
}
