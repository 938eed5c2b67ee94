package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type featureCollection struct {
	Type     string `json:"type"`
	CRS      any    `json:"crs"`
	Features []struct {
		ID         string          `json:"id"`
		Geometry   json.RawMessage `json:"geometry"`
		Properties map[string]any  `json:"properties"`
	} `json:"features"`
}

// TestExport proves the three formats: the GeoJSON FeatureCollection
// (invalid geometries as they are, non-finite ones as null with their
// properties kept, offloaded ones fetched), CSV and JSON lines.
func TestExport(t *testing.T) {
	t.Parallel()
	c := seeded(t)
	n := len(listIDs(t, c))

	r := c.must(exitOK, nil, "export", "--format", "geojson")
	var fc featureCollection
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fc), "valid JSON")
	require.Equal(t, "FeatureCollection", fc.Type)
	require.Len(t, fc.Features, n)
	status := map[string]string{}
	for _, f := range fc.Features {
		id := f.Properties["event_id"].(string)
		status[id] = f.Properties["geometry_status"].(string)
		switch id {
		case "evt-9":
			require.JSONEq(t, bowtieGeom, string(f.Geometry))
			require.Equal(t, "self_intersection", f.Properties["reason_kind"])
			require.Equal(t, 0.5, f.Properties["location_x"])
			require.Equal(t, true, f.Properties["fault_on_segment"])
			require.Equal(t, float64(4326), f.Properties["epsg"])
		case "evt-nan", "evt-infinity":
			require.Equal(t, "null", string(f.Geometry))
			require.Equal(t, "invalid_coordinate", f.Properties["reason_kind"])
		case "evt-big-1":
			require.Contains(t, string(f.Geometry), `"MultiPolygon"`)
			require.Equal(t, "s3://provider-b/continent.geojson", f.Properties["source_uri"])
		}
	}
	require.Equal(t, "ok", status["evt-9"])
	require.Equal(t, "non_finite", status["evt-nan"])
	require.Equal(t, "missing", status["evt-null-geometry"])
	require.Equal(t, "unparseable", status["evt-unknown-type"])
	require.Equal(t, "ok", status["evt-big-1"])

	// Without blobs, offloaded geometries are null, properties kept.
	noBlobs := c
	noBlobs.blobs = ""
	r = noBlobs.must(exitOK, nil, "export", "--format", "geojson", "--class", "resource_exhausted")
	fc = featureCollection{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fc))
	require.Len(t, fc.Features, 2)
	require.Equal(t, "null", string(fc.Features[0].Geometry))
	require.Equal(t, "offloaded_not_fetched", fc.Features[0].Properties["geometry_status"])

	// One EPSG other than 4326: a named crs for QGIS.
	r = c.must(exitOK, nil, "export", "--epsg", "3857")
	fc = featureCollection{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fc))
	require.Equal(t, map[string]any{"type": "name", "properties": map[string]any{"name": "urn:ogc:def:crs:EPSG::3857"}}, fc.CRS)

	r = c.must(exitOK, nil, "export", "--format", "csv", "--reason", "self_intersection")
	rows, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1+4)
	require.Equal(t, "record_id", rows[0][0])
	require.Contains(t, rows[0], "source_uri")

	r = c.must(exitOK, nil, "export", "--format", "jsonl")
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(nil, 4<<20)
	lines := 0
	for sc.Scan() {
		var line struct {
			view
			Envelope map[string]any `json:"envelope"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		require.Equal(t, "dlq.v1", line.Envelope["schema_version"])
		require.Equal(t, line.EventID, line.Envelope["event_id"])
		lines++
	}
	require.Equal(t, n, lines)
	c.must(exitUsage, nil, "export", "--format", "shapefile")
}
