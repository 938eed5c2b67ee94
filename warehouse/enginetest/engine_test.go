package enginetest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/warehouse"
)

// syncReport is the JSON of geodlq warehouse sync --json.
type syncReport struct {
	Run          int64    `json:"run"`
	Rows         int64    `json:"rows"`
	Skipped      int64    `json:"skipped"`
	Files        []string `json:"files"`
	DatasetRows  int64    `json:"dataset_rows"`
	DatasetFiles int64    `json:"dataset_files"`
}

func syncCLI(t *testing.T, storeURL, dir string, extra ...string) syncReport {
	t.Helper()
	var rep syncReport
	out := geodlq(t, append([]string{"--store", storeURL, "--json", "warehouse", "sync", dir, "--settle", "0s"}, extra...)...)
	require.NoError(t, json.Unmarshal(jsonDoc(out), &rep), string(out))
	return rep
}

// jsonDoc is the JSON document in a command's output, without a notice
// printed before it (the command prints "Flag --json has been
// deprecated" there while it moves to -o json).
func jsonDoc(out []byte) []byte {
	if i := bytes.IndexByte(out, '{'); i > 0 {
		return out[i:]
	}
	return out
}

// TestWarehouseSyncReadByDuckDB fills a real store, syncs it with the
// geodlq command, and reads the dataset with DuckDB: the rows, the
// aggregates geodlq stats reports, the column types, an incremental run,
// and the GeoParquet metadata and geometries of every file.
func TestWarehouseSyncReadByDuckDB(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			const first, more = 600, 90
			readURL, writeURL := be.open(t)
			w := openStore(t, writeURL, true)
			fill(t, w, 0, first)
			// Two records that are not envelopes: stats and sync pass over them.
			ctx := context.Background()
			for _, body := range []string{"not an envelope", `{"schema_version":"dlq.v0"}`} {
				require.NoError(t, w.Publish(ctx, dest, &broker.Message{Body: []byte(body)}))
			}
			r := openStore(t, readURL, false)
			total := countEnvelopes(t, r)
			require.Equal(t, first, total)

			dir := t.TempDir()
			rep := syncCLI(t, readURL, dir)
			require.EqualValues(t, first, rep.Rows)
			require.EqualValues(t, 2, rep.Skipped)
			db := duck(t)
			src := "read_parquet('" + glob(dir) + "', hive_partitioning = true)"

			// The row count is the store's record count, each record once.
			require.Equal(t, [][]string{{itoa(first), itoa(first)}},
				scan(t, db, "SELECT count(*), count(DISTINCT record_id) FROM "+src))

			// The by-class and by-prefix aggregates are geodlq stats'.
			var stats struct {
				Total          int            `json:"total"`
				ByClass        map[string]int `json:"by_class"`
				BySourcePrefix map[string]int `json:"by_source_prefix"`
				ByEPSG         map[string]int `json:"by_epsg"`
			}
			require.NoError(t, json.Unmarshal(jsonDoc(geodlq(t, "--store", readURL, "--json", "stats", "--all")), &stats))
			require.Equal(t, first, stats.Total)
			require.Equal(t, stats.ByClass, counts(t, scan(t, db, "SELECT failure_class, count(*) FROM "+src+" GROUP BY 1")))
			require.Equal(t, stats.ByClass, counts(t, scan(t, db, "SELECT class, count(*) FROM "+src+" GROUP BY 1")), "the class partition is the class")
			require.Equal(t, stats.BySourcePrefix, counts(t, scan(t, db, "SELECT coalesce(source_prefix, '(none)'), count(*) FROM "+src+" GROUP BY 1")))
			if n, ok := stats.ByEPSG["-"]; ok { // how the reworked command shows "unknown"
				delete(stats.ByEPSG, "-")
				stats.ByEPSG["0"] = n
			}
			require.Equal(t, stats.ByEPSG, counts(t, scan(t, db, "SELECT epsg::VARCHAR, count(*) FROM "+src+" GROUP BY 1")))
			require.Len(t, stats.BySourcePrefix, 5)

			// The types are the warehouse's: timestamps, integers, a date
			// partition.
			types := map[string]string{}
			for _, row := range scan(t, db, "SELECT column_name, column_type FROM (DESCRIBE SELECT * EXCLUDE (fault_point, geometry_bbox) FROM "+src+")") {
				types[row[0]] = row[1]
			}
			for col, want := range map[string]string{
				"dead_lettered_at": "TIMESTAMP WITH TIME ZONE", "first_seen_at": "TIMESTAMP WITH TIME ZONE",
				"exported_at": "TIMESTAMP WITH TIME ZONE", "published_at": "TIMESTAMP WITH TIME ZONE",
				"epsg": "INTEGER", "attempts": "INTEGER", "source_partition": "INTEGER", "source_offset": "BIGINT",
				"payload_size": "BIGINT", "idempotency_key_derived": "BOOLEAN", "dead_lettered_date": "DATE",
				"bbox": "STRUCT(xmin DOUBLE, ymin DOUBLE, xmax DOUBLE, ymax DOUBLE)", "payload": "BLOB",
				"failure_class": "VARCHAR", "source_prefix": "VARCHAR",
			} {
				require.Equal(t, want, types[col], col)
			}
			require.Equal(t, [][]string{{"0"}}, scan(t, db, "SELECT count(*) FROM "+src+" WHERE dead_lettered_date <> CAST(dead_lettered_at AT TIME ZONE 'UTC' AS DATE)"))
			require.Equal(t, [][]string{{"0"}}, scan(t, db, "SELECT count(*) FROM "+src+" WHERE published_at IS NULL"),
				"the store's published_at is in every row")

			// An incremental run adds exactly the new dead letters.
			fill(t, w, first, more)
			rep2 := syncCLI(t, readURL, dir)
			require.EqualValues(t, more, rep2.Rows)
			require.EqualValues(t, first+more, rep2.DatasetRows)
			require.Equal(t, [][]string{{itoa(first + more), itoa(first + more)}},
				scan(t, db, "SELECT count(*), count(DISTINCT event_id) FROM "+src))
			var newIDs []string
			for _, f := range rep2.Files {
				for _, row := range scan(t, db, "SELECT event_id FROM read_parquet(?)", filepath.Join(dir, f)) {
					newIDs = append(newIDs, row[0])
				}
			}
			var want []string
			for i := first; i < first+more; i++ {
				want = append(want, "ev-"+itoa(i))
			}
			slices.Sort(newIDs)
			slices.Sort(want)
			require.Equal(t, want, newIDs, "the second run's files hold exactly the new events")
			require.Zero(t, syncCLI(t, readURL, dir).Rows, "a third run finds nothing new")

			checkGeoParquet(t, db, dir)
		})
	}
}

// checkGeoParquet validates every data file's geo metadata against the
// GeoParquet 1.1 JSON Schema and decodes its geometry columns as WKB of
// the types the metadata states, inside the bbox it states.
func checkGeoParquet(t *testing.T, db *sql.DB, dir string) {
	t.Helper()
	schema, err := geoSchema()
	require.NoError(t, err)
	var files []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".parquet") && !strings.Contains(p, warehouse.MetaDir) {
			files = append(files, p)
		}
		return err
	}))
	require.NotEmpty(t, files)
	// DuckDB would decode GeoParquet geometries itself; read the WKB.
	_, err = db.Exec("SET enable_geoparquet_conversion = false")
	require.NoError(t, err)
	defer db.Exec("SET enable_geoparquet_conversion = true")
	crsSeen := map[string]bool{}
	for _, f := range files {
		kv := scan(t, db, "SELECT decode(value) FROM parquet_kv_metadata(?) WHERE decode(key) = 'geo'", f)
		require.Len(t, kv, 1, f)
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(kv[0][0]))
		require.NoError(t, err)
		require.NoError(t, schema.Validate(doc), "%s: %s", f, kv[0][0])

		var meta geoMeta
		require.NoError(t, json.Unmarshal([]byte(kv[0][0]), &meta))
		require.Equal(t, "1.1.0", meta.Version)
		require.Equal(t, warehouse.ColumnGeometryBBox, meta.PrimaryColumn)
		require.Contains(t, meta.Columns, meta.PrimaryColumn)
		cov := meta.Columns[warehouse.ColumnGeometryBBox].Covering
		require.NotNil(t, cov)
		for _, k := range []string{"xmin", "ymin", "xmax", "ymax"} {
			require.Equal(t, []string{"bbox", k}, cov.BBox[k])
		}

		// The file's CRS is its rows' geometry_crs.
		crs := scan(t, db, "SELECT DISTINCT coalesce(geometry_crs, '') FROM read_parquet(?)", f)
		require.Len(t, crs, 1, "one CRS per file: %s", f)
		crsSeen[crs[0][0]] = true
		for name, col := range meta.Columns {
			switch crs[0][0] {
			case warehouse.CRS84:
				require.Nil(t, col.CRS, "OGC:CRS84 is GeoParquet's default: no crs member")
			case "":
				require.JSONEq(t, "null", string(col.CRS), "an unknown CRS is crs null")
			default:
				var id struct {
					ID struct {
						Authority string `json:"authority"`
						Code      int    `json:"code"`
					} `json:"id"`
				}
				require.NoError(t, json.Unmarshal(col.CRS, &id), name)
				require.Equal(t, "EPSG", id.ID.Authority)
				require.Equal(t, crs[0][0], "EPSG:"+itoa(id.ID.Code))
			}

			// Every value decodes as WKB of the stated type, within the
			// stated bbox, and the covering matches the polygon.
			rows, err := db.Query("SELECT "+name+", bbox.xmin, bbox.ymin, bbox.xmax, bbox.ymax FROM read_parquet(?) WHERE "+name+" IS NOT NULL", f)
			require.NoError(t, err)
			n := 0
			for rows.Next() {
				var wkb []byte
				var x0, y0, x1, y1 sql.NullFloat64
				require.NoError(t, rows.Scan(&wkb, &x0, &y0, &x1, &y1))
				typ, pts, err := decodeWKB(wkb)
				require.NoError(t, err, "%s %s", f, name)
				require.Contains(t, col.GeometryTypes, typ, "%s %s", f, name)
				for _, p := range pts {
					require.True(t, p[0] >= col.BBox[0] && p[1] >= col.BBox[1] && p[0] <= col.BBox[2] && p[1] <= col.BBox[3], "%s %s: %v outside %v", f, name, p, col.BBox)
				}
				if name == warehouse.ColumnGeometryBBox {
					require.Len(t, pts, 5)
					require.Equal(t, [2]float64{x0.Float64, y0.Float64}, pts[0])
					require.Equal(t, [2]float64{x1.Float64, y1.Float64}, pts[2])
					require.Equal(t, pts[0], pts[4], "a closed ring")
				}
				n++
			}
			require.NoError(t, rows.Err())
			rows.Close()
			if n == 0 {
				require.Nil(t, col.BBox, "no geometry, no bbox")
			}
		}
	}
	require.True(t, crsSeen["EPSG:4326"] && crsSeen["EPSG:3857"] && crsSeen[warehouse.CRS84] && crsSeen[""], "%v", crsSeen)
}

// TestExportParquetFile writes one GeoParquet file with geodlq export and
// reads it with DuckDB, whose GeoParquet reader decodes the geometries.
func TestExportParquetFile(t *testing.T) {
	readURL, writeURL := backends[0].open(t)
	fill(t, openStore(t, writeURL, true), 0, 120)
	// The file goes to standard output (not a terminal here).
	b := geodlq(t, "--store", readURL, "export", "--format", "parquet", "--class", "invalid_geometry")
	out := filepath.Join(t.TempDir(), "dlq.parquet")
	require.NoError(t, os.WriteFile(out, b, 0o644))
	db := duck(t)
	// DuckDB's GeoParquet reader turns the WKB into GEOMETRY values with
	// the file's CRS; as text they are WKT.
	require.Equal(t, [][]string{{"40", "40", "40", "40", "true"}}, scan(t, db, `SELECT count(*), count(fault_point),
		count(*) FILTER (WHERE starts_with(geometry_bbox::VARCHAR, 'POLYGON ((')),
		count(*) FILTER (WHERE starts_with(fault_point::VARCHAR, 'POINT (')),
		bool_and(typeof(fault_point) LIKE 'GEOMETRY(%"id":{"authority":"EPSG","code":4326}}'')')
		FROM read_parquet(?)`, out))
}

func itoa(n int) string { return strconv.Itoa(n) }
