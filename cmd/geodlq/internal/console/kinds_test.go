package console

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/geojson"
)

// TestRecordKinds opens every record of the rich corpus as the page does
// — the record, its geometry, every repair preview — and requires each
// to be explained: an explanation for every class × reason kind, markers
// that are a list (never null: "g.markers is not iterable"), a reason
// for every preview that does not apply (and never "out of range" for a
// record whose coordinates are in range), and a geometry crossing the
// antimeridian drawn as one shape.
func TestRecordKinds(t *testing.T) {
	e := newEnv(t, sqliteKind(), envOptions{readOnly: true, events: richEvents(t)})
	var ans listAnswer
	e.get("/api/records?limit=500", http.StatusOK, &ans)
	require.Len(t, ans.Records, len(richEvents(t)))
	combos := map[string]int{}
	for _, row := range ans.Records {
		combo := row.Class + "/" + row.ReasonKind
		combos[combo]++
		p := recPath(RecordRef{row.Destination, row.ID})
		var rec recordAnswer
		e.get(p, http.StatusOK, &rec)
		if !rec.Envelope {
			continue
		}
		require.NotEmpty(t, rec.Explanation, combo)
		require.NotEqual(t, "See the error message.", rec.Explanation, combo)

		res, body := e.do("GET", p+"/geometry", nil, nil)
		switch res.StatusCode {
		case http.StatusOK:
			var raw map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(body, &raw))
			require.True(t, strings.HasPrefix(string(raw["markers"]), "["), "%s %s: markers %s", combo, rec.EventID, raw["markers"])
		case http.StatusUnprocessableEntity:
			var pr Problem
			require.NoError(t, json.Unmarshal(body, &pr))
			require.NotEmpty(t, pr.Detail, combo)
		default:
			t.Fatalf("%s %s: geometry answered %d: %s", combo, rec.EventID, res.StatusCode, body)
		}

		for _, m := range []string{"make-valid", "reproject", "reproject+make-valid"} {
			res, body := e.do("GET", p+"/repair?method="+url.QueryEscape(m), nil, nil)
			if res.StatusCode == http.StatusUnprocessableEntity {
				continue // cannot be restored: said once, as the geometry's
			}
			require.Equal(t, http.StatusOK, res.StatusCode, "%s %s %s: %s", combo, rec.EventID, m, body)
			var rp repairAnswer
			require.NoError(t, json.Unmarshal(body, &rp))
			if !rp.OK {
				require.NotEmpty(t, rp.Error, "%s %s %s", combo, rec.EventID, m)
			}
			if rec.ReasonKind != "out_of_range" {
				require.NotContains(t, rp.Error, "out of range", "%s %s %s", combo, rec.EventID, m)
			}
			applies := false
			for _, a := range rec.Repairs {
				applies = applies || a == m
			}
			require.Equal(t, !applies, rp.NotApplicable, "%s %s %s: %s", combo, rec.EventID, m, rp.Error)
		}
	}
	for _, want := range []string{
		"invalid_geometry/self_intersection", "invalid_geometry/ring_self_intersection", "invalid_geometry/ring_not_closed",
		"invalid_geometry/too_few_points", "invalid_geometry/invalid_coordinate", "invalid_geometry/hole_outside_shell",
		"invalid_geometry/nested_holes", "invalid_geometry/empty", "crs_mismatch/crs_differs", "crs_mismatch/crs_unparseable",
		"crs_mismatch/out_of_range", "schema_violation/malformed", "schema_violation/missing_geometry",
		"resource_exhausted/vertex_budget", "transient/", "unknown/",
	} {
		require.Positive(t, combos[want], "the corpus has a %s record: %v", want, combos)
	}

	// The bowtie in EPSG:4326: reproject does not apply, and says why.
	var rp repairAnswer
	e.get(recPath(e.recordOf("evt-bowtie"))+"/repair?method=reproject", http.StatusOK, &rp)
	require.True(t, rp.NotApplicable)
	require.Equal(t, "the payload is already in EPSG:4326, the pipeline's CRS: there is nothing to reproject (this record is invalid_geometry)", rp.Error)

	// Chukotka, reprojected: one shape east of 180°, its fault marks next
	// to it; reproject alone leaves it invalid, the chain repairs it.
	chuk := recPath(e.recordOf("evt-chukotka"))
	var g geometryAnswer
	e.get(chuk+"/geometry", http.StatusOK, &g)
	require.Equal(t, "wgs84", g.Display)
	var poly struct{ Coordinates [][][2]float64 }
	require.NoError(t, json.Unmarshal(g.Geometry, &poly))
	lo, hi := 1000.0, -1000.0
	for _, p := range poly.Coordinates[0] {
		lo, hi = min(lo, p[0]), max(hi, p[0])
	}
	require.InDelta(t, 170, lo, 0.01, "west end")
	require.InDelta(t, 190, hi, 0.01, "east end, past 180°: not a band around the world")
	e.get(chuk+"/repair?method=reproject", http.StatusOK, &rp)
	require.True(t, rp.OK, rp.Error)
	require.False(t, rp.ValidAfter)
	require.Contains(t, rp.ReasonAfter, "Self-intersection")
	e.get(chuk+"/repair?method=reproject%2Bmake-valid", http.StatusOK, &rp)
	require.True(t, rp.OK, rp.Error)
	require.True(t, rp.ValidAfter, rp.ReasonAfter)
	require.Contains(t, rp.Detail, "reproject+make_valid")

	// Text search finds an event by a reason.
	var found listAnswer
	e.get("/api/records?q=Hole+lies+outside", http.StatusOK, &found)
	require.Len(t, found.Records, 1)
}

func TestUnwrap(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, want string
	}{
		{"across the antimeridian", `{"type":"LineString","coordinates":[[170,0],[179,1],[-179,2]]}`,
			`{"type":"LineString","coordinates":[[170,0],[179,1],[181,2]]}`},
		{"its middle past 180°: moved back by a turn", `{"type":"LineString","coordinates":[[179,0],[-179,1],[-178,2]]}`,
			`{"type":"LineString","coordinates":[[-181,0],[-179,1],[-178,2]]}`},
		{"a polygon's parts stay together", `{"type":"MultiPolygon","coordinates":[[[[178,0],[179,0],[179,1],[178,0]]],[[[-179,0],[-178,0],[-178,1],[-179,0]]]]}`,
			`{"type":"MultiPolygon","coordinates":[[[[178,0],[179,0],[179,1],[178,0]]],[[[181,0],[182,0],[182,1],[181,0]]]]}`},
		{"around the pole: as it was", `{"type":"Polygon","coordinates":[[[-180,-80],[0,-80],[180,-80],[180,-90],[-180,-90],[-180,-80]]]}`,
			`{"type":"Polygon","coordinates":[[[-180,-80],[0,-80],[180,-80],[180,-90],[-180,-90],[-180,-80]]]}`},
		{"nowhere near it", `{"type":"Polygon","coordinates":[[[10,10],[11,11],[11,10],[10,10]]]}`,
			`{"type":"Polygon","coordinates":[[[10,10],[11,11],[11,10],[10,10]]]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := parseTest(t, tc.in)
			got, _ := unwrap(g)
			require.JSONEq(t, tc.want, encodeTest(t, got))
			require.JSONEq(t, tc.in, encodeTest(t, g), "the input is not modified")
		})
	}
	require.Equal(t, 190.0, nearLon(-170, 181))
	require.Equal(t, -170.0, nearLon(-170, 0))
}

func parseTest(t *testing.T, s string) orb.Geometry {
	t.Helper()
	g, err := geojson.ParseGeometry([]byte(s), geojson.Limits{})
	require.NoError(t, err)
	return g.Geom
}

func encodeTest(t *testing.T, g orb.Geometry) string {
	t.Helper()
	b, err := geojson.Append(nil, g, nil)
	require.NoError(t, err)
	return string(b)
}

// TestShapes: zoomed in, the map gets the failing geometries themselves,
// simplified to a pixel, in longitude/latitude; zoomed out, none.
func TestShapes(t *testing.T) {
	e := newEnv(t, sqliteKind(), envOptions{readOnly: true, events: richEvents(t)})
	var ans shapesAnswer
	e.get("/api/shapes?zoom=3&view=-180,-85,180,85", http.StatusOK, &ans)
	require.Empty(t, ans.Shapes)
	require.Equal(t, minShapeZoom, ans.MinZoom)
	e.get("/api/shapes?zoom=9&view=1,1,2", http.StatusBadRequest, nil)
	e.get("/api/shapes?zoom=99&view=1,1,2,2", http.StatusBadRequest, nil)

	byEvent := func(a shapesAnswer) map[string]shape {
		m := map[string]shape{}
		for _, s := range a.Shapes {
			m[s.EventID] = s
		}
		return m
	}
	// Sudan, around 30°E 15°N: its outline, simplified at zoom 5 and
	// less at zoom 8.
	e.get("/api/shapes?zoom=5&view=20,5,40,25", http.StatusOK, &ans)
	sudan, ok := byEvent(ans)["evt-sudan"]
	require.True(t, ok, "%+v", ans)
	require.Equal(t, "invalid_geometry", sudan.Class)
	require.Equal(t, "self_intersection", sudan.Kind)
	require.LessOrEqual(t, sudan.Vertices, sudan.Of)
	var poly struct {
		Type        string
		Coordinates [][][2]float64
	}
	require.NoError(t, json.Unmarshal(sudan.Geometry, &poly))
	require.Equal(t, "Polygon", poly.Type)

	// The world-spanning geometry of 408,000 positions: a few thousand,
	// around its place on the map.
	var m mapAnswer
	e.get("/api/map?zoom=18&q=evt-world", http.StatusOK, &m)
	require.Len(t, m.Markers, 1)
	lon, lat := m.Markers[0].Lon, m.Markers[0].Lat
	e.get(fmt.Sprintf("/api/shapes?zoom=5&view=%g,%g,%g,%g", lon-10, lat-5, lon+10, lat+5), http.StatusOK, &ans)
	world, ok := byEvent(ans)["evt-world"]
	require.True(t, ok, "%+v", ans)
	require.Greater(t, world.Of, 400_000)
	require.Less(t, world.Vertices, world.Of/10)

	// Chukotka, reprojected: continuous past 180°.
	e.get("/api/shapes?zoom=5&view=160,55,180,75", http.StatusOK, &ans)
	chuk, ok := byEvent(ans)["evt-chukotka"]
	require.True(t, ok, "%+v", ans)
	require.NoError(t, json.Unmarshal(chuk.Geometry, &poly))
	for _, p := range poly.Coordinates[0] {
		require.True(t, p[0] > 160 && p[0] < 200, "%v", p)
	}
}

// TestShapesReadEveryPage: records whose bodies fill more than a page of
// bodies (placeBodyBytes) are each drawn, the pages that follow the first
// read too — none of the records left out silently.
func TestShapesReadEveryPage(t *testing.T) {
	var events []string
	for i := range 3 {
		// A ring of 200,000 positions (about 12 MB of envelope with its
		// payload, inline) with two vertices swapped: self-intersecting.
		const n = 200_000
		var b strings.Builder
		fmt.Fprintf(&b, `{"event_id":"evt-big-%d","source_uri":"s3://provider-big/%d.geojson","geometry":{"type":"Polygon","coordinates":[[`, i, i)
		pts := make([][2]float64, n)
		for k := range n {
			a := 2 * math.Pi * float64(k) / n
			pts[k] = [2]float64{10 + 2*float64(i) + 0.5*math.Cos(a), 10 + 0.5*math.Sin(a)}
		}
		pts[1], pts[2] = pts[2], pts[1]
		for k, p := range append(pts, pts[0]) {
			if k > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "[%.7f,%.7f]", p[0], p[1])
		}
		b.WriteString(`]]}}`)
		events = append(events, b.String())
	}
	// What is tested is that every page is read, not how fast: drawing
	// three 200,000-vertex rings under -race took past the API's default
	// 30 s answer bound on a loaded 2-core machine (CI: 67 s, EOF).
	e := newEnv(t, sqliteKind(), envOptions{readOnly: true, events: events, blobThreshold: 64 << 20, timeouts: Timeouts{Write: 5 * time.Minute}})
	var ans shapesAnswer
	e.get("/api/shapes?zoom=5&view=5,5,20,15", http.StatusOK, &ans)
	got := []string{}
	for _, s := range ans.Shapes {
		got = append(got, s.EventID)
	}
	slices.Sort(got)
	require.Equal(t, []string{"evt-big-0", "evt-big-1", "evt-big-2"}, got, "every record drawn, left %d", ans.Left)
}
