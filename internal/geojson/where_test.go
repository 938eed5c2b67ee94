package geojson_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/geojson"
)

func TestWhere(t *testing.T) {
	for _, tc := range []struct {
		name string
		loc  []float64
		f    *classify.Fault
		want string
	}{
		{"bowtie", []float64{0.5, 0.5}, &classify.Fault{Part: -1, Ring: 0, Vertex: 0, OnSegment: true}, "(0.5 0.5) ring 0 segment 0-1"},
		{"multipolygon hole vertex", []float64{-21.9314298037639, 64.1424769349273}, &classify.Fault{Part: 2, Ring: 1, Vertex: 7}, "(-21.9314298037639 64.1424769349273) part 2 ring 1 vertex 7"},
		{"line: no ring", []float64{1, 2}, &classify.Fault{Part: -1, Ring: -1, Vertex: 3}, "(1 2) vertex 3"},
		{"NaN vertex without a location", nil, &classify.Fault{Part: -1, Ring: 0, Vertex: 2}, "ring 0 vertex 2"},
		{"non-finite location", []float64{math.NaN(), math.Inf(1)}, nil, "(NaN Infinity)"},
		{"location only", []float64{3, 4}, nil, "(3 4)"},
		{"a location of one number is none", []float64{3}, nil, ""},
		{"nothing", nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, geojson.Where(tc.loc, tc.f))
		})
	}
}
