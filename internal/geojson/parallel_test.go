package geojson

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

// parseBoth parses data as an event with one worker and with several (the
// parallel threshold lowered to nothing), and fails unless the results —
// geometry, positions, third ordinates, CRS, or the error with its
// offset — are identical.
func parseBoth(t *testing.T, name string, data []byte, lim Limits) {
	t.Helper()
	seq, serr := ParseEvent(data, lim)
	lim.Workers = 4
	par, perr := ParseEvent(data, lim)
	if fmt.Sprint(serr) != fmt.Sprint(perr) {
		t.Fatalf("%s: sequential error %v, parallel %v", name, serr, perr)
	}
	// Printed, so that NaN equals NaN (third ordinates are NaN where absent).
	if fmt.Sprintf("%#v", seq) != fmt.Sprintf("%#v", par) {
		t.Fatalf("%s: the parallel parse differs", name)
	}
}

// multiPolygon writes a MultiPolygon of n polygons with up to three rings
// of a few positions, compact, as geojson.Append and most producers do.
func multiPolygon(rng *rand.Rand, n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"type":"MultiPolygon","coordinates":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('[')
		for r := range 1 + rng.IntN(3) {
			if r > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('[')
			for k := range 4 + rng.IntN(5) {
				if k > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "[%s,%s]", strconv.FormatFloat(rng.Float64()*360-180, 'g', -1, 64), strconv.FormatFloat(rng.Float64()*180-90, 'g', -1, 64))
			}
			b.WriteByte(']')
		}
		b.WriteByte(']')
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// TestParallelParseMatchesSequential holds the parallel MultiPolygon parse
// to the sequential one on well-formed events and on every way a chunk can
// go wrong: seams in a string after the coordinates, white space, a third
// ordinate, truncation, a broken number, and limits the chunks only reach
// together.
func TestParallelParseMatchesSequential(t *testing.T) {
	defer func(n int) { parallelMinBytes = n }(parallelMinBytes)
	parallelMinBytes = 0
	rng := rand.New(rand.NewPCG(13, 14))
	before := parallelParses.Load()
	defer func() {
		if n := parallelParses.Load() - before; n < 400 {
			t.Errorf("only %d parses went parallel", n)
		}
	}()
	for trial := range 400 {
		mp := multiPolygon(rng, 1+rng.IntN(60))
		event := []byte(`{"crs":"EPSG:4326","geometry":` + string(mp) + `,"properties":{"note":"]]],[[[ ]]],[[[","x":[[[[1]]],[[[2]]]]}}`)
		name := fmt.Sprintf("trial %d", trial)
		parseBoth(t, name, event, Limits{})
		// Mutations: each at a random place.
		at := rng.IntN(len(event))
		mutations := map[string][]byte{
			"space":     insert(event, bytes.LastIndex(event[:max(at, 1)], []byte("],[")), " "),
			"third":     bytes.Replace(event, []byte("],["), []byte(",7],["), 1+rng.IntN(3)),
			"truncated": event[:at],
			"letter":    insert(event, at, "x"),
			"digit":     insert(event, at, "1"),
			"bracket":   insert(event, at, "]"),
		}
		for m, data := range mutations {
			parseBoth(t, name+" "+m, data, Limits{})
		}
		// Limits the whole reaches but no chunk alone.
		g, err := ParseEvent(event, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		parseBoth(t, name+" vertices", event, Limits{MaxVertices: g.Geometry.Vertices - 1})
		parseBoth(t, name+" vertices exactly", event, Limits{MaxVertices: g.Geometry.Vertices})
		parseBoth(t, name+" no vertex limit", event, Limits{MaxVertices: -1})
		parseBoth(t, name+" parts", event, Limits{MaxParts: 1 + rng.IntN(40)})
		parseBoth(t, name+" holes", event, Limits{MaxHoles: 1})
	}
}

func insert(b []byte, at int, s string) []byte {
	at = max(at, 0)
	out := append([]byte(nil), b[:at]...)
	out = append(out, s...)
	return append(out, b[at:]...)
}

// FuzzParallelParse holds the parallel parse (threshold lowered to
// nothing, four workers) to the sequential one on any bytes.
func FuzzParallelParse(f *testing.F) {
	rng := rand.New(rand.NewPCG(15, 16))
	for range 8 {
		f.Add([]byte(`{"geometry":` + string(multiPolygon(rng, 2+rng.IntN(12))) + `,"properties":{"s":"]]],[[["}}`))
	}
	f.Add([]byte(`{"geometry":{"type":"MultiPolygon","coordinates":[[[[0,0],[1,0],[1,1],[0,0]]],[[[5,5],[6,5],[6,6,1],[5,5]]]]}}`))
	defer func(n int) { parallelMinBytes = n }(parallelMinBytes)
	parallelMinBytes = 0
	f.Fuzz(func(t *testing.T, data []byte) {
		parseBoth(t, "input", data, Limits{MaxVertices: 1000, MaxParts: 200, MaxHoles: 3})
	})
}
