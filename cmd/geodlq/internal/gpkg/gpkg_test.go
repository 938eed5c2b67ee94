package gpkg_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/wkb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/cmd/geodlq/internal/gpkg"
)

func TestBlob(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    orb.Geometry
		ok   bool
	}{
		{"point", orb.Point{10, 50}, true},
		{"bowtie", orb.Polygon{{{0, 0}, {1, 1}, {1, 0}, {0, 1}, {0, 0}}}, true},
		{"collection", orb.Collection{orb.Point{1, 2}, orb.LineString{{0, 0}, {3, 4}}}, true},
		{"not finite", orb.Point{math.NaN(), 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, bound, err := gpkg.Blob(tc.g)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "GP", string(b[:2]))
			require.Equal(t, byte(0), b[2], "version 0")
			require.Equal(t, byte(0b11), b[3], "an XY envelope, little-endian")
			require.Equal(t, uint32(gpkg.SRSID), binary.LittleEndian.Uint32(b[4:]))
			env := [4]float64{}
			for i := range env {
				env[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8+8*i:]))
			}
			require.Equal(t, [4]float64{bound.Min[0], bound.Max[0], bound.Min[1], bound.Max[1]}, env)
			g, err := wkb.Unmarshal(b[40:])
			require.NoError(t, err)
			require.Equal(t, tc.g, g)
		})
	}
}

func TestWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.gpkg")
	w, err := gpkg.Create(ctx, path)
	require.NoError(t, err)
	cols := []gpkg.Column{{Name: "name", Type: gpkg.Text}, {Name: "n", Type: gpkg.Integer}, {Name: `odd "name"`, Type: gpkg.Real}}
	require.NoError(t, w.CreateLayer(ctx, "things", "GEOMETRY", "test", cols))
	require.Error(t, w.CreateLayer(ctx, "things", "POINT", "", nil), "a layer is defined once")
	require.Error(t, w.CreateLayer(ctx, "bad", "POINT", "", []gpkg.Column{{Name: "x", Type: "BLOBBY"}}))
	require.NoError(t, w.Insert(ctx, "things", orb.Point{1, 2}, []any{"a", 1, 0.5}))
	require.NoError(t, w.Insert(ctx, "things", nil, []any{"null geometry", nil, nil}))
	require.NoError(t, w.Insert(ctx, "things", orb.LineString{{-3, -4}, {5, 6}}, []any{"b", int64(2), nil}))
	require.Error(t, w.Insert(ctx, "things", orb.Point{1, 2}, []any{"too few"}))
	require.Error(t, w.Insert(ctx, "nothing", orb.Point{1, 2}, nil))
	require.NoError(t, w.Close(ctx))

	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	var minX, minY, maxX, maxY float64
	require.NoError(t, db.QueryRow("SELECT min_x, min_y, max_x, max_y FROM gpkg_contents WHERE table_name = 'things'").Scan(&minX, &minY, &maxX, &maxY))
	require.Equal(t, []float64{-3, -4, 5, 6}, []float64{minX, minY, maxX, maxY}, "the layer's extent")
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM things WHERE geom IS NULL AND name = 'null geometry'`).Scan(&n))
	require.Equal(t, 1, n)
	var srs string
	require.NoError(t, db.QueryRow("SELECT organization FROM gpkg_spatial_ref_sys WHERE srs_id = 4326").Scan(&srs))
	require.Equal(t, "EPSG", srs)
}

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "gpkg-")
	defer os.RemoveAll(dir)
	w, err := gpkg.Create(ctx, filepath.Join(dir, "faults.gpkg"))
	if err != nil {
		panic(err)
	}
	_ = w.CreateLayer(ctx, "fault_points", "POINT", "where the geometries fail", []gpkg.Column{{Name: "event_id", Type: gpkg.Text}})
	_ = w.Insert(ctx, "fault_points", orb.Point{0.5, 0.5}, []any{"evt-9"})
	fmt.Println(w.Close(ctx))
	// Output: <nil>
}
