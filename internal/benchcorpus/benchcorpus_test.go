package benchcorpus_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/benchcorpus"
	"github.com/geodlq/geodlq/spatial"
)

// writeAtlas writes a tiny world-atlas: n unit squares as countries at
// every scale (quantized, as world-atlas ships them), and a land of two
// squares, one of them a bowtie.
func writeAtlas(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	var arcs, geoms []string
	for i := range n {
		// Quantized deltas: a 10×10 square at (20i, 0), scale 0.1.
		arcs = append(arcs, fmt.Sprintf("[[%d,0],[10,0],[0,10],[-10,0],[0,-10]]", 20*i))
		geoms = append(geoms, fmt.Sprintf(`{"type":"Polygon","id":"%d","arcs":[[%d]],"properties":{"name":"C%d"}}`, i, i, i))
	}
	geoms = append(geoms, `{"type":null,"id":"none"}`)
	countries := fmt.Sprintf(`{"type":"Topology","transform":{"scale":[0.1,0.1],"translate":[-50,10]},"objects":{"countries":{"type":"GeometryCollection","geometries":[%s]}},"arcs":[%s]}`,
		strings.Join(geoms, ","), strings.Join(arcs, ","))
	for _, scale := range []string{"110m", "50m", "10m"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "countries-"+scale+".json"), []byte(countries), 0o644))
	}
	land := `{"type":"Topology","objects":{"land":{"type":"GeometryCollection","geometries":[{"type":"MultiPolygon","arcs":[[[0]],[[1]]]}]}},
		"arcs":[[[0,0],[1,0],[1,1],[0,1],[0,0]],[[5,5],[6,6],[6,5],[5,6],[5,5]]]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "land-10m.json"), []byte(land), 0o644))
	return dir
}

// TestGenerate generates a corpus from a tiny atlas and checks every
// event with a Checker: the real countries and the large event pass,
// every corruption fails as its variant says.
func TestGenerate(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 40 MB event")
	}
	c, err := spatial.NewChecker(&spatial.Options{MaxBytes: -1, MaxVertices: -1, MaxParts: -1})
	require.NoError(t, err)
	defer c.Close()
	check := func(g []byte) (int, bool) {
		err := c.CheckGeometry(g)
		if err == nil {
			return 0, true
		}
		if d := classify.DetailOf(err); d != nil && d.Fault != nil {
			return d.Fault.Part, false
		}
		return -1, false
	}
	var out bytes.Buffer
	st, err := benchcorpus.Generate(writeAtlas(t, 5), &out, check)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"real": 15, "bowtie": 1, "nan": 1, "unclosed": 1, "crs_differs": 1, "mercator_as_4326": 1, "large": 1}, st.ByVariant)
	require.Equal(t, 21, st.Events)
	require.Equal(t, out.Len(), st.Bytes)
	require.Equal(t, 1, st.LargeDropped, "the bowtie of land is left out")
	// About LargeBytes: the added vertices' coordinates are longer than
	// the tiny atlas's integers, so more so here than from world-atlas.
	require.Greater(t, st.Largest, benchcorpus.LargeBytes/2)
	require.Less(t, st.Largest, 2*benchcorpus.LargeBytes)

	want := map[string]classify.Class{"bowtie": classify.ClassInvalidGeometry, "nan": classify.ClassInvalidGeometry,
		"unclosed": classify.ClassInvalidGeometry, "crs_differs": classify.ClassCRSMismatch}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 2*benchcorpus.LargeBytes)
	for sc.Scan() {
		line := sc.Bytes()
		var f struct {
			ID string `json:"id"`
		}
		if !bytes.Contains(line, []byte("NaN")) {
			require.NoError(t, json.Unmarshal(line, &f), "%.200s", line)
		}
		_, err := c.CheckEvent(line)
		variant := "real"
		for v := range want {
			if bytes.Contains(line[:min(len(line), 200)], []byte(`-`+v+`"`)) {
				variant = v
			}
		}
		switch {
		case bytes.Contains(line[:min(len(line), 200)], []byte(`-mercator_as_4326"`)):
			require.Error(t, err, "%.200s", line)
		case variant == "real":
			require.NoError(t, err, "%.200s", line)
		default:
			require.Equal(t, want[variant], classify.Classify(err), "%s: %v", variant, err)
		}
	}
	require.NoError(t, sc.Err())
}
