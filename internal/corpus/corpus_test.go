package corpus

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
)

func TestEveryFileHasAnItem(t *testing.T) {
	files, err := fs.Glob(FS, "events/*.json")
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(f, "events/"), ".json"))
	}
	want := Names()
	slices.Sort(want)
	require.Equal(t, want, names)
}

func TestItemsAreConsistent(t *testing.T) {
	seen := map[string]bool{}
	for _, it := range All() {
		t.Run(it.Name, func(t *testing.T) {
			require.False(t, seen[it.Name], "duplicate name")
			seen[it.Name] = true
			require.NotEmpty(t, it.Description)
			require.NotEmpty(t, it.Payload)
			if it.Valid() {
				require.Zero(t, it.Stage)
				require.Empty(t, it.Kind)
				require.Nil(t, it.Fault)
				require.True(t, json.Valid(it.Payload), "a valid event is JSON")
				return
			}
			require.True(t, it.Class.Valid())
			require.True(t, it.Stage.Valid())
			require.NotEmpty(t, it.Kind)
			if it.Reason != "" && it.Kind != classify.KindNestedHoles && it.Class == classify.ClassInvalidGeometry {
				require.Equal(t, it.Kind, classify.KindOfReason(it.Reason))
			}
			if it.Location != nil {
				p, ok := geojson.ParseLocation(it.Reason)
				require.True(t, ok)
				require.Equal(t, *it.Location, p)
			}
		})
	}
	// The brief's minimum set is present.
	for _, name := range []string{
		"valid_polygon", "valid_multipolygon", "bowtie", "unclosed_ring", "too_few_points",
		"hole_outside_shell", "nested_holes", "nan_coordinates", "infinity_coordinates",
		"epsg_3857_declared", "unparseable_crs", "webmercator_labelled_4326", "crs84_ogc", "crs84_urn",
		"crs_null", "missing_geometry", "null_geometry", "null_coordinates", "not_json",
		"geometry_collection_invalid_member", "empty_polygon",
	} {
		_, ok := Lookup(name)
		require.True(t, ok, name)
	}
	_, ok := Lookup("nope")
	require.False(t, ok)
}

func TestAllReturnsCopies(t *testing.T) {
	a := All()
	a[0].Payload[0] = 'X'
	a[len(a)-1].Name = "changed"
	b := All()
	require.NotEqual(t, byte('X'), b[0].Payload[0])
	require.NotEqual(t, "changed", b[len(b)-1].Name)
}

func TestLargeMultiPolygon(t *testing.T) {
	for _, size := range []int{0, 1000, 1 << 20} {
		b := LargeMultiPolygon(size)
		require.GreaterOrEqual(t, len(b), size)
		require.Less(t, len(b), size+2048)
		require.True(t, json.Valid(b))
		require.Equal(t, b, LargeMultiPolygon(size), "deterministic")
		g, err := geojson.ParseGeometry(b, geojson.Limits{MaxVertices: -1})
		require.NoError(t, err)
		require.Equal(t, "MultiPolygon", g.Geom.GeoJSONType())
		require.Nil(t, geojson.Validate(g))
		require.Nil(t, geojson.CheckRange(g))
	}
	ev := LargeEvent(1 << 20)
	require.GreaterOrEqual(t, len(ev), 1<<20)
	require.True(t, json.Valid(ev))
	e, err := geojson.ParseEvent(ev, geojson.Limits{})
	require.NoError(t, err)
	require.Equal(t, "EPSG:4326", e.CRS.Name)
	require.True(t, bytes.HasPrefix(ev, []byte(`{"event_id":"evt-large-1048576"`)))
}

func BenchmarkLargeMultiPolygon40MB(b *testing.B) {
	for b.Loop() {
		_ = LargeMultiPolygon(40 << 20)
	}
}
