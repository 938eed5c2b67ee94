package main

import (
	"bufio"
	"database/sql"
	byteorder "encoding/binary"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/wkb"
	"github.com/stretchr/testify/require"
)

type feat struct {
	ID         string          `json:"id"`
	Geometry   json.RawMessage `json:"geometry"`
	Properties map[string]any  `json:"properties"`
}

type featureCollection struct {
	Type     string `json:"type"`
	CRS      any    `json:"crs"`
	Features []feat `json:"features"`
}

// geometries returns the collection's features of kind "geometry" (one
// per record), leaving out the fault points.
func (fc featureCollection) geometries() []feat {
	var out []feat
	for _, f := range fc.Features {
		if f.Properties["feature"] == "geometry" {
			out = append(out, f)
		}
	}
	return out
}

// TestExport proves the formats: the GeoJSON FeatureCollection, in
// EPSG:4326 (a Web Mercator point reprojected with PROJ; invalid
// geometries as they are, non-finite ones as null with their properties
// kept, offloaded ones fetched), a layer of fault points, one file per
// CRS with --split-by-epsg, CSV and JSON lines; the file is written whole
// or not at all.
func TestExport(t *testing.T) {
	t.Parallel()
	c := seeded(t)
	n := len(listIDs(t, c))

	r := c.must(exitOK, nil, "export", "--format", "geojson")
	var fc featureCollection
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fc), "valid JSON")
	require.Equal(t, "FeatureCollection", fc.Type)
	require.Nil(t, fc.CRS, "RFC 7946: EPSG:4326 needs no crs member")
	require.Len(t, fc.geometries(), n)
	status := map[string]string{}
	faults := map[string]json.RawMessage{}
	for _, f := range fc.Features {
		id := f.Properties["event_id"].(string)
		if f.Properties["feature"] == "fault" {
			require.Equal(t, f.ID, f.Properties["destination"].(string)+"/"+f.Properties["record_id"].(string)+"#fault")
			faults[id] = f.Geometry
			continue
		}
		status[id] = f.Properties["geometry_status"].(string)
		switch id {
		case "evt-9":
			require.JSONEq(t, bowtieGeom, string(f.Geometry))
			require.Equal(t, "self_intersection", f.Properties["reason_kind"])
			require.Equal(t, 0.5, f.Properties["location_x"])
			require.Equal(t, true, f.Properties["fault_on_segment"])
			require.Equal(t, float64(4326), f.Properties["epsg"])
		case "evt-3857":
			var g struct{ Coordinates []float64 }
			require.NoError(t, json.Unmarshal(f.Geometry, &g))
			require.InDelta(t, 10, g.Coordinates[0], 1e-6, "Web Mercator metres reprojected to longitude")
			require.InDelta(t, 50, g.Coordinates[1], 1e-6, "and latitude")
			require.Equal(t, float64(3857), f.Properties["epsg"], "the property keeps the source EPSG")
		case "evt-nan", "evt-infinity":
			require.Equal(t, "null", string(f.Geometry))
			require.Equal(t, "invalid_coordinate", f.Properties["reason_kind"])
		case "evt-big-1":
			require.Contains(t, string(f.Geometry), `"MultiPolygon"`)
			require.Equal(t, "s3://provider-b/continent.geojson", f.Properties["source_uri"])
		}
	}
	require.Equal(t, "ok", status["evt-9"])
	require.Equal(t, "ok", status["evt-3857"])
	require.Equal(t, "non_finite", status["evt-nan"])
	require.Equal(t, "missing", status["evt-null-geometry"])
	require.Equal(t, "unparseable", status["evt-unknown-type"])
	require.Equal(t, "unknown_crs", status["evt-unparseable-crs"])
	require.Equal(t, "ok", status["evt-big-1"])
	require.JSONEq(t, `{"type":"Point","coordinates":[0.5,0.5]}`, string(faults["evt-9"]), "the bowtie's fault point")
	require.NotContains(t, faults, "evt-3857", "a CRS mismatch has no fault location")

	// Without blobs, offloaded geometries are null, properties kept.
	noBlobs := c
	noBlobs.blobs = ""
	r = noBlobs.must(exitOK, nil, "export", "--format", "geojson", "--class", "resource_exhausted")
	fc = featureCollection{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &fc))
	require.Len(t, fc.geometries(), 2)
	require.Equal(t, "null", string(fc.Features[0].Geometry))
	require.Equal(t, "offloaded_not_fetched", fc.Features[0].Properties["geometry_status"])

	// --split-by-epsg: one file per source CRS, each with its named crs,
	// coordinates untouched.
	dir := t.TempDir()
	r = c.must(exitOK, nil, "export", "--split-by-epsg", "--class", "crs_mismatch,invalid_geometry", "-o", "json", filepath.Join(dir, "dl.geojson"))
	var sum exportSummary
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sum))
	require.ElementsMatch(t, []string{filepath.Join(dir, "dl.epsg3857.geojson"), filepath.Join(dir, "dl.epsg4326.geojson"),
		filepath.Join(dir, "dl.unknown-crs.geojson")}, sum.Files)
	b, err := os.ReadFile(filepath.Join(dir, "dl.epsg3857.geojson"))
	require.NoError(t, err)
	fc = featureCollection{}
	require.NoError(t, json.Unmarshal(b, &fc))
	require.Equal(t, map[string]any{"type": "name", "properties": map[string]any{"name": "urn:ogc:def:crs:EPSG::3857"}}, fc.CRS)
	require.Len(t, fc.geometries(), 2)
	require.Contains(t, string(fc.Features[0].Geometry), "1113194.9", "not reprojected")

	// A failed export leaves what the file held: an unknown --to-epsg
	// fails every reprojection... and a store that is not there fails
	// before a byte is written.
	keep := filepath.Join(dir, "keep.geojson")
	require.NoError(t, os.WriteFile(keep, []byte("before"), 0o644))
	gone := cli{t: t, store: "sqlite://" + filepath.Join(dir, "missing.db")}
	gone.must(exitStore, nil, "export", keep)
	b, err = os.ReadFile(keep)
	require.NoError(t, err)
	require.Equal(t, "before", string(b))
	c.must(exitOK, nil, "export", "--reason", "self_intersection", keep)
	b, err = os.ReadFile(keep)
	require.NoError(t, err)
	fc = featureCollection{}
	require.NoError(t, json.Unmarshal(b, &fc))
	require.Len(t, fc.geometries(), 4)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), "."), "no temporary file left: %s", e.Name())
	}

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
	c.must(exitUsage, nil, "export", "--split-by-epsg", "-")
	r = c.must(exitUsage, nil, "export", "-o", "out.geojson")
	require.Contains(t, r.stderr, "name a file as an argument")
}

// TestExportGeoPackage reads back the GeoPackage export with SQLite: the
// application id and version GeoPackage 1.3 requires, its metadata tables,
// both layers in EPSG:4326 with their extent, and each geometry blob's
// GeoPackage header followed by the WKB of the exported geometry.
func TestExportGeoPackage(t *testing.T) {
	t.Parallel()
	c := seeded(t)
	file := filepath.Join(t.TempDir(), "dl.gpkg")
	c.must(exitOK, nil, "export", "--class", "invalid_geometry,crs_mismatch", file)
	db, err := sql.Open("sqlite", "file:"+file+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	var appID, version int
	require.NoError(t, db.QueryRow("PRAGMA application_id").Scan(&appID))
	require.NoError(t, db.QueryRow("PRAGMA user_version").Scan(&version))
	require.Equal(t, 0x47504B47, appID, "GPKG")
	require.Equal(t, 10300, version)
	rows, err := db.Query("SELECT table_name, data_type, srs_id, min_x, max_x FROM gpkg_contents ORDER BY table_name")
	require.NoError(t, err)
	var layers []string
	for rows.Next() {
		var name, kind string
		var srs int
		var minX, maxX float64
		require.NoError(t, rows.Scan(&name, &kind, &srs, &minX, &maxX))
		require.Equal(t, "features", kind)
		require.Equal(t, 4326, srs)
		require.LessOrEqual(t, minX, maxX)
		layers = append(layers, name)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"dead_letters", "fault_points"}, layers)
	var geomType string
	require.NoError(t, db.QueryRow("SELECT geometry_type_name FROM gpkg_geometry_columns WHERE table_name = 'fault_points'").Scan(&geomType))
	require.Equal(t, "POINT", geomType)

	var blob []byte
	var status string
	require.NoError(t, db.QueryRow("SELECT geom, geometry_status FROM dead_letters WHERE event_id = 'evt-9'").Scan(&blob, &status))
	require.Equal(t, "ok", status)
	require.Equal(t, []byte("GP"), blob[:2])
	require.Equal(t, uint32(4326), byteorder.LittleEndian.Uint32(blob[4:8]))
	g, err := wkb.Unmarshal(blob[8+32:])
	require.NoError(t, err)
	require.Equal(t, orb.Polygon{{{0, 0}, {1, 1}, {1, 0}, {0, 1}, {0, 0}}}, g, "the bowtie as it is")
	require.NoError(t, db.QueryRow("SELECT geom FROM dead_letters WHERE event_id = 'evt-3857'").Scan(&blob))
	g, err = wkb.Unmarshal(blob[8+32:])
	require.NoError(t, err)
	require.InDelta(t, 10, g.(orb.Point)[0], 1e-6, "reprojected to EPSG:4326")
	var faults int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM fault_points WHERE event_id = 'evt-9'").Scan(&faults))
	require.Equal(t, 1, faults)
	var nulls int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM dead_letters WHERE geom IS NULL AND geometry_status = 'non_finite'").Scan(&nulls))
	require.Equal(t, 2, nulls, "evt-nan and evt-infinity, properties kept")
	c.must(exitUsage, nil, "export", "--to-epsg", "3857", file)
}
