//go:build cgo

package spatial_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/spatial"
)

// starPolygon is a ring of n positions, each joined to the one almost
// opposite: every segment crosses nearly every other (n²/2 crossings).
func starPolygon(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"type":"Polygon","coordinates":[[`)
	for i := 0; i <= n; i++ {
		k := i * ((n - 1) / 2) % n
		a := 2 * math.Pi * float64(k) / float64(n)
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "[%.6f,%.6f]", 10*math.Cos(a), 10*math.Sin(a))
	}
	b.WriteString("]]}")
	return []byte(b.String())
}

// holesPolygon is a shell with n square holes, the last outside it.
func holesPolygon(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"type":"Polygon","coordinates":[[[-1,-1],[1000,-1],[1000,1000],[-1,1000],[-1,-1]]`)
	for i := range n {
		x, y := float64(i%100)*9, float64(i/100)*9
		if i == n-1 {
			x, y = 2000, 2000
		}
		fmt.Fprintf(&b, ",[[%g,%g],[%g,%g],[%g,%g],[%g,%g],[%g,%g]]", x, y, x+5, y, x+5, y+5, x, y+5, x, y)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// TestMakeValidRepairBudgets: geometries whose GEOS repair would take
// minutes for a few kilobytes are refused, at once, before GEOS is asked;
// the same geometries under the limits are repaired.
func TestMakeValidRepairBudgets(t *testing.T) {
	c := newChecker(t, nil)
	tests := []struct {
		name, in string
		reason   string
	}{
		{"a 42 KB star: two million crossings", string(starPolygon(2001)), "more than 10000 segment crossings"},
		{"10,000 holes", string(holesPolygon(10_000)), "10001 rings and lines (more than 10000)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			out, _, err := c.MakeValid([]byte(tt.in))
			require.Nil(t, out)
			ce := requireClassified(t, err, classify.ClassResourceExhausted, classify.StageTopologyValidation, classify.KindVertexBudget)
			require.Contains(t, ce.Geometry.Reason, tt.reason)
			require.Less(t, time.Since(start), 5*time.Second)
		})
	}
	// Under the limits, the same shapes are repaired.
	loose := newChecker(t, &spatial.Options{MaxRepairCrossings: 100_000, MaxRepairParts: 100_000})
	_, info, err := loose.MakeValid(starPolygon(101))
	require.NoError(t, err)
	require.False(t, info.WasValid)
	_, _, err = loose.MakeValid(holesPolygon(200))
	require.NoError(t, err)
	strict := newChecker(t, &spatial.Options{MaxRepairVertices: 4})
	_, _, err = strict.MakeValid([]byte(`{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`))
	requireClassified(t, err, classify.ClassResourceExhausted, classify.StageTopologyValidation, classify.KindVertexBudget)
	// The budget applies before GEOS is asked anything, valid or not.
	_, _, err = strict.MakeValid([]byte(`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}`))
	requireClassified(t, err, classify.ClassResourceExhausted, classify.StageTopologyValidation, classify.KindVertexBudget)
	_, info, err = strict.MakeValid([]byte(`{"type":"LineString","coordinates":[[0,0],[1,1]]}`))
	require.NoError(t, err)
	require.True(t, info.WasValid)
}

// TestCRSMessagesAreClipped: an untrusted CRS definition is quoted in
// messages only in part, however long it is.
func TestCRSMessagesAreClipped(t *testing.T) {
	c := newChecker(t, nil)
	long := "EPSG:" + strings.Repeat("9", 1<<20) + "é"
	_, err := c.CheckEvent([]byte(`{"crs":"` + long + `","geometry":{"type":"Point","coordinates":[1,2]}}`))
	ce := requireClassified(t, err, classify.ClassCRSMismatch, classify.StageCRSTransform, classify.KindCRSUnparseable)
	require.Less(t, len(ce.Geometry.Reason), 400)
	require.Less(t, len(err.Error()), 500)
	require.Contains(t, ce.Geometry.Reason, fmt.Sprintf("…(%d bytes)", len(long)))
	var cerr *spatial.CRSError
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, long, cerr.Definition, "the definition itself is kept whole")
	require.Equal(t, `"EPSG:4326"`, spatial.QuoteClipped("EPSG:4326"))
	clipped := spatial.QuoteClipped(strings.Repeat("é", 150))
	require.True(t, strings.HasSuffix(clipped, `"…(300 bytes)`), clipped)
}
