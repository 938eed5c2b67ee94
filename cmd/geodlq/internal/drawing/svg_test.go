package drawing

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

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
			[]string{">vertex 2 not finite</text>"}},
		{"NaN vertex without a finite neighbour", orb.LineString{{nan, 0}, {nan, 1}}, Mark{Fault: &classify.Fault{Part: -1, Ring: -1, Vertex: 1}},
			[]string{"(no finite coordinates to draw)"}},
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

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestSVGFaultsGolden draws each kind of fault and compares the SVG with
// testdata/<name>.svg (go test -run TestSVGFaultsGolden -update rewrites
// them; look at them before committing): both crossing segments of a
// self-intersection, the missing closing segment of an unclosed ring, the
// place of a NaN vertex between its neighbours, the positions outside
// EPSG:4326's range, and a long caption wrapped.
func TestSVGFaultsGolden(t *testing.T) {
	nan := math.NaN()
	world := &orb.Bound{Min: orb.Point{-180, -90}, Max: orb.Point{180, 90}}
	long := "Self-intersection[0.5 0.5] — and a reason long enough to need wrapping twice, because GEOS, PROJ and operators all write long messages that must never be cut off mid-word"
	tests := []struct {
		name     string
		g        orb.Geometry
		m        Mark
		caption  []string
		wants    []string
		redLines int // thick red segments
	}{
		{"self_intersection", orb.Polygon{{{0, 0}, {1, 1}, {1, 0}, {0, 1}, {0, 0}}},
			Mark{Location: &orb.Point{0.5, 0.5}, Fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0, OnSegment: true}, Kind: classify.KindSelfIntersection},
			[]string{long}, []string{">0</text>", ">1</text>", ">2</text>", ">3</text>", "cut off mid-word</text>"}, 2},
		{"ring_self_intersection", orb.Polygon{{{0, 0}, {4, 0}, {2, 2}, {4, 4}, {0, 4}, {2, 2}, {0, 0}}},
			Mark{Location: &orb.Point{2, 2}, Fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 2}, Kind: classify.KindRingSelfIntersection},
			nil, nil, 4},
		{"ring_not_closed", orb.Polygon{{{10, 10}, {14, 10}, {14, 13}, {10, 13}}},
			Mark{Location: &orb.Point{10, 10}, Fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0}, Kind: classify.KindRingNotClosed},
			nil, []string{`stroke-dasharray="7 5"`, ">missing closing segment</text>"}, 0},
		{"invalid_coordinate", orb.Polygon{{{0, 0}, {4, 0}, {nan, 3}, {0, 3}, {0, 0}}},
			Mark{Fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 2}, Kind: classify.KindInvalidCoordinate},
			nil, []string{">vertex 2 not finite</text>", `stroke-dasharray="4 4"`}, 0},
		{"out_of_range", orb.Polygon{{{170, 10}, {200, 10}, {200, 20}, {170, 20}, {170, 10}}},
			Mark{Location: &orb.Point{200, 10}, Fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 1}, Kind: classify.KindOutOfRange, Range: world},
			nil, []string{">1 out of range</text>", ">2 out of range</text>", `stroke-dasharray="6 4"`}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, SVG(&b, tt.g, tt.m, Options{Title: tt.name, Caption: tt.caption, Unit: "°"}))
			got := b.String()
			golden := filepath.Join("testdata", tt.name+".svg")
			if *update {
				require.NoError(t, os.MkdirAll("testdata", 0o755))
				require.NoError(t, os.WriteFile(golden, b.Bytes(), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err)
			require.Equal(t, string(want), got)
			require.Equal(t, tt.redLines, strings.Count(got, `stroke="#d7191c" stroke-width="4"`), "thick red segments")
			for _, w := range tt.wants {
				require.Contains(t, got, w)
			}
			require.Contains(t, got, " °</text>", "a scale bar")
			for _, line := range strings.Split(got, "\n") {
				if strings.HasPrefix(line, `<text x="8"`) {
					require.Less(t, len([]rune(line)), 200, "caption lines are wrapped")
				}
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

// TestSVGLabelsDoNotOverlap draws a large ring whose crossing segments'
// vertices lie a few pixels apart (as Sudan's bowtie at 1:110m: "46",
// "47", "49" written over each other): every label gets a place of its
// own, inside the drawing, tied to its vertex by a leader when it had to
// move away; numbers at the same pixel become one label.
func TestSVGLabelsDoNotOverlap(t *testing.T) {
	var ring orb.Ring
	for i := range 46 {
		a := float64(i) / 46 * math.Pi
		ring = append(ring, orb.Point{10 * math.Cos(a), 10 * math.Sin(a)})
	}
	// 46..49: a small bowtie, 0.2 units (about 6 pixels) across.
	ring = append(ring, orb.Point{-10, 0}, orb.Point{-9.8, 0.2}, orb.Point{-9.8, 0}, orb.Point{-10, 0.2})
	for i := range 20 {
		a := math.Pi + float64(i)/20*math.Pi
		ring = append(ring, orb.Point{10 * math.Cos(a), 10 * math.Sin(a)})
	}
	ring = append(ring, ring[0])
	var b bytes.Buffer
	require.NoError(t, SVG(&b, orb.Polygon{ring}, Mark{Location: &orb.Point{-9.9, 0.1}, Kind: classify.KindSelfIntersection,
		Fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 46, OnSegment: true}}, Options{}))
	s := b.String()
	re := regexp.MustCompile(`<text x="([-\d.]+)" y="([-\d.]+)" [^>]*font-weight="bold"[^>]*>([^<]*)</text>`)
	ms := re.FindAllStringSubmatch(s, -1)
	var texts []string
	var boxes []box
	for _, m := range ms {
		x, _ := strconv.ParseFloat(m[1], 64)
		y, _ := strconv.ParseFloat(m[2], 64)
		texts = append(texts, m[3])
		boxes = append(boxes, box{x, y - labelAscent, x + charWidth*float64(utf8.RuneCountInString(m[3])), y + labelDescent})
	}
	require.ElementsMatch(t, []string{"46", "47", "48", "49"}, texts, "every vertex of both crossing segments is labelled")
	for i := range boxes {
		require.GreaterOrEqual(t, boxes[i].x0, 0.0)
		require.LessOrEqual(t, boxes[i].x1, 640.0)
		for j := range i {
			require.False(t, boxes[i].overlaps(boxes[j]), "%q at %v overlaps %q at %v", texts[i], boxes[i], texts[j], boxes[j])
		}
	}

	// Ten labels at one spot: each its own place, the farther ones tied
	// to the spot by a leader line.
	var crowd []label
	for i := range 10 {
		crowd = append(crowd, label{x: 300, y: 200, text: "label " + strconv.Itoa(i), color: red})
	}
	out := placeLabels(crowd, 640, 400)
	ms = re.FindAllStringSubmatch(out, -1)
	require.Len(t, ms, 10)
	boxes = boxes[:0]
	for _, m := range ms {
		x, _ := strconv.ParseFloat(m[1], 64)
		y, _ := strconv.ParseFloat(m[2], 64)
		b := box{x, y - labelAscent, x + charWidth*float64(utf8.RuneCountInString(m[3])), y + labelDescent}
		for _, o := range boxes {
			require.False(t, b.overlaps(o), "%v overlaps %v", b, o)
		}
		boxes = append(boxes, b)
	}
	require.Contains(t, out, `<line x1="300" y1="200"`, "a leader ties a moved label to its spot")

	// Two numbers at one pixel: one label.
	require.Equal(t, []label{{x: 1, y: 1, text: "3, 7, 46", color: red}, {x: 9, y: 9, text: "x", color: red}},
		mergeLabels([]label{{1, 1, "46", red}, {1.5, 1, "7", red}, {9, 9, "x", red}, {2, 2, "3", red}, {1, 1, "7", red}}))
}
