// Package benchcorpus generates the check-path benchmark corpus of issue
// 13 from Natural Earth's country and land polygons, as the npm package
// world-atlas (public domain data, TopoJSON) ships them: real polygons at
// three scales, corrupted variants of some of them, and one geometry of
// about 40 MB. The corpus is never committed; scripts/bench-corpus.sh
// installs world-atlas at a pinned version and runs cmd/benchcorpus, and
// [Ensure] runs that script for a benchmark.
//
// Every event is one JSON line, a GeoJSON Feature:
//
//	{"type":"Feature","id":"ne10m-250","properties":{...},"geometry":{...}}
//
// with a "crs" member where the variant needs one. Coordinates are the
// TopoJSON positions dequantized as topojson-client does it (scale ×
// position + translate, in float64) and written in Go's shortest exact
// form, so most have 15 to 17 significant digits, like the output of
// Python's json module or JavaScript's JSON.stringify.
//
// The corpus (version [Version]):
//
//   - real: every country of countries-110m, countries-50m and
//     countries-10m (Polygon or MultiPolygon, as Natural Earth has them);
//   - bowtie: a 50m country whose outer ring has two vertices swapped
//     (its first and its middle one), so that edges cross;
//   - nan: a 50m country with one x written as Python's bare NaN token;
//   - unclosed: a 50m country whose outer ring lost its closing position;
//   - crs_differs: a 50m country declared "crs":"EPSG:3857";
//   - mercator_as_4326: a 50m country projected to Web Mercator metres and
//     declared "crs":"EPSG:4326";
//   - large: land-10m's MultiPolygon, densified to about [LargeBytes]
//     (about a million positions) by splitting every segment in n or n+1
//     alternately (the added vertices lie on the segments, within
//     rounding). TopoJSON's quantization leaves about 3% of land-10m's
//     polygons invalid, Eurasia and Africa among them, and a few touching
//     each other; with a [Checker] those are left out, so that the large
//     event is valid and GEOS does all of its work on it.
//
// The 241 countries of countries-50m take the five corruptions in turn.
package benchcorpus

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// Version names the corpus layout; a change of the generator changes it,
// so that a cached corpus of another version is not reused.
const Version = "v1"

// WorldAtlasVersion is the npm world-atlas release the corpus is made
// from (scripts/benchcorpus/package-lock.json pins its integrity hash).
const WorldAtlasVersion = "2.0.2"

// LargeBytes is about the size the large event is densified to.
const LargeBytes = 40 << 20

// Checker checks a GeoJSON geometry. It returns ok for a valid one, and
// otherwise the index of the MultiPolygon member at fault, or -1.
type Checker func(geometry []byte) (part int, ok bool)

// Stats describes a generated corpus.
type Stats struct {
	// Events is the number of events; Bytes their total size, newlines
	// included.
	Events, Bytes int
	// ByVariant counts the events of each variant ("real", "bowtie", …).
	ByVariant map[string]int
	// Largest is the size in bytes of the largest event, and
	// LargestVertices its number of positions.
	Largest, LargestVertices int
	// Vertices is the number of positions over all events.
	Vertices int
	// LargeDropped is the number of land-10m polygons left out of the
	// large event because the Checker found them invalid.
	LargeDropped int
}

// topology is the part of a TopoJSON file the corpus reads.
type topology struct {
	Transform *struct {
		Scale     [2]float64 `json:"scale"`
		Translate [2]float64 `json:"translate"`
	} `json:"transform"`
	Objects map[string]struct {
		Type       string    `json:"type"`
		Geometries []object  `json:"geometries"`
		Arcs       arcsValue `json:"arcs"`
	} `json:"objects"`
	Arcs [][][2]float64 `json:"arcs"`
}

type object struct {
	Type       string            `json:"type"`
	ID         string            `json:"id"`
	Arcs       arcsValue         `json:"arcs"`
	Properties map[string]string `json:"properties"`
}

// arcsValue is a Polygon's [][]int or a MultiPolygon's [][][]int.
type arcsValue json.RawMessage

func (a *arcsValue) UnmarshalJSON(b []byte) error {
	*a = append((*a)[:0], b...)
	return nil
}

type ring [][2]float64
type polygon []ring

// decoder turns TopoJSON arcs into positions.
type decoder struct {
	t    *topology
	arcs [][][2]float64 // dequantized, absolute
}

func newDecoder(t *topology) *decoder {
	d := &decoder{t: t, arcs: make([][][2]float64, len(t.Arcs))}
	for i, a := range t.Arcs {
		out := make([][2]float64, len(a))
		var x, y float64
		for k, p := range a {
			if t.Transform == nil {
				out[k] = p
				continue
			}
			x += p[0]
			y += p[1]
			// Two roundings, as in JavaScript (no fused multiply-add).
			sx := float64(x * t.Transform.Scale[0])
			sy := float64(y * t.Transform.Scale[1])
			out[k] = [2]float64{sx + t.Transform.Translate[0], sy + t.Transform.Translate[1]}
		}
		d.arcs[i] = out
	}
	return d
}

// ring joins arcs into a ring as topojson-client does: each arc after the
// first drops its first position (the previous arc's last), a negative
// index ~i is arc i reversed, and a ring of fewer than four positions is
// padded with its first.
func (d *decoder) ring(idx []int) (ring, error) {
	var r ring
	for _, i := range idx {
		j := i
		if i < 0 {
			j = ^i
		}
		if j >= len(d.arcs) {
			return nil, fmt.Errorf("benchcorpus: arc %d of %d", j, len(d.arcs))
		}
		a := d.arcs[j]
		if len(r) > 0 {
			r = r[:len(r)-1]
		}
		start := len(r)
		r = append(r, a...)
		if i < 0 {
			for l, h := start, len(r)-1; l < h; l, h = l+1, h-1 {
				r[l], r[h] = r[h], r[l]
			}
		}
	}
	for len(r) > 0 && len(r) < 4 {
		r = append(r, r[0])
	}
	return r, nil
}

func (d *decoder) polygons(typ string, raw arcsValue) ([]polygon, error) {
	var rings [][]int
	switch typ {
	case "Polygon":
		if err := json.Unmarshal(raw, &rings); err != nil {
			return nil, err
		}
		p, err := d.polygon(rings)
		return []polygon{p}, err
	case "MultiPolygon":
		var mp [][][]int
		if err := json.Unmarshal(raw, &mp); err != nil {
			return nil, err
		}
		out := make([]polygon, 0, len(mp))
		for _, polys := range mp {
			p, err := d.polygon(polys)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		return out, nil
	}
	return nil, fmt.Errorf("benchcorpus: geometry type %q", typ)
}

func (d *decoder) polygon(rings [][]int) (polygon, error) {
	p := make(polygon, 0, len(rings))
	for _, idx := range rings {
		r, err := d.ring(idx)
		if err != nil {
			return nil, err
		}
		p = append(p, r)
	}
	return p, nil
}

// feature is one event before it is written.
type feature struct {
	id      string
	name    string
	scale   string
	variant string
	crs     string // "" for none
	polys   []polygon
	multi   bool
	nanAt   int // vertex of the first ring whose x is written NaN, or -1
	split   int // > 1: split segments in split-1 and split parts alternately
}

func readTopology(dir, name string) (*topology, error) {
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		return nil, err
	}
	var t topology
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("benchcorpus: %s: %w", name, err)
	}
	return &t, nil
}

// countries decodes the countries object of countries-<scale>.
func countries(dir, scale string) ([]feature, error) {
	t, err := readTopology(dir, "countries-"+scale)
	if err != nil {
		return nil, err
	}
	d := newDecoder(t)
	var out []feature
	for i, o := range t.Objects["countries"].Geometries {
		if o.Type != "Polygon" && o.Type != "MultiPolygon" {
			continue // a few territories have no geometry
		}
		polys, err := d.polygons(o.Type, o.Arcs)
		if err != nil {
			return nil, fmt.Errorf("benchcorpus: countries-%s %d: %w", scale, i, err)
		}
		id := o.ID
		if id == "" {
			id = "x" + strconv.Itoa(i)
		}
		out = append(out, feature{id: "ne" + scale + "-" + id + "-" + strconv.Itoa(i), name: o.Properties["name"], scale: scale,
			variant: "real", polys: polys, multi: o.Type == "MultiPolygon", nanAt: -1})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("benchcorpus: countries-%s has no countries", scale)
	}
	return out, nil
}

// land decodes land-10m's MultiPolygon.
func land(dir string) (feature, error) {
	t, err := readTopology(dir, "land-10m")
	if err != nil {
		return feature{}, err
	}
	o, ok := t.Objects["land"]
	if !ok || len(o.Geometries) != 1 {
		return feature{}, errors.New("benchcorpus: land-10m has no single land geometry")
	}
	g := o.Geometries[0]
	polys, err := newDecoder(t).polygons(g.Type, g.Arcs)
	if err != nil {
		return feature{}, err
	}
	return feature{id: "ne10m-land-dense", name: "Land", scale: "10m", variant: "large",
		polys: polys, multi: true, nanAt: -1}, nil
}

// corrupt returns the i-th corruption of f (the five take turns).
func corrupt(f feature, i int) feature {
	f.polys = clonePolys(f.polys)
	outer := f.polys[0][0]
	switch i % 5 {
	case 0:
		f.variant = "bowtie"
		// Swap the first vertex after the start with the middle one: the
		// edges into and out of them now cross the ring.
		if m := len(outer) / 2; m > 1 {
			outer[1], outer[m] = outer[m], outer[1]
		}
	case 1:
		f.variant = "nan"
		f.nanAt = min(2, len(outer)-1)
	case 2:
		f.variant = "unclosed"
		f.polys[0][0] = outer[:len(outer)-1]
	case 3:
		f.variant, f.crs = "crs_differs", "EPSG:3857"
	case 4:
		f.variant, f.crs = "mercator_as_4326", "EPSG:4326"
		for _, p := range f.polys {
			for _, r := range p {
				for k, q := range r {
					r[k] = mercator(q)
				}
			}
		}
	}
	f.id += "-" + f.variant
	return f
}

// mercator projects lon/lat to Web Mercator (EPSG:3857) metres.
func mercator(p [2]float64) [2]float64 {
	const r = 6378137.0
	lat := math.Max(-85.06, math.Min(85.06, p[1]))
	return [2]float64{r * p[0] * math.Pi / 180, r * math.Log(math.Tan(math.Pi/4+lat*math.Pi/360))}
}

func clonePolys(ps []polygon) []polygon {
	out := make([]polygon, len(ps))
	for i, p := range ps {
		out[i] = make(polygon, len(p))
		for j, r := range p {
			out[i][j] = append(ring(nil), r...)
		}
	}
	return out
}

// Generate writes the corpus, one event per line, made from the
// world-atlas files in dir (the package's directory in node_modules).
// check, when not nil, makes the large event valid (see the package
// documentation).
func Generate(dir string, w io.Writer, check Checker) (Stats, error) {
	var all []feature
	var c50 []feature
	for _, scale := range []string{"110m", "50m", "10m"} {
		fs, err := countries(dir, scale)
		if err != nil {
			return Stats{}, err
		}
		all = append(all, fs...)
		if scale == "50m" {
			c50 = fs
		}
	}
	for i, f := range c50 {
		all = append(all, corrupt(f, i))
	}
	big, err := land(dir)
	if err != nil {
		return Stats{}, err
	}
	dropped := 0
	if check != nil {
		dropped = keepValid(&big, check)
	}
	// Densify: size grows with the average number of parts per segment.
	plain, _ := appendGeometry(nil, big)
	big.split = LargeBytes/len(plain) + 1
	if check != nil {
		n, err := keepValidTogether(&big, check)
		if err != nil {
			return Stats{}, err
		}
		dropped += n
	}
	all = append(all, big)

	st := Stats{ByVariant: map[string]int{}, LargeDropped: dropped}
	bw := bufio.NewWriterSize(w, 1<<20)
	var buf []byte
	for _, f := range all {
		var n int
		buf, n = appendFeature(buf[:0], f)
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return Stats{}, err
		}
		st.Events++
		st.Bytes += len(buf)
		st.Vertices += n
		st.ByVariant[f.variant]++
		if len(buf) > st.Largest {
			st.Largest, st.LargestVertices = len(buf), n
		}
	}
	return st, bw.Flush()
}

// keepValid drops the polygons of f that check finds invalid alone, and
// returns how many it dropped.
func keepValid(f *feature, check Checker) int {
	keep := f.polys[:0:0]
	for _, p := range f.polys {
		b, _ := appendGeometry(nil, feature{polys: []polygon{p}, multi: true, nanAt: -1, split: f.split})
		if _, ok := check(b); ok {
			keep = append(keep, p)
		}
	}
	n := len(f.polys) - len(keep)
	f.polys = keep
	return n
}

// keepValidTogether drops polygons of f, one at a time, until check finds
// f valid, and returns how many it dropped.
func keepValidTogether(f *feature, check Checker) (int, error) {
	dropped := keepValid(f, check)
	for {
		b, _ := appendGeometry(nil, *f)
		part, ok := check(b)
		if ok {
			return dropped, nil
		}
		if part < 0 || part >= len(f.polys) {
			return 0, fmt.Errorf("benchcorpus: the large geometry is invalid at no polygon (%d)", part)
		}
		f.polys = append(f.polys[:part:part], f.polys[part+1:]...)
		dropped++
	}
}

// appendFeature appends f as a GeoJSON Feature and returns the number of
// positions written.
func appendFeature(b []byte, f feature) ([]byte, int) {
	b = append(b, `{"type":"Feature","id":`...)
	b = strconv.AppendQuote(b, f.id)
	if f.crs != "" {
		b = append(b, `,"crs":`...)
		b = strconv.AppendQuote(b, f.crs)
	}
	b = append(b, `,"properties":{"name":`...)
	b = strconv.AppendQuote(b, f.name)
	b = append(b, `,"scale":`...)
	b = strconv.AppendQuote(b, f.scale)
	b = append(b, `,"variant":`...)
	b = strconv.AppendQuote(b, f.variant)
	b = append(b, `,"source":"Natural Earth via world-atlas `+WorldAtlasVersion+`"},"geometry":`...)
	b, n := appendGeometry(b, f)
	return append(b, '}'), n
}

// appendGeometry appends f's geometry object.
func appendGeometry(b []byte, f feature) ([]byte, int) {
	b = append(b, `{"type":`...)
	if f.multi {
		b = append(b, `"MultiPolygon","coordinates":[`...)
	} else {
		b = append(b, `"Polygon","coordinates":`...)
	}
	n := 0
	for i, p := range f.polys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for j, r := range p {
			if j > 0 {
				b = append(b, ',')
			}
			nan := -1
			if i == 0 && j == 0 {
				nan = f.nanAt
			}
			var k int
			b, k = appendRing(b, r, nan, f.split)
			n += k
		}
		b = append(b, ']')
	}
	if f.multi {
		b = append(b, ']')
	}
	return append(b, '}'), n
}

func appendRing(b []byte, r ring, nanAt int, split int) ([]byte, int) {
	b = append(b, '[')
	n := 0
	pos := func(p [2]float64, nan bool) {
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		if nan {
			b = append(b, "NaN"...)
		} else {
			b = strconv.AppendFloat(b, p[0], 'f', -1, 64)
		}
		b = append(b, ',')
		b = strconv.AppendFloat(b, p[1], 'f', -1, 64)
		b = append(b, ']')
		n++
	}
	for k, p := range r {
		if split > 1 && k > 0 {
			q := r[k-1]
			parts := split - 1 + k%2
			for s := 1; s < parts; s++ {
				t := float64(s) / float64(parts)
				pos([2]float64{q[0] + t*(p[0]-q[0]), q[1] + t*(p[1]-q[1])}, false)
			}
		}
		pos(p, k == nanAt)
	}
	return append(b, ']'), n
}
