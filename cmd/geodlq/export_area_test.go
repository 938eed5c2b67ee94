package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// metresEvents returns n events whose coordinates are Web Mercator metres
// labelled EPSG:4326 (as the issue saw: polygons around Europe, ±19,000,000
// at the far end), each dead-lettered by check as crs_mismatch with its
// fault point in metres, and a few events that belong in an EPSG:4326
// export: a bowtie (fault point in degrees), a Web Mercator point declared
// EPSG:3857, and a Web Mercator point declared EPSG:3857 past the
// projection's edge (x beyond ±20,037,508 m).
func metresEvents(n int) string {
	var b strings.Builder
	for i := range n {
		x := 1_113_194.9 + float64(i)*1_800_000 // up to about 17.3 million
		y := 6_446_275.8 - float64(i)*100_000
		fmt.Fprintf(&b, `{"event_id":"evt-metres-%d","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[%g,%g],[%g,%g],[%g,%g],[%g,%g]]]}}`+"\n",
			i, x, y, x+111_319, y, x+111_319, y+175_000, x, y)
	}
	b.WriteString(`{"event_id":"evt-bowtie","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}` + "\n")
	b.WriteString(`{"event_id":"evt-3857","crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[1113194.9079327357,0]}}` + "\n")
	b.WriteString(`{"event_id":"evt-3857-edge","crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[25000000,0]}}` + "\n")
	return b.String()
}

// TestExportOutsideCRSArea: geometries whose coordinates lie outside the
// valid area of the target CRS — metres labelled EPSG:4326, a Web Mercator
// point past the projection's edge — are exported as null geometries with
// geometry_status outside_crs_area, in GeoJSON and GeoPackage, and so are
// their fault points; the layers' extents stay within longitude and
// latitude; what is inside exports as before.
func TestExportOutsideCRSArea(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := cli{t: t, store: "sqlite://" + filepath.Join(dir, "dlq.db")}
	c.must(exitProblems, []byte(metresEvents(10)), "check", "--dead-letter", "parcels")

	want := map[string]string{"evt-bowtie": "ok", "evt-3857": "ok", "evt-3857-edge": "outside_crs_area"}
	for i := range 10 {
		want[fmt.Sprintf("evt-metres-%d", i)] = "outside_crs_area"
	}

	// GeoJSON, in EPSG:4326.
	r := c.must(exitOK, nil, "export", "--format", "geojson")
	var fc featureCollection
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fc))
	got, faults := map[string]string{}, map[string]string{}
	for _, f := range fc.Features {
		id := f.Properties["event_id"].(string)
		status := f.Properties["geometry_status"].(string)
		if f.Properties["feature"] == "fault" {
			faults[id] = status
		} else {
			got[id] = status
		}
		if status != "ok" {
			require.Equal(t, "null", string(f.Geometry), "%s %s", id, f.Properties["feature"])
			continue
		}
		var g struct {
			Coordinates json.RawMessage `json:"coordinates"`
		}
		require.NoError(t, json.Unmarshal(f.Geometry, &g))
		for _, v := range numbers(t, g.Coordinates) {
			require.LessOrEqual(t, math.Abs(v), 180.0, "%s: %s", id, f.Geometry)
		}
	}
	require.Equal(t, want, got)
	for i := range 10 {
		require.Equal(t, "outside_crs_area", faults[fmt.Sprintf("evt-metres-%d", i)], "the fault point in metres, too")
	}
	require.Equal(t, "ok", faults["evt-bowtie"])

	// --split-by-epsg: each file in its own CRS, the same verdicts.
	split := filepath.Join(dir, "split.geojson")
	c.must(exitOK, nil, "export", "--split-by-epsg", split)
	var f4326 featureCollection
	require.NoError(t, json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "split.epsg4326.geojson"))), &f4326))
	for _, f := range f4326.geometries() {
		id := f.Properties["event_id"].(string)
		require.Equal(t, want[id], f.Properties["geometry_status"], id)
	}

	// GeoPackage.
	file := filepath.Join(dir, "dl.gpkg")
	c.must(exitOK, nil, "export", file)
	db, err := sql.Open("sqlite", "file:"+file+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query("SELECT event_id, geometry_status, geom IS NULL FROM dead_letters")
	require.NoError(t, err)
	gp := map[string]string{}
	for rows.Next() {
		var id, status string
		var null bool
		require.NoError(t, rows.Scan(&id, &status, &null))
		require.Equal(t, status != "ok", null, id)
		gp[id] = status
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, gp)
	var outside, nullFaults int
	require.NoError(t, db.QueryRow("SELECT count(*), sum(geom IS NULL) FROM fault_points WHERE geometry_status = 'outside_crs_area'").Scan(&outside, &nullFaults))
	require.Equal(t, 10, outside)
	require.Equal(t, 10, nullFaults)
	for _, layer := range []string{"dead_letters", "fault_points"} {
		var minX, minY, maxX, maxY float64
		require.NoError(t, db.QueryRow("SELECT min_x, min_y, max_x, max_y FROM gpkg_contents WHERE table_name = ?", layer).Scan(&minX, &minY, &maxX, &maxY))
		for _, v := range []float64{minX, maxX} {
			require.LessOrEqual(t, math.Abs(v), 180.0, "%s extent", layer)
		}
		for _, v := range []float64{minY, maxY} {
			require.LessOrEqual(t, math.Abs(v), 90.0, "%s extent", layer)
		}
	}

	// Into Web Mercator: the degrees fit, the metres labelled 4326 do not.
	r = c.must(exitOK, nil, "export", "--format", "geojson", "--to-epsg", "3857")
	fc = featureCollection{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fc))
	for _, f := range fc.geometries() {
		id := f.Properties["event_id"].(string)
		require.Equal(t, want[id], f.Properties["geometry_status"], id)
	}
}

// numbers returns every number in a JSON coordinates array.
func numbers(t *testing.T, raw json.RawMessage) []float64 {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	var out []float64
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case float64:
			out = append(out, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
