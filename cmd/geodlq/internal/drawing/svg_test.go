package drawing

import (
	"bytes"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
)

// TestSVGShapes draws every geometry type, degenerate ones included, and
// checks the document is well formed and says what it could not draw.
func TestSVGShapes(t *testing.T) {
	nan := math.NaN()
	ring := orb.Ring{{0, 0}, {1, 1}, {1, 0}, {0, 1}, {0, 0}}
	long := make(orb.LineString, 20000)
	for i := range long {
		long[i] = orb.Point{float64(i) / 1e6, 0}
	}
	tests := []struct {
		name  string
		g     orb.Geometry
		m     Mark
		wants []string
	}{
		{"point", orb.Point{3, 4}, Mark{Location: &orb.Point{3, 4}}, []string{`r="4"`, `r="10"`}},
		{"vertical line", orb.LineString{{1, 0}, {1, 5}}, Mark{Fault: &classify.Fault{Part: -1, Ring: -1, Vertex: 1}}, []string{`r="8"`}},
		{"polygon with hole", orb.Polygon{ring, {{0.2, 0.2}, {0.3, 0.2}, {0.3, 0.3}, {0.2, 0.2}}}, Mark{}, []string{`fill-rule="evenodd"`}},
		{"multipolygon, fault in part 1", orb.MultiPolygon{{ring}, {ring}},
			Mark{Fault: &classify.Fault{Part: 1, Ring: 0, Vertex: 0, OnSegment: true}}, []string{`stroke-width="4"`}},
		{"collection", orb.Collection{orb.Point{0, 0}, orb.LineString{{0, 0}, {2, 2}}, orb.MultiPoint{{1, 1}}}, Mark{}, []string{"<circle"}},
		{"NaN vertex", orb.Polygon{{{0, 0}, {1, 0}, {nan, 1}, {0, 0}}}, Mark{Fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 2}},
			[]string{"(vertex 2 is not finite and cannot be drawn)"}},
		{"fault outside the geometry", orb.Polygon{ring}, Mark{Fault: &classify.Fault{Part: 3, Ring: 0, Vertex: 0}},
			[]string{"(the fault's part/ring/vertex is not in this geometry)"}},
		{"nothing finite", orb.Point{nan, nan}, Mark{}, []string{"(no finite coordinates to draw)"}},
		{"long line is decimated", long, Mark{}, []string{"<path"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, SVG(&b, tt.g, tt.m, Options{Title: "a <title> & more", Caption: []string{"x < y"}}))
			s := b.String()
			require.True(t, strings.HasPrefix(s, "<svg "))
			require.True(t, strings.HasSuffix(s, "</svg>\n"))
			require.NotContains(t, s, "NaN")
			require.Contains(t, s, "a &lt;title&gt; &amp; more")
			require.Contains(t, s, "x &lt; y")
			for _, w := range tt.wants {
				require.Contains(t, s, w)
			}
			if tt.name == "long line is decimated" {
				require.Less(t, strings.Count(s, " L"), 2000)
			}
		})
	}
}

// TestSVGDeepCollections draws collections nested a million deep with the
// goroutine's stack capped at 1 MiB: every walker of the drawing is
// iterative, so depth costs heap, not stack, and the result is the same
// drawing as the flat collection's.
func TestSVGDeepCollections(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	flat := orb.Collection{orb.Point{0, 0}, orb.Polygon{{{0, 0}, {2, 0}, {2, 2}, {0, 0}}}, orb.LineString{{0, 2}, {2, 0}}}
	var deep orb.Geometry = orb.Collection{flat[0], orb.Collection{flat[1], flat[2]}}
	for range 1_000_000 {
		deep = orb.Collection{deep}
	}
	m := Mark{Fault: &classify.Fault{Part: 0, Ring: 1, Vertex: 0}}
	var want, got bytes.Buffer
	require.NoError(t, SVG(&want, orb.Collection{orb.Collection{flat[0], flat[1], flat[2]}}, m, Options{}))
	require.NoError(t, SVG(&got, deep, m, Options{}))
	require.Equal(t, want.String(), got.String())
	require.Contains(t, got.String(), `fill-rule="evenodd"`)
	require.Contains(t, got.String(), `r="8"`, "the fault, in a nested collection, is marked")
}
