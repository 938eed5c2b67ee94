package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/corpus"
)

// fixtureMaxVertices is the vertex budget of the fixture's consumer: the
// rich corpus's large geometry is over it (resource_exhausted).
const fixtureMaxVertices = 300_000

// simulated is the failure a consumer's own code reports for an event
// carrying "simulate": a transient one (connection refused) or one no
// rule knows (unknown).
func simulated(body []byte) error {
	switch {
	case bytes.Contains(body, []byte(`"simulate":"refused"`)):
		return fmt.Errorf("geocoder: %w", syscall.ECONNREFUSED)
	case bytes.Contains(body, []byte(`"simulate":"unknown"`)):
		return errors.New("the parcel registry said no")
	}
	return nil
}

// richEvents is a corpus with every failure kind the console must
// explain, as an on-call operator meets them: the fixture; every failing
// event of internal/corpus (bowties, a GeometryCollection with a bowtie,
// NaN and Infinity, unclosed rings, rings of too few points, holes
// outside shells and nested, an empty polygon, EPSG:3857 declared two
// ways, an unparseable CRS, metres labelled as degrees, missing and null
// geometries, payloads that are not JSON or not GeoJSON); a transient
// and an unknown failure; real countries of Natural Earth (from the
// page's own basemap) carrying their names and capitals in properties
// and their provider under "provider", one of them (Sudan) a bowtie; Chukotka in
// EPSG:3857 crossing the antimeridian; and a world-spanning geometry of
// about 408,000 vertices, over the consumer's vertex budget.
func richEvents(t testing.TB) []string {
	t.Helper()
	out := []string{}
	for _, fe := range fixtureEvents() {
		out = append(out, fe.payload)
	}
	for _, it := range corpus.All() {
		if !it.Valid() {
			out = append(out, string(it.Payload))
		}
	}
	out = append(out,
		`{"event_id":"evt-refused","source_uri":"s3://provider-d/geocode/1.geojson","simulate":"refused","geometry":{"type":"Point","coordinates":[31.2,30.0]}}`,
		`{"event_id":"evt-unknown","source_uri":"s3://provider-d/registry/2.geojson","simulate":"unknown","geometry":{"type":"Point","coordinates":[-43.2,-22.9]}}`,
	)
	for _, c := range []struct {
		name, capital string
		corrupt       func(testing.TB, json.RawMessage) json.RawMessage
		simulate      string
	}{
		{"Sudan", "Khartoum", swapVertices, ""}, // edges across the country
		{"Canada", "Ottawa", tinyBowtie, ""},    // a crossing a few kilometres long: a dot at world zoom
		{"Chile", "Santiago", nil, "refused"},   // valid, its geocoder refused: transient
	} {
		geom := countryGeometry(t, c.name)
		if c.corrupt != nil {
			geom = c.corrupt(t, geom)
		}
		ev := map[string]any{"event_id": "evt-" + strings.ToLower(c.name), "crs": "EPSG:4326",
			"properties": map[string]any{"name": c.name, "capital": c.capital, "provider": "https://naturalearthdata.com/110m"}, "geometry": geom}
		if c.simulate != "" {
			ev["simulate"] = c.simulate
		}
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		out = append(out, string(b))
	}
	out = append(out, chukotka3857(), `{"event_id":"evt-world","source_uri":"s3://provider-w/world.geojson","crs":"EPSG:4326","geometry":`+
		string(corpus.LargeMultiPolygon(408_000*26))+`}`)
	return out
}

// countryGeometry returns a country's geometry from the page's basemap
// (Natural Earth 1:110m), as JSON.
func countryGeometry(t testing.TB, name string) json.RawMessage {
	t.Helper()
	b, err := fs.ReadFile(distFS, "ui/dist/assets/basemap.json")
	require.NoError(t, err)
	var fc struct {
		Features []struct {
			Properties struct{ Name string } `json:"properties"`
			Geometry   json.RawMessage       `json:"geometry"`
		} `json:"features"`
	}
	require.NoError(t, json.Unmarshal(b, &fc))
	for _, f := range fc.Features {
		if f.Properties.Name == name {
			return f.Geometry
		}
	}
	t.Fatalf("no %s in the basemap", name)
	return nil
}

// swapVertices swaps the second and the middle vertex of a Polygon's
// outer ring: its edges cross.
func swapVertices(t testing.TB, geom json.RawMessage) json.RawMessage {
	t.Helper()
	var g struct {
		Type        string        `json:"type"`
		Coordinates [][][]float64 `json:"coordinates"`
	}
	require.NoError(t, json.Unmarshal(geom, &g))
	require.Equal(t, "Polygon", g.Type)
	r := g.Coordinates[0]
	r[1], r[len(r)/2] = r[len(r)/2], r[1]
	b, err := json.Marshal(g)
	require.NoError(t, err)
	return b
}

// tinyBowtie puts a bowtie 0.05° across (a few kilometres: a dot at
// world zoom) on the 10th vertex of a MultiPolygon's first outer ring.
func tinyBowtie(t testing.TB, geom json.RawMessage) json.RawMessage {
	t.Helper()
	var g struct {
		Type        string          `json:"type"`
		Coordinates [][][][]float64 `json:"coordinates"`
	}
	require.NoError(t, json.Unmarshal(geom, &g))
	require.Equal(t, "MultiPolygon", g.Type)
	r := g.Coordinates[0][0]
	p := r[10]
	loop := [][]float64{{p[0] + 0.05, p[1] + 0.05}, {p[0] + 0.05, p[1]}, {p[0], p[1] + 0.05}, {p[0], p[1]}}
	g.Coordinates[0][0] = append(r[:11:11], append(loop, r[11:]...)...)
	b, err := json.Marshal(g)
	require.NoError(t, err)
	return b
}

// chukotka3857 is a polygon around the Chukotka peninsula in Web
// Mercator metres, declared EPSG:3857, as a producer wraps it: its
// vertices east of 180° are written at their longitude minus 360°.
func chukotka3857() string {
	lonlat := [][2]float64{{172, 64.5}, {178, 64.2}, {-178, 64.6}, {-172.5, 64.4}, {-170, 65.8}, {-172, 67}, {-176, 67.8},
		{-179.5, 69.8}, {176, 69.9}, {172, 69.5}, {170, 68}, {172, 64.5}}
	var b strings.Builder
	b.WriteString(`{"event_id":"evt-chukotka","source_uri":"s3://provider-c/chukotka.geojson","crs":"EPSG:3857","geometry":{"type":"Polygon","coordinates":[[`)
	for i, p := range lonlat {
		if i > 0 {
			b.WriteByte(',')
		}
		x := p[0] * 20037508.342789244 / 180
		y := math.Log(math.Tan((90+p[1])*math.Pi/360)) * 20037508.342789244 / math.Pi
		fmt.Fprintf(&b, "[%.2f,%.2f]", x, y)
	}
	b.WriteString(`]]}}`)
	return b.String()
}
